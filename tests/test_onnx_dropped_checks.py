"""torch.onnx.dropped_check_conditions: torch.onnx.export erases the program's run-time checks but translates the
conditions they checked, and a bound past int64 stops the conversion ("Python int too large to convert to C long").
Both halves on a module whose checks state such bounds, one of them through size arithmetic (a node that only fed a
condition, erased in turn); outside an export, torch's pass as it is; then Idefics2's prefill, where it was found
(transformers 5.12, whose unbacked patch count is bounded by 16 times the unbounded size bound)."""

import pytest
import torch

import autopatch
import proving
from autopatch import onnx_inputs
from autopatch.models import vlms
from conftest import ONNX_ROWS

pytestmark = ONNX_ROWS

ROW = "torch.onnx.dropped_check_conditions"


class CheckedScale(torch.nn.Module):
    """Scales by a number read from a tensor, which the code states lies within bounds wider than int64, as
    torch.export states an unbacked size's range: three checks (``k <= 2**64``, ``k >= -2**70`` and the sum
    ``k + 2**70 >= 0`` torch adds for the lower one)."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k <= 2**64)
        torch._check(k >= -2**70)
        return x * k


def _export():
    return proving.export_onnx(CheckedScale(), (torch.rand(3, 4), torch.tensor(5)),
                               shapes=({0: torch.export.Dim.DYNAMIC}, None))


def test_without_the_row_the_conversion_overflows(make_agent):
    make_agent(selection=f"all,-{ROW}")
    proving.assert_conversion_stops_at(_export, "Python int too large to convert to C long")


def test_with_the_row_onnxruntime_matches_eager(make_agent):
    make_agent()
    program = _export()
    # The comparisons and the sum that only fed a check (the decomposed program may state one twice).
    assert autopatch.last_export_report()["patches"][ROW] >= 4
    for rows, number in ((5, -3), (1, 2**40)):
        x, n = torch.rand(rows, 4), torch.tensor(number)
        proving.assert_onnx_matches(program(x, n), [CheckedScale()(x, n)], rtol=0, atol=0)


def test_outside_an_export_torchs_pass_keeps_the_conditions(make_agent):
    """torch's remove_assertion_nodes run by hand (no export): the wrapper leaves its result as torch makes it."""
    make_agent()
    from torch.onnx._internal.exporter import _fx_passes

    module = torch.export.export(CheckedScale(), (torch.rand(3, 4), torch.tensor(5))).graph_module
    _fx_passes.remove_assertion_nodes(module)
    left = [node.target for node in module.graph.nodes if node.op == "call_function" and not node.users]
    assert left, "torch's pass leaves the conditions of the checks it erased"


def test_idefics2_vision_prefill_through_onnx(make_agent):
    """Idefics2's prefill (several images per sample), converted from one input set, run by onnxruntime at another
    batch, text length and images per sample, every leaf. On 5.12 the conversion stopped without the row."""
    make_agent()
    torch.manual_seed(0)
    model = vlms.build_idefics("idefics2")
    traced, second, other = (vlms.idefics_prefill(2, 5, 2, 1), vlms.idefics_prefill(3, 7, 3, 2),
                             vlms.idefics_prefill(4, 8, 2, 4))
    program = proving.export_onnx(model, traced, second)
    got = onnx_inputs.run(program, **other)
    with torch.no_grad():
        expected = model(**other)
    proving.assert_same_outputs(got, expected, rtol=1e-4, atol=1e-4)
