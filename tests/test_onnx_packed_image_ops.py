"""torch.onnx.searchsorted and torch.onnx.cummax: torchlib has no translation for either, and the agent's
packed-image rows (Qwen2-VL and its family) use both: searchsorted finds each patch's image, cummax carries each
token's image and run start forward. Both halves for each on a module that uses it as those rows do, with its
other forms: without the row the conversion stops at the operator; with it onnxruntime matches eager at other
sizes, every output exactly. Then the model where they were found, Qwen2-VL's prefill, which needs both."""

import pytest
import torch

import autopatch
import proving
from autopatch import onnx_inputs
from conftest import ONNX_ROWS, requires

pytestmark = ONNX_ROWS

ROW = "torch.onnx.searchsorted"
CUMMAX = "torch.onnx.cummax"


class Locate(torch.nn.Module):
    """Items laid out group after group (``counts[g]`` items in group g): each item's group, with the other
    forms of searchsorted beside it."""

    def forward(self, counts, values, rows):
        ends = counts.cumsum(0)
        item = torch.arange(values.shape[0])
        group = torch.searchsorted(ends, item, right=True)
        return (group, torch.searchsorted(ends, item), torch.searchsorted(ends, item, side="right", out_int32=True),
                torch.searchsorted(rows.sort(-1).values, values.unsqueeze(0).expand(rows.shape[0], -1)))


def _inputs(groups, items, seed):
    gen = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 4, (groups,), generator=gen)
    return counts, torch.randn(items, generator=gen), torch.randn(3, 6, generator=gen)


def _export():
    dims = torch.export.Dim.DYNAMIC
    return proving.export_onnx(Locate(), _inputs(4, 7, 0), shapes=({0: dims}, {0: dims}, {1: dims}))


def test_without_the_row_the_conversion_stops_at_searchsorted(make_agent):
    make_agent(selection=f"all,-{ROW}")
    proving.assert_conversion_stops_at(_export, "aten.searchsorted")


@pytest.mark.parametrize("sizes", [(6, 11), (1, 1), (3, 0)], ids=["6x11", "1x1", "empty"])
def test_with_the_row_onnxruntime_matches_eager_exactly(make_agent, sizes):
    make_agent()
    program = _export()
    assert autopatch.last_export_report()["patches"][ROW] >= 4
    inputs = _inputs(*sizes, seed=1)
    expected = Locate()(*inputs)
    got = program(*inputs)
    for got_leaf, expected_leaf in zip(got, expected, strict=True):
        got_leaf = torch.as_tensor(got_leaf)
        assert got_leaf.dtype == expected_leaf.dtype and torch.equal(got_leaf, expected_leaf)


class CarryForward(torch.nn.Module):
    """The latest flagged position carried forward along a row (-1 before the first), and a running maximum of
    values with ties, along a middle axis."""

    def forward(self, flags, values):
        carried = torch.where(flags, torch.arange(flags.shape[1]), -1).cummax(dim=-1)
        running = torch.cummax(values, dim=1)
        return carried.values, carried.indices, running.values, running.indices


def _cummax_inputs(rows, length, seed):
    gen = torch.Generator().manual_seed(seed)
    values = torch.randint(0, 4, (rows, length, 3), generator=gen).float()  # few distinct values: ties
    return torch.rand(rows, length, generator=gen) > 0.6, values


def _export_cummax():
    dims = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    return proving.export_onnx(CarryForward(), _cummax_inputs(2, 5, 0), shapes=(dims, dims))


def test_without_the_cummax_row_the_conversion_stops_at_cummax(make_agent):
    make_agent(selection=f"all,-{CUMMAX}")
    proving.assert_conversion_stops_at(_export_cummax, "aten.cummax")


@pytest.mark.parametrize("sizes", [(3, 9), (1, 1)], ids=["3x9", "1x1"])
def test_with_the_cummax_row_onnxruntime_matches_eager_exactly(make_agent, sizes):
    make_agent()
    program = _export_cummax()
    assert autopatch.last_export_report()["patches"][CUMMAX] >= 2
    inputs = _cummax_inputs(*sizes, seed=1)
    for got_leaf, expected_leaf in zip(program(*inputs), CarryForward()(*inputs), strict=True):
        got_leaf = torch.as_tensor(got_leaf)
        assert got_leaf.dtype == expected_leaf.dtype and torch.equal(got_leaf, expected_leaf)


@requires("transformers>=5")
def test_qwen2_vl_prefill_through_onnx(make_agent):
    """The catalogue's packed Qwen2-VL: the prefill converted from one set of images, run by onnxruntime on
    another batch, text length and image grids, every output leaf."""
    from autopatch.models import packed_vlms

    make_agent()
    model = packed_vlms.build("qwen2_vl")
    other = packed_vlms.others("qwen2_vl")[0]  # three images, one of two frames, batch 3, another text length
    program = proving.export_onnx(model, packed_vlms.traced("qwen2_vl"), shapes=packed_vlms.dynamic_shapes("qwen2_vl"))
    used = autopatch.last_export_report()["patches"]
    assert used[ROW] >= 1 and used[CUMMAX] >= 1
    got = onnx_inputs.run(program, **other)
    with torch.no_grad():
        expected = model(**other)
    proving.assert_same_outputs(got, expected, rtol=1e-4, atol=1e-4)
