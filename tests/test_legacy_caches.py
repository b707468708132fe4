"""Caches of transformers 4.48-4.55 (issue 3), before 4.56's Cache(layers=...).

Run in CI on 4.48.3 (no cache is a pytree node; Cache is a torch.nn.Module), 4.52.4 (transformers registers
DynamicCache itself, with a torch.fx flatten spec that breaks every program) and 4.55.4 (caches of
CacheLayerMixin layers; transformers' own DynamicCache registration cannot be traced by strict=True). For each
row: the decode step fails without it (at export, or on the program's first call), exports with it and matches
eager, caches included, at batch sizes and past lengths other than traced."""

import contextlib

import pytest
import torch
import torch.utils._pytree as pytree
import transformers

import autopatch
import proving
from autopatch import diffs, registry
from autopatch.agent import Agent
from autopatch.models import builders, handmade, recurrent
from proving import Proof

pytestmark = pytest.mark.requires("transformers>=4.48,<4.56")

LEGACY = tuple(s.id for s in registry.PATCHES if s.id.startswith("pytree.legacy.")) + ("pytree.model_cache.mamba",)
ENCODER_DECODER = ("pytree.encoder_decoder_cache",)
#: transformers 4.48-4.50 cache code taking len() of a tensor (proven by its own test below).
LEN_OF_TENSOR = ("transformers.legacy.cache_seq_length", "transformers.legacy.cache_update")
#: Everything a decode step needs besides the cache rows: the torch family's defaults and LEN_OF_TENSOR.
TORCH = tuple(s.id for s in registry.PATCHES if s.family == "torch" and s.default) + LEN_OF_TENSOR
#: Without the rows: a cache that is no pytree node cannot take a dynamic_shapes spec; on 4.50-4.53, whose own
#: registration exports, the program's fx flattening hands the leaves over in the wrong order and its guards fail.
#: On 4.54-4.55, strict: that registration's unflatten builds DynamicCache(), whose __init__ dynamo cannot trace.
NOT_A_NODE = (r"Cannot associate shape .* to non-tensor type|Guard failed: past_key_values|inspect\.signature"
              r"|Unsupported input type|not supported or pytree-flattenable")
STRICT = pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
DYN = torch.export.Dim.DYNAMIC


def legacy_case(name, build_case, row, beside=TORCH, strict=False, shapes=None, also=()):
    """The decode step ``name`` proven on the legacy row ``row`` (and ``also``, rows it uses with it): the rest of
    LEGACY and ``beside`` on in both halves. Without the rows the failure is the export's, or (4.50-4.53's own
    registration exports) the program's on its first call: both are looked for."""
    rows = (row, *also)
    others = tuple(i for i in LEGACY if i not in rows)
    return Proof(name, build_case, rows=rows, fails_with=NOT_A_NODE, beside=(*beside, *others), strict=strict,
                 shapes=shapes, fails_at_run=True)


@contextlib.contextmanager
def patches(*ids):
    own = Agent(registry.EXPORT_ENTRY_POINTS, [s for s in registry.PATCHES if s.id in ids])
    own.enable(",".join(ids) if ids else "0")
    try:
        yield own
    finally:
        own.disable()


# ---------------------------------------------------------------------------------------------------------------
# DynamicCache
# ---------------------------------------------------------------------------------------------------------------


def _keys(cache):
    return [layer.keys for layer in cache.layers] if hasattr(cache, "layers") else list(cache.key_cache)


def _values(cache):
    return [layer.values for layer in cache.layers] if hasattr(cache, "layers") else list(cache.value_cache)


def _llama_step():
    model, config = handmade.build("llama")
    traced = builders.decode_inputs(model, config, batch=2, past=6, seq=3, seed=1)
    runs = [builders.decode_inputs(model, config, batch=b, past=p, seq=s, seed=p) for b, p, s in [(3, 9, 2), (1, 17, 1)]]
    return model, traced, runs[0], runs


