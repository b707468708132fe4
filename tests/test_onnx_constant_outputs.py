"""torch.onnx.constant_number_outputs: a model that returns plain numbers beside its tensors exports them as
constants of the program; torch.onnx leaves ``None`` out of the ONNX graph's outputs but stopped on a number. Both
halves on a module returning ints, a float and a bool among its tensors, then 4.x Switch Transformers (its router
losses are the int 0 without labels), run by onnxruntime at other sizes and rebuilt into the model's output tree."""

import copy

import torch

import autopatch
import proving
from autopatch import onnx_inputs
from autopatch.models import tiny
from conftest import ONNX_ROWS, requires

pytestmark = ONNX_ROWS

ROW = "torch.onnx.constant_number_outputs"


class NumbersBeside(torch.nn.Module):
    """A loss that is 0 without labels (an int), a float and a flag beside tensors, one of them None."""

    def forward(self, x):
        return {"hidden": x * 2, "loss": 0, "scale": 0.5, "routed": True, "nothing": None, "last": x.sum(-1)}


def _export():
    shapes = ({0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC},)
    return proving.export_onnx(NumbersBeside().eval(), (torch.randn(2, 5),), shapes=shapes)


def test_without_the_row_the_conversion_stops_on_the_number(make_agent):
    make_agent(selection=f"all,-{ROW}")
    proving.assert_conversion_stops_at(_export, "'int' object has no attribute 'name'")


def test_with_the_row_the_tensors_are_the_outputs_and_the_numbers_come_back(make_agent):
    make_agent()
    program = _export()
    assert autopatch.last_export_report()["patches"][ROW] == 1
    assert [value.name for value in program.model.graph.outputs] == ["hidden", "last"]
    assert any("3 constant number(s) (0, 0.5, True)" in note for note in autopatch.last_export_report()["notes"])
    for batch, width in ((3, 7), (1, 1)):
        x = torch.randn(batch, width)
        got = onnx_inputs.run(program, x)
        expected = NumbersBeside()(x)
        assert list(got) == list(expected) and got["nothing"] is None
        assert (got["loss"], got["scale"], got["routed"]) == (0, 0.5, True)
        torch.testing.assert_close(got["hidden"], expected["hidden"])
        torch.testing.assert_close(got["last"], expected["last"])


@requires("transformers<5")
def test_switch_transformers_forward_through_onnx(make_agent):
    """4.x Switch Transformers (the tiny catalogue's, its sparse layers the config's) without labels: converted
    from one input set, run by onnxruntime on other batches and lengths; every leaf and the structure compared,
    the four router losses (int 0) among them."""
    make_agent()
    arch = tiny.architecture("switch_transformers", "seq2seq")
    model = tiny.build(arch)
    traced, other, third = (tiny.inputs(model, arch, "forward", k) for k in range(3))
    program = proving.export_onnx(model, traced, other)
    assert autopatch.last_export_report()["patches"][ROW] == 1
    with torch.no_grad():
        losses = model(**copy.deepcopy(other))
    assert [type(losses[name]) for name in ("encoder_z_loss", "decoder_aux_loss")] == [int, int]  # the case
    proving.assert_onnx_runs_match(program, model, [other, third], rtol=1e-4, atol=1e-5)
