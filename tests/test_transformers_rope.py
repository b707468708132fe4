"""transformers.rope.dynamic: dynamic RoPE exports with dynamic sizes that cross max_position_embeddings.

Models use rope_type="dynamic" (factor 2) with max_position_embeddings=16; traced and compared sizes lie on
both sides of 16. Eager dynamic RoPE keeps state (it grows inv_freq after a long call), so every eager
reference runs on a fresh copy of the model, as the exported program (stateless) would.
"""

import copy

import pytest
import torch
import torch.export._trace  # noqa: F401
import transformers
import transformers.cache_utils  # noqa: F401
import transformers.modeling_rope_utils  # noqa: F401
from packaging.version import Version

import proving
from autopatch import registry, state
from autopatch.agent import Agent
from autopatch.areas.rope import dynamic as transformers_rope
from autopatch.models import builders, handmade
from conftest import run_py
from proving import Proof

PATCH = "transformers.rope.dynamic"
TF5 = Version(transformers.__version__) >= Version("5")
MODELS = ["llama", "qwen2"]


def build(name):
    """The hand-sized model with dynamic RoPE and a short original length (16), which the decode sets cross."""
    row = handmade.settings(name)
    return builders.make_model(row.config, row.model, **{**row.settings, "max_position_embeddings": 16,
                                                          **builders.rope("dynamic", factor=2.0)})


def prefill(batch, seq, seed):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(0, 128, (batch, seq), generator=g)}


def decode(model, config, batch, past, seq, seed):
    return builders.decode_inputs(copy.deepcopy(model), config, batch=batch, past=past, seq=seq, seed=seed)


def eager(model, inputs):
    """Eager on a fresh copy of the model: dynamic RoPE grows its inv_freq after a long call, the program does not."""
    with torch.no_grad():
        return copy.deepcopy(model)(**copy.deepcopy(inputs))


def _agent(ids):
    return Agent(registry.EXPORT_ENTRY_POINTS, [s for s in registry.PATCHES if s.id in ids or s.family == "pytree"])


def prefill_case(name, strict=False):
    def build_case():
        model, _ = build(name)
        runs = [prefill(3, 8, 3), prefill(1, 30, 4), prefill(2, 16, 5), prefill(2, 17, 6)]
        return model, prefill(2, 20, 1), prefill(3, 8, 2), runs

    return Proof(f"{name}/prefill", build_case, rows=(PATCH,), fails_with="data-dependent", strict=strict,
                 reference=eager)


def decode_case(name):
    def build_case():
        model, config = build(name)
        # positions end at 7 (below 16), 17 (just above), 15/16 (at the edge) and 45 (far above)
        runs = [decode(model, config, *sizes) for sizes in
                ((3, 5, 2, 3), (1, 12, 5, 4), (2, 15, 1, 5), (2, 14, 2, 6), (1, 40, 5, 7))]
        return model, decode(model, config, 2, 20, 3, 1), decode(model, config, 3, 5, 2, 2), runs

    return Proof(f"{name}/decode", build_case, rows=(PATCH,), fails_with="data-dependent", reference=eager)


#: The steps each model is proven on: a prefill across the original length, a decode step with its cache.
STEPS = {"prefill": prefill_case, "decode": decode_case}


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("name", MODELS)
def test_fails_without_the_patch(make_agent, name, step):
    proving.fails_without(STEPS[step](name), make_agent)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("name", MODELS)
def test_exports_and_matches_eager_at_other_sizes(make_agent, name, step):
    proving.exports_with(STEPS[step](name), make_agent)


def test_prefill_strict_fails_without_and_exports_with_the_patch(make_agent):
    proving.prove(prefill_case("llama", strict=True), make_agent)


def _rotary(model):
    return model.model.rotary_emb


def test_eager_is_unchanged_with_the_patch_active(agent):
    """The same sequence of calls on one model (long, short, long), state included, with and without."""
    sizes = [prefill(2, 20, 1), prefill(2, 8, 2), prefill(1, 30, 3), prefill(2, 17, 4)]

    def run(model):
        outs = []
        with torch.no_grad():
            for inputs in sizes:
                outs.append(model(**inputs).logits)
        rotary = _rotary(model)
        return outs, rotary.inv_freq.clone(), rotary.max_seq_len_cached

    reference, _ = build("llama")
    expected = run(reference)
    own = _agent({PATCH})
    own.enable("all")
    try:
        patched, _ = build("llama")
        got = run(patched)
    finally:
        own.disable()
    for a, b in zip(got[0], expected[0]):
        assert torch.equal(a, b)
    assert torch.equal(got[1], expected[1]) and got[2] == expected[2]