def _llama_shapes(model):
    """As a user writes them for transformers' own layout: {key_cache, value_cache}, batch and length dynamic."""
    cache = [[{0: DYN, 2: DYN}] * model.config.num_hidden_layers] * 2
    return {"input_ids": {0: DYN, 1: DYN}, "attention_mask": {0: DYN, 1: DYN}, "past_key_values": cache}


def dynamic_case(strict=False):
    return legacy_case("llama/dynamic_cache", _llama_step, "pytree.legacy.dynamic_cache", strict=strict,
                       shapes=_llama_shapes)


def test_dynamic_cache_round_trip(agent):
    model, config = handmade.build("llama")
    cache = builders.decode_inputs(model, config, batch=2, past=5, seq=1)["past_key_values"]
    with patches("pytree.legacy.dynamic_cache") as own:
        assert own.records["pytree.legacy.dynamic_cache"].state in ("applied", "applied-late")
        leaves, spec = pytree.tree_flatten(cache)
        rebuilt = pytree.tree_unflatten(leaves, spec)
        # transformers' own layout: {key_cache, value_cache}, one tensor per layer; dynamic_shapes specs match it.
        assert [child.type for child in spec.children()] == [list, list]
        assert len(leaves) == 2 * config.num_hidden_layers
        assert all(a is b for a, b in zip(leaves, _keys(cache) + _values(cache)))
        assert type(rebuilt) is type(cache)
        assert rebuilt.get_seq_length() == cache.get_seq_length() == 5
        assert getattr(rebuilt, "_seen_tokens", None) == getattr(cache, "_seen_tokens", None)
        assert "5" not in repr(spec.context)  # the past length travels in the tensors, not the context
        assert pytree.tree_flatten(rebuilt)[1] == spec


@pytest.mark.parametrize("strict", [
    # 4.54-4.55's own registration exports non-strict and runs: only strict needs the row there.
    pytest.param(False, marks=pytest.mark.requires("transformers<4.54"), id="non-strict"),
    pytest.param(True, id="strict"),
])
def test_dynamic_cache_decode_fails_without_legacy_rows(make_agent, strict):
    proving.fails_without(dynamic_case(strict), make_agent)


@STRICT
def test_dynamic_cache_decode_with_legacy_rows(make_agent, strict):
    _, own = proving.exports_with(dynamic_case(strict), make_agent)
    if transformers.__version__ >= "4.50":
        detail = own.records["pytree.legacy.dynamic_cache"].detail
        assert "replaced the registration by transformers.cache_utils" in detail
        assert "torch.fx flatten spec" in detail


@pytest.mark.requires("transformers<4.51")
def test_len_of_tensor_in_cache_code_fixes_the_batch_without_rows(make_agent):
    # Non-strict: there len() of a fake tensor returns the traced size. Dynamo (strict=True) keeps it symbolic.
    others = tuple(i for i in TORCH if i not in LEN_OF_TENSOR)
    case = Proof("llama/len_of_tensor", _llama_step, rows=LEN_OF_TENSOR, fails_with="specialized it to be a constant",
                 beside=(*others, *LEGACY), shapes=_llama_shapes, fails_at_run=True)
    proving.fails_without(case, make_agent)


@pytest.mark.requires("transformers<4.51")
def test_len_of_tensor_rows_are_rewrites_of_that_expression_only(agent):
    with patches(*LEN_OF_TENSOR) as own:
        for patch_id in LEN_OF_TENSOR:
            record = own.records[patch_id]
            assert record.state in ("applied", "applied-late"), (patch_id, record.state, record.detail)
            diff = diffs.format_diff(record.spec)
            removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
            added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
            assert removed and all("len(self.key_cache[layer_idx]) == 0" in line for line in removed), diff
            assert all("is_empty(self.key_cache[layer_idx])" in line for line in added), diff


