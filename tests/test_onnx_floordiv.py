"""torch.onnx.floordiv_rounds_down: torch.export records arithmetic on sizes as Python operators, and torchlib
translates ``//`` between them as ONNX Div, which truncates toward zero where Python rounds down.

Both halves on a module that sizes its outputs as models do: the ceiling idiom ``-(-n // k)`` (how many blocks of
``k`` hold ``n`` items) and ``(n - 1) // k`` at ``n = 0``. Without the row the ONNX model runs and answers other
sizes than eager: silently wrong, not a failure. With it onnxruntime matches eager on values other than the traced
ones, each sign. Then the model where it was found: 4.x Reformer cuts its axial position table to ``-(-(max_id +
1) // width)`` columns; without the row onnxruntime refuses the gather that reached past the short cut, with it the
prefill matches eager at other batches and lengths, every leaf."""

import torch

import autopatch
import proving
from autopatch import onnx_inputs
from autopatch.models import tiny
from conftest import ONNX_ROWS, requires

pytestmark = ONNX_ROWS

ROW = "torch.onnx.floordiv_rounds_down"


class Blocks(torch.nn.Module):
    """From the largest id: how many blocks of 4 hold ids 0..max (the ceiling idiom), and the block of the id
    before the smallest one, ``(min - 1) // 4``, which is -1 when the smallest id is 0. Both returned as the
    lengths of slices of ``table``, the way a model uses them."""

    def forward(self, ids, table):
        largest, smallest = ids.max().item(), ids.min().item()
        blocks = -(-(largest + 1) // 4)
        before = (smallest - 1) // 4 + 2  # 1 when the smallest id is 0 (-1 + 2), 2 from 1 to 4
        return table[:blocks], table[:before]


#: Sets of ids whose answers differ between rounding down and truncating (every one has a remainder).
IDS = ([0, 6], [2, 9, 1], [0, 1, 2, 3, 13])


def _export():
    return proving.export_onnx(Blocks(), (torch.tensor([1, 5]), torch.arange(10.0)),
                               shapes=({0: torch.export.Dim.DYNAMIC}, None))


def _runs(program):
    table = torch.arange(10.0)
    for ids in IDS:
        ids = torch.tensor(ids)
        yield program(ids, table), list(Blocks()(ids, table))


def test_without_the_row_the_onnx_model_answers_other_sizes(make_agent):
    make_agent(selection=f"all,-{ROW}")
    for got, expected in _runs(_export()):
        assert [len(g) for g in got] != [len(e) for e in expected]


def test_with_the_row_onnxruntime_matches_eager(make_agent):
    make_agent()
    program = _export()
    assert autopatch.last_export_report()["patches"][ROW] >= 2
    for got, expected in _runs(program):
        proving.assert_onnx_matches(got, expected, rtol=0, atol=0)


def _reformer():
    torch.manual_seed(0)
    arch = tiny.architecture("reformer", "causal")
    model = tiny.build(arch)
    return model, [tiny.inputs(model, arch, "prefill", k) for k in range(3)]


@requires("transformers<5")  # 5.x counts the columns as (max_id + width) // width, both positive
def test_reformer_prefill_fails_at_run_without_the_row(make_agent):
    make_agent(selection=f"all,-{ROW}")
    model, (traced, other, run) = _reformer()
    program = proving.export_onnx(model, traced, other)
    try:
        onnx_inputs.run(program, **run)
    except Exception as error:  # onnxruntime's Fail: a class of its own
        assert "GatherElements" in str(error), str(error)[:300]
    else:
        raise AssertionError("onnxruntime ran the Reformer prefill cut one column short")


@requires("transformers<5")
def test_reformer_prefill_matches_eager_with_the_row(make_agent):
    make_agent()
    model, (traced, other, run) = _reformer()
    program = proving.export_onnx(model, traced, other)
    assert autopatch.last_export_report()["patches"][ROW] >= 1
    proving.assert_onnx_runs_match(program, model, [traced, run], rtol=1e-4, atol=1e-4)
