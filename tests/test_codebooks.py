"""MusicGen's and MusicGen-Melody's decode step (``autopatch/areas/codebooks``, with the torch rows
``torch.export.derived_size_ranges*``): ids packed as (batch * codebooks, length), four codebooks as the config
classes (and released checkpoints) have them, traced at batch 2 and run at batch 3 and batch 1, the batch a user's
generate loop starts from."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from packaging.version import Version

import proving
from autopatch.areas.codebooks.rows import PACKED_DECODERS
from autopatch.models import tiny
from proving import Proof

#: The codebooks rows' versions (4.57's decode step fails in eager itself); the torch rows' test runs on every one.
ROWS_VERSIONS = pytest.mark.requires("transformers>=5")
RANGES = ("torch.export.derived_size_ranges", "torch.export.derived_size_ranges_alias")
#: torch < 2.14: the agent's torch.export.range_constraints_varkw rebuilds the range constraints itself, calling
#: make_constraints from torch._export.non_strict_utils (the first row) rather than torch.export._trace's alias.
VARKW_REBUILDS = Version(torch.__version__.split("+")[0]) < Version("2.14")
#: Without either, the program refuses batch 1: the batch divided out of the ids, or the ids' bound derived from it.
REFUSES_BATCH_ONE = r"Guard failed: .*(!= 1|>= 8)"


def decode_case(model_type: str, rows: tuple, fails_with: str, strict: bool = False) -> Proof:
    """The tiny catalogue's decode step: traced at batch 2 (8 rows of ids), the other sets at batch 3 and 1."""
    arch = tiny.architecture(model_type, "causal")

    def build():
        model = tiny.build(arch)
        sets = [tiny.inputs(model, arch, "decode", k) for k in range(3)]
        assert [s["input_ids"].shape[0] for s in sets] == [8, 12, 4], "4 codebooks at batch 2, 3 and 1"
        assert model.config.num_codebooks == 4
        return model, sets[0], sets[1], sets[1:]

    return Proof(f"{model_type}/decode" + "-strict" * strict, build, rows=rows, fails_with=fails_with,
                 beside=("all",), strict=strict, fails_at_run=not strict)


@ROWS_VERSIONS
@pytest.mark.parametrize("model_type", [model for model, _, _ in PACKED_DECODERS])
def test_decode_refuses_batch_one_without_the_row_and_matches_eager_with_it(make_agent, model_type):
    proving.prove(decode_case(model_type, (f"transformers.codebooks.{model_type}_batch_from_cache",),
                              REFUSES_BATCH_ONE), make_agent)


@ROWS_VERSIONS
@pytest.mark.parametrize("model_type", [model for model, _, _ in PACKED_DECODERS])
def test_strict_decode_fails_on_layerdrops_draw_without_the_row(make_agent, model_type):
    proving.prove(decode_case(model_type, (f"transformers.codebooks.{model_type}_batch_from_cache",),
                              "additional input", strict=True), make_agent)


@ROWS_VERSIONS
def test_the_ids_bound_derived_from_the_batch_refused_batch_one_without_the_torch_rows(make_agent):
    """The decoder's row alone makes the batch the cache's dim; the ids, 4 x that dim, still carried its traced
    lower bound (8) into the program's checks until the torch rows lift it. Export calls make_constraints under
    one of its two names: torch.export._trace's, or (torch < 2.14, through torch.export.range_constraints_varkw's
    rebuild) non_strict_utils' own; the other row is left out of both halves."""
    used, other = RANGES if VARKW_REBUILDS else RANGES[::-1]
    case = decode_case("musicgen", (used,), r"Guard failed: input_ids.size\(\)\[0\] >= 8")
    proving.prove(dataclasses.replace(case, beside=("all", f"-{other}")), make_agent)


class Packed(torch.nn.Module):
    """ids (batch * 4, length) unpacked by the batch a cache of keys (batch, heads, past, dim) holds, as MusicGen's
    decode step does with the row."""

    def forward(self, ids, keys):
        unpacked = ids.reshape(keys.shape[0], 4, ids.shape[-1]).float()
        new = unpacked.sum(1)[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[-1])
        return torch.cat([keys, new], dim=2)


def _packed(batch: int, length: int, past: int) -> tuple:
    generator = torch.Generator().manual_seed(batch * 100 + length)
    return (torch.randint(0, 9, (batch * 4, length), generator=generator),
            torch.randn(batch, 2, past, 3, generator=generator))


def test_a_derived_size_runs_at_batch_one_and_a_users_own_minimum_stays(make_agent):
    """Any program: an input size derived from a dynamic dim runs at batch 1 with the rows (and matches eager at
    1 and 3), refuses it without them; a minimum the user declared (Dim min=3) is still checked with them."""
    model = Packed()
    runs = [_packed(1, 2, 4), _packed(3, 5, 2)]
    dynamic = torch.export.Dim.DYNAMIC
    shapes = ({0: dynamic, 1: dynamic}, {0: dynamic, 2: dynamic})
    without = make_agent(proving.registry.PATCHES, ",".join(["all", *(f"-{row}" for row in RANGES)]))
    try:
        program = torch.export.export(model, _packed(2, 3, 5), dynamic_shapes=shapes)
        with pytest.raises(AssertionError, match=r">= 8"):
            program.module()(*runs[0])
    finally:
        without.disable()
    own = make_agent(proving.registry.PATCHES, "all")
    try:
        program = torch.export.export(model, _packed(2, 3, 5), dynamic_shapes=shapes)
        for inputs in runs:
            torch.testing.assert_close(program.module()(*inputs), model(*inputs))
        assert own.records[RANGES[1]].hits + own.records[RANGES[0]].hits > 0
        at_least_three = torch.export.Dim("batch", min=3)
        declared = ({0: 4 * at_least_three, 1: dynamic}, {0: at_least_three, 2: dynamic})
        program = torch.export.export(model, _packed(3, 3, 5), dynamic_shapes=declared)
        with pytest.raises(AssertionError, match=r">= 12"):
            program.module()(*_packed(2, 2, 4))
        torch.testing.assert_close(program.module()(*runs[1]), model(*runs[1]))
    finally:
        own.disable()