def test_disable_restores_transformers_registration(agent):
    from transformers import DynamicCache
    import torch.fx._pytree as fx_pytree

    before = (pytree.SUPPORTED_NODES.get(DynamicCache), fx_pytree.SUPPORTED_NODES.get(DynamicCache))
    with patches("pytree.legacy.dynamic_cache"):
        assert pytree.SUPPORTED_NODES[DynamicCache] is not before[0]
        assert DynamicCache not in fx_pytree.SUPPORTED_NODES
    assert (pytree.SUPPORTED_NODES.get(DynamicCache), fx_pytree.SUPPORTED_NODES.get(DynamicCache)) == before


# ---------------------------------------------------------------------------------------------------------------
# EncoderDecoderCache (bart)
# ---------------------------------------------------------------------------------------------------------------


def _bart_inputs(model, config, **sizes):
    inputs = builders.seq2seq_decode_inputs(model, config, **sizes)
    if isinstance(inputs["past_key_values"], tuple):  # these versions' bart still returns the legacy tuples
        inputs["past_key_values"] = transformers.EncoderDecoderCache.from_legacy_cache(inputs["past_key_values"])
    return inputs


def _bart_step():
    model, config = handmade.build("bart")
    traced = _bart_inputs(model, config, batch=2, source=7, past=5, seq=1, seed=1)
    runs = [_bart_inputs(model, config, batch=b, source=s, past=p, seq=1, seed=p) for b, s, p in [(3, 4, 8), (1, 9, 2)]]
    return model, traced, runs[0], runs


def _bart_shapes(model):
    """As a user writes them: the self-attention and the cross-attention caches, each {key_cache, value_cache}."""
    layer = [{0: DYN, 2: DYN}] * model.config.decoder_layers
    cross = [{0: DYN, 2: DYN}] * model.config.decoder_layers
    return {"input_ids": {0: DYN, 1: DYN}, "decoder_input_ids": {0: DYN},
            "past_key_values": [[layer, layer], [cross, cross]]}


def bart_case(strict=False):
    # The two caches inside are DynamicCaches: the legacy row flattens them.
    return legacy_case("bart/encoder_decoder_cache", _bart_step, "pytree.encoder_decoder_cache", strict=strict,
                       shapes=_bart_shapes, also=("pytree.legacy.dynamic_cache",))


@STRICT
def test_encoder_decoder_cache_fails_without_rows(make_agent, strict):
    proving.fails_without(bart_case(strict), make_agent)


@pytest.mark.parametrize("strict", [
    pytest.param(False, id="non-strict"),
    # 4.54-4.55's EncoderDecoderCache.__init__ runs Cache.__init__ (inspect.signature): a known limit there.
    pytest.param(True, marks=pytest.mark.requires("transformers!=4.54.*,!=4.55.*"), id="strict"),
])
def test_encoder_decoder_cache_with_rows(make_agent, strict):
    proving.exports_with(bart_case(strict), make_agent)


# ---------------------------------------------------------------------------------------------------------------
# Fixed-size caches: StaticCache (llama), HybridCache (gemma2), MambaCache (mamba). The model writes the step
# at cache_position; batch is dynamic, the cache length is the cache's structure, the position is data.
# ---------------------------------------------------------------------------------------------------------------

CACHE_LEN = 24


def _fixed_inputs(model, config, cache_cls, batch, past, seed, cache_arg="past_key_values"):
    g = torch.Generator().manual_seed(seed)
    prefill = torch.randint(0, config.vocab_size, (batch, past), generator=g)
    with torch.no_grad():
        if cache_cls == "MambaCache":  # Mamba builds its own cache in a prefill (and refuses one given)
            cache = model(input_ids=prefill, use_cache=True).cache_params
        else:
            cache = getattr(transformers, cache_cls)(config=config, max_batch_size=batch, max_cache_len=CACHE_LEN,
                                                     device="cpu", dtype=torch.float32)
            model(input_ids=prefill, cache_position=torch.arange(past), use_cache=True, past_key_values=cache)
    return {"input_ids": torch.randint(0, config.vocab_size, (batch, 1), generator=g),
            "cache_position": torch.tensor([past]), cache_arg: cache}