def _wrapper_counts():
    import transformers.modeling_rope_utils as rope_utils

    original = rope_utils.dynamic_rope_update
    original = getattr(original, "__autopatch_original__", original)
    original_code = original(lambda self, x, position_ids: None).__code__
    return len(transformers_rope._places(original_code)), len(transformers_rope._places(transformers_rope._WRAPPER_CODE))


def test_classes_decorated_before_activation_are_rewrapped_and_restored(agent):
    build("llama"), build("qwen2")  # their modeling modules are imported: decorated with the original
    import transformers.modeling_rope_utils as rope_utils

    before = rope_utils.dynamic_rope_update
    originals, ours = _wrapper_counts()
    assert originals >= 2 and ours == 0
    own = _agent({PATCH})
    own.enable("all")
    record = own.records[PATCH]
    assert record.state == state.APPLIED_LATE and f"{originals} already-decorated" in record.detail
    assert _wrapper_counts() == (0, originals)
    assert rope_utils.dynamic_rope_update.__autopatch_original__ is before
    own.disable()
    assert record.state == state.DISABLED and record.detail == ""
    assert rope_utils.dynamic_rope_update is before
    assert _wrapper_counts() == (originals, 0)


def test_modules_imported_after_activation_use_the_new_decorator_and_are_restored():
    """A fresh interpreter: the agent is on before transformers' modeling modules are imported."""
    code = f"""
import sys, copy, torch
sys.path.insert(0, "tests")
import autopatch
from autopatch import registry
from autopatch.agent import Agent
own = Agent(registry.EXPORT_ENTRY_POINTS, [s for s in registry.PATCHES if s.id == {PATCH!r} or s.family == "pytree"])
own.enable("all")
import proving
import test_transformers_rope as t
model, _ = t.build("llama")
assert own.records[{PATCH!r}].state == "applied", own.records[{PATCH!r}]
assert "0 already-decorated" in own.records[{PATCH!r}].detail
program = proving.export(model, t.prefill(2, 20, 1), t.prefill(3, 8, 2))
for inputs in [t.prefill(1, 30, 4), t.prefill(3, 8, 3)]:
    proving.assert_same_outputs(program.module()(**inputs), t.eager(model, inputs))
counts = t._wrapper_counts()
assert counts[0] == 0 and counts[1] >= 1, counts
own.disable()
assert own.records[{PATCH!r}].detail == ""
assert t._wrapper_counts() == (counts[1], 0), t._wrapper_counts()
print("OK")
"""
    result = run_py(code)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_spec_fingerprints_match_the_installer():
    spec = proving.row(PATCH)
    assert transformers_rope.PYTHON_LONGROPE <= set(spec.fingerprints)
    import transformers.modeling_rope_utils as rope_utils
    from autopatch import fingerprint

    current = getattr(rope_utils.dynamic_rope_update, "__autopatch_original__", rope_utils.dynamic_rope_update)
    assert fingerprint.of(current) in spec.fingerprints


def _phi3_longrope(batch_sizes):
    """Phi-3 with longrope: short factors up to 8 positions, long ones past it (4.x and 5.3-5.12 branch on that
    in Python)."""
    model, config = handmade.build("phi3_longrope")
    return model, config, [decode(model, config, *sizes) for sizes in batch_sizes]


def longrope_case():
    def build_case():
        # traced ending at position 9 (long factors), run ending at 5 (short) and 20 (long)
        model, _, (traced, other, short, long) = _phi3_longrope(
            [(2, 6, 3, 1), (3, 9, 2, 2), (1, 3, 2, 3), (2, 15, 5, 4)])
        return model, traced, other, [short, long]

    return Proof("phi3/longrope_decode", build_case, rows=(PATCH,), fails_with="data-dependent", reference=eager)


# 5.13+ select longrope frequencies with torch.where themselves (the 5.23 fingerprint says so: no rewrite).
@pytest.mark.requires("transformers<5.13")
def test_longrope_decode_fails_without_the_patch_where_it_branches(make_agent):
    proving.fails_without(longrope_case(), make_agent)


@pytest.mark.requires("transformers<5.13")
def test_longrope_decode_exports_across_the_original_length_where_it_branches(make_agent):
    proving.exports_with(longrope_case(), make_agent)
