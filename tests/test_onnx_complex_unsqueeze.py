"""torch.onnx.complex_unsqueeze: torch.onnx.export holds complex tensors as their real view and has no translation
of unsqueeze for them, so a RoPE computed in complex numbers (DeepSeek-V2, Llama 4) stopped at conversion. Both
halves on a module that rotates as they do, unsqueezing at a non-negative and at a negative dim: without the row
the conversion stops at unsqueeze; with it onnxruntime matches eager at other sizes. Then the model where it was
found, DeepSeek-V2's decode step, every leaf."""

import pytest
import torch

import autopatch
import proving
from autopatch import onnx_inputs
from autopatch.models import tiny
from conftest import ONNX_ROWS

pytestmark = ONNX_ROWS

ROW = "torch.onnx.complex_unsqueeze"


class ComplexRotation(torch.nn.Module):
    """Pairs of features rotated by angles, in complex numbers: the frequencies unsqueezed for the heads at a
    negative dim (-2: counted past the real view's last axis), or at non-negative ones (heads, then batch)."""

    def forward(self, x, angles):
        freqs = torch.polar(torch.ones_like(angles), angles)  # [seq, pairs], complex
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # [batch, seq, heads, pairs]
        per_head = torch.view_as_real(pairs * freqs.unsqueeze(-2)).flatten(3)
        return per_head, torch.view_as_real(pairs * freqs.unsqueeze(1).unsqueeze(0)).flatten(3)


def _export():
    dims = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    return proving.export_onnx(ComplexRotation(), (torch.randn(2, 3, 2, 8), torch.randn(3, 4)),
                               shapes=(dims, {0: dims[1]}))


def test_without_the_row_the_conversion_stops_at_complex_unsqueeze(make_agent):
    make_agent(selection=f"all,-{ROW}")
    proving.assert_conversion_stops_at(_export, "aten.unsqueeze")


@pytest.mark.parametrize("sizes", [(3, 5), (1, 1)], ids=["3x5", "1x1"])
def test_with_the_row_onnxruntime_matches_eager(make_agent, sizes):
    make_agent()
    program = _export()
    assert autopatch.last_export_report()["patches"][ROW] >= 3
    batch, seq = sizes
    x, angles = torch.randn(batch, seq, 2, 8), torch.randn(seq, 4)
    proving.assert_onnx_matches(program(x, angles), list(ComplexRotation()(x, angles)), rtol=1e-5, atol=1e-5)


def test_deepseek_v2_decode_through_onnx(make_agent):
    """The tiny DeepSeek-V2 of the catalogue (its config class's own RoPE settings): the decode step converted
    from one input set, run by onnxruntime on another batch, past and step length, every output leaf."""
    make_agent()
    torch.manual_seed(0)
    arch = tiny.architecture("deepseek_v2", "causal")
    model = tiny.build(arch)
    traced, other = (tiny.inputs(model, arch, "decode", k) for k in (0, 2))
    program = proving.export_onnx(model, traced, tiny.inputs(model, arch, "decode", 1))
    assert autopatch.last_export_report()["patches"][ROW] >= 1
    got = onnx_inputs.run(program, **other)
    with torch.no_grad():
        expected = model(**other)
    proving.assert_same_outputs(got, expected, rtol=1e-4, atol=1e-4)