FIXED = {
    # name: (build the model and its config, cache class, cache argument, row)
    "static_llama": (lambda: handmade.build("llama"), "StaticCache", "past_key_values", "pytree.legacy.static_cache"),
    # The hand-sized sizes with Gemma 2's own alternating sliding/full layers, a window of 4 the pasts leave.
    "hybrid_gemma2": (lambda: builders.make_model("Gemma2Config", "Gemma2ForCausalLM", **handmade.SIZES, head_dim=16,
                                                  sliding_window=4),
                      "HybridCache", "past_key_values", "pytree.legacy.hybrid_cache"),
    "mamba": (lambda: recurrent.build("mamba_legacy"), "MambaCache", "cache_params",
              # 4.54 moved MambaCache to modeling_mamba, where the 4.x model-cache row takes it.
              "pytree.legacy.mamba_cache" if getattr(getattr(transformers, "MambaCache", None), "__module__", "")
              == "transformers.cache_utils"
              else "pytree.model_cache.mamba"),
}


def fixed_case(name, strict=False):
    """A decode step at ``cache_position`` in a fixed-size cache."""
    build, cache_cls, cache_arg, row = FIXED[name]
    guessed = {}

    def build_case():
        model, config = build()
        traced = _fixed_inputs(model, config, cache_cls, batch=2, past=6, seed=1, cache_arg=cache_arg)
        runs = [_fixed_inputs(model, config, cache_cls, batch=b, past=p, seed=p, cache_arg=cache_arg)
                for b, p in [(3, 9), (1, 2)]]
        # Cache layouts differ by version (4.48's MambaCache stacks the layers, batch second): the spec is guessed
        # from two input sets under the row that defines the flattening, and given as is in both halves (without
        # the row, 4.48's caches are modules torch takes as constants: a guess then marks nothing in them).
        with patches(row):
            guessed[model] = autopatch.guess_dynamic_shapes(traced, runs[0])
        return model, traced, runs[0], runs

    return legacy_case(f"{name}/fixed", build_case, row, beside=(*TORCH, *_transformers_rows()), strict=strict,
                       shapes=lambda model: guessed[model])


@pytest.mark.parametrize("name", list(FIXED))
@STRICT
def test_fixed_size_cache_fails_without_legacy_rows(make_agent, name, strict):
    proving.fails_without(fixed_case(name, strict), make_agent)


@pytest.mark.parametrize("name", list(FIXED))
@STRICT
def test_fixed_size_cache_with_legacy_rows(make_agent, name, strict):
    proving.exports_with(fixed_case(name, strict), make_agent)


@pytest.mark.parametrize("name", [*FIXED, "bart"])
def test_round_trip(agent, name):
    """flatten -> unflatten gives the same class holding the same tensors (identical objects), and flattens again
    to the same spec: the structure is all in the context, the data all in the leaves."""
    _, traced, _, _ = (bart_case() if name == "bart" else fixed_case(name)).build()
    cache_arg = "past_key_values" if name == "bart" else FIXED[name][2]
    cache = traced[cache_arg]
    with patches(*LEGACY, *ENCODER_DECODER):
        leaves, spec = pytree.tree_flatten(cache)
        rebuilt = pytree.tree_unflatten(leaves, spec)
        again, spec_again = pytree.tree_flatten(rebuilt)
    assert type(rebuilt) is type(cache)
    assert spec_again == spec
    assert len(again) == len(leaves) and all(a is b for a, b in zip(again, leaves))
    assert all(isinstance(leaf, torch.Tensor) for leaf in leaves)


def _transformers_rows():
    """The transformers family's default rows for this version (mamba's slow path among them)."""
    return tuple(s.id for s in registry.PATCHES if s.family == "transformers" and s.default)
