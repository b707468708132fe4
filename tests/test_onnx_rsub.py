"""torch.onnx.rsub_of_a_number: torch decomposes ``1.0 - mask`` into ``sub(1.0, mask)``; for an integer mask
torch.onnx's type-promotion pass then finds no overload of ``sub`` taking a number first, and the conversion
stops. Both halves on a module that subtracts masks of several dtypes from numbers, the cases the row leaves to
torch beside it (uint8, which ONNX cannot negate; a float mask; alpha 2); then XLNet, where it was found, given a
padded batch's int64 mask; and the table outside an export, unchanged."""

import pytest
import torch

import autopatch
import proving
from autopatch import onnx_inputs
from autopatch.models import tiny
from conftest import ONNX_ROWS

pytestmark = ONNX_ROWS

ROW = "torch.onnx.rsub_of_a_number"


class InvertedMasks(torch.nn.Module):
    """What attention code does with a tokenizer's mask: ``1.0 - mask`` (XLNet, Mllama), an integer number minus
    it (no cast: torch's own decomposition), and ``rsub`` with alpha 2 of the float result (torch's too)."""

    def forward(self, mask, small):
        inverted = 1.0 - mask
        return inverted, 3 - mask, 1.5 - small, torch.rsub(inverted, 2.5, alpha=2), 7 - small.to(torch.uint8)


def _inputs(batch, seq, dtype=torch.int64):
    return torch.randint(0, 2, (batch, seq), dtype=dtype), torch.randint(0, 200, (seq,), dtype=torch.int32)


def _export(dtype=torch.int64):
    dims = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    return proving.export_onnx(InvertedMasks(), _inputs(2, 5, dtype), shapes=(dims, {0: dims[1]}))


def test_without_the_row_the_conversion_stops_at_sub(make_agent):
    make_agent(selection=f"all,-{ROW}")
    proving.assert_conversion_stops_at(_export, "Cannot find a compatible OpOverload for aten.sub")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float16], ids=str)
def test_with_the_row_onnxruntime_matches_eager_exactly(make_agent, dtype):
    make_agent()
    program = _export(dtype)
    # Numbers subtracted from an integer that needs a cast: 1.5 - small, and 1.0 - mask unless the mask is float.
    assert autopatch.last_export_report()["patches"][ROW] == (1 if dtype.is_floating_point else 2)
    for batch, seq in ((3, 7), (1, 1)):
        mask, small = _inputs(batch, seq, dtype)
        got = program(mask, small)
        expected = InvertedMasks()(mask, small)
        assert [torch.as_tensor(leaf).dtype for leaf in got] == [leaf.dtype for leaf in expected]
        proving.assert_onnx_matches(got, list(expected), rtol=0, atol=0)


def test_outside_an_export_the_table_is_torchs(make_agent):
    """The decomposition table torch.onnx builds is changed only while this thread exports."""
    make_agent()
    from torch.onnx._internal.exporter import _decomp

    table = _decomp.create_onnx_friendly_decomposition_table(set())
    original = _decomp.create_onnx_friendly_decomposition_table.__autopatch_original__(set())
    assert table[torch.ops.aten.rsub.Scalar] is original[torch.ops.aten.rsub.Scalar]


def test_xlnet_padded_prefill_through_onnx(make_agent):
    """The tiny XLNet of the catalogue (its config class's own settings) given a left-padded batch's int64
    attention mask: converted from one input set, run by onnxruntime on another batch and length, every leaf."""
    make_agent()
    torch.manual_seed(0)
    arch = tiny.architecture("xlnet", "causal")
    model = tiny.build(arch)
    # Tensors only: the padded sets also say use_cache=False, a constant the dynamic shapes cannot name.
    sets = (tiny.inputs(model, arch, "prefill", k, padded=True) for k in (0, 1, 2))
    traced, second, other = ({name: value for name, value in inputs.items() if isinstance(value, torch.Tensor)}
                             for inputs in sets)
    assert other["attention_mask"].dtype == torch.int64 and not other["attention_mask"].all()
    program = proving.export_onnx(model, traced, second)
    assert autopatch.last_export_report()["patches"][ROW] >= 1
    got = onnx_inputs.run(program, **other)
    with torch.no_grad():
        expected = model(**other)
    proving.assert_same_outputs(got, expected, rtol=1e-4, atol=1e-4)
