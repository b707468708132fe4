"""Caches of transformers 4.48-4.55 (issue 3), before 4.56's Cache(layers=...).

Run in CI on 4.48.3 (no cache is a pytree node; Cache is a torch.nn.Module), 4.52.4 (transformers registers
DynamicCache itself, with a torch.fx flatten spec that breaks every program) and 4.55.4 (caches of
CacheLayerMixin layers; transformers' own DynamicCache registration cannot be traced by strict=True). For each
row: the decode step fails without it (at export, or on the program's first call), exports with it and matches
eager, caches included, at batch sizes and past lengths other than traced."""

import contextlib
import copy

import pytest
import torch
import torch.utils._pytree as pytree
import transformers

import autopatch
import zoo
from autopatch import diffs, registry
from autopatch.agent import Agent

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


@contextlib.contextmanager
def patches(*ids):
    own = Agent(registry.EXPORT_ENTRY_POINTS, [s for s in registry.PATCHES if s.id in ids])
    own.enable(",".join(ids) if ids else "0")
    try:
        yield own
    finally:
        own.disable()


def _compare(got, expected):
    torch.testing.assert_close(got.logits, expected.logits)
    cache_got, cache_expected = _cache_of(got), _cache_of(expected)
    assert type(cache_got) is type(cache_expected)
    torch.testing.assert_close(pytree.tree_leaves(cache_got), pytree.tree_leaves(cache_expected))


def _cache_of(output):
    return getattr(output, "past_key_values", None) or getattr(output, "cache_params", None)


def _export_and_run(model, traced, shapes, runs, strict):
    """Exports ``model`` on ``traced`` and checks the program against eager on every input set of ``runs``."""
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes, strict=strict)
        for inputs in runs:
            _compare(program.module()(**copy.deepcopy(inputs)), model(**copy.deepcopy(inputs)))


# ---------------------------------------------------------------------------------------------------------------
# DynamicCache
# ---------------------------------------------------------------------------------------------------------------


def _keys(cache):
    return [layer.keys for layer in cache.layers] if hasattr(cache, "layers") else list(cache.key_cache)


def _values(cache):
    return [layer.values for layer in cache.layers] if hasattr(cache, "layers") else list(cache.value_cache)


def _llama_case():
    model, config = zoo.build("llama")
    traced = zoo.decode_inputs(model, config, batch=2, past=6, seq=3, seed=1)
    runs = [zoo.decode_inputs(model, config, batch=b, past=p, seq=s, seed=p) for b, p, s in [(3, 9, 2), (1, 17, 1)]]
    cache = [[{0: DYN, 2: DYN}] * config.num_hidden_layers] * 2
    shapes = {"input_ids": {0: DYN, 1: DYN}, "attention_mask": {0: DYN, 1: DYN}, "past_key_values": cache}
    return model, traced, shapes, runs


def test_dynamic_cache_round_trip(agent):
    model, config = zoo.build("llama")
    cache = zoo.decode_inputs(model, config, batch=2, past=5, seq=1)["past_key_values"]
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
def test_dynamic_cache_decode_fails_without_legacy_rows(agent, strict):
    model, traced, shapes, runs = _llama_case()
    with patches(*TORCH), pytest.raises(Exception, match=NOT_A_NODE):
        _export_and_run(model, traced, shapes, runs, strict)


@STRICT
def test_dynamic_cache_decode_with_legacy_rows(agent, strict):
    model, traced, shapes, runs = _llama_case()
    with patches(*TORCH, *LEGACY) as own:
        _export_and_run(model, traced, shapes, runs, strict)
        assert own.records["pytree.legacy.dynamic_cache"].hits > 0
        if transformers.__version__ >= "4.50":
            detail = own.records["pytree.legacy.dynamic_cache"].detail
            assert "replaced the registration by transformers.cache_utils" in detail
            assert "torch.fx flatten spec" in detail


@pytest.mark.requires("transformers<4.51")
def test_len_of_tensor_in_cache_code_fixes_the_batch_without_rows(agent):
    # Non-strict: there len() of a fake tensor returns the traced size. Dynamo (strict=True) keeps it symbolic.
    model, traced, shapes, runs = _llama_case()
    others = tuple(i for i in TORCH if i not in LEN_OF_TENSOR)
    with patches(*others, *LEGACY), pytest.raises(Exception, match="specialized it to be a constant"):
        _export_and_run(model, traced, shapes, runs, strict=False)


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
    inputs = zoo.seq2seq_decode_inputs(model, config, **sizes)
    if isinstance(inputs["past_key_values"], tuple):  # these versions' bart still returns the legacy tuples
        inputs["past_key_values"] = transformers.EncoderDecoderCache.from_legacy_cache(inputs["past_key_values"])
    return inputs


def _bart_case():
    model, config = zoo.build_seq2seq("bart")
    traced = _bart_inputs(model, config, batch=2, source=7, past=5, seq=1, seed=1)
    runs = [_bart_inputs(model, config, batch=b, source=s, past=p, seq=1, seed=p) for b, s, p in [(3, 4, 8), (1, 9, 2)]]
    layer = [{0: DYN, 2: DYN}] * config.decoder_layers
    cross = [{0: DYN, 2: DYN}] * config.decoder_layers
    shapes = {"input_ids": {0: DYN, 1: DYN}, "decoder_input_ids": {0: DYN},
              "past_key_values": [[layer, layer], [cross, cross]]}
    return model, traced, shapes, runs


@STRICT
def test_encoder_decoder_cache_fails_without_rows(agent, strict):
    model, traced, shapes, runs = _bart_case()
    with patches(*TORCH), pytest.raises(Exception, match=NOT_A_NODE):
        _export_and_run(model, traced, shapes, runs, strict)


@pytest.mark.parametrize("strict", [
    pytest.param(False, id="non-strict"),
    # 4.54-4.55's EncoderDecoderCache.__init__ runs Cache.__init__ (inspect.signature): a known limit there.
    pytest.param(True, marks=pytest.mark.requires("transformers!=4.54.*,!=4.55.*"), id="strict"),
])
def test_encoder_decoder_cache_with_rows(agent, strict):
    model, traced, shapes, runs = _bart_case()
    with patches(*TORCH, *LEGACY, *ENCODER_DECODER) as own:
        _export_and_run(model, traced, shapes, runs, strict)
        assert own.records["pytree.encoder_decoder_cache"].hits > 0


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
    # name: (config class, model class, config overrides, cache class, cache argument, row)
    "static_llama": ("LlamaConfig", "LlamaForCausalLM", {}, "StaticCache", "past_key_values",
                     "pytree.legacy.static_cache"),
    "hybrid_gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(head_dim=16, sliding_window=4), "HybridCache",
                      "past_key_values", "pytree.legacy.hybrid_cache"),
    "mamba": ("MambaConfig", "MambaForCausalLM",
              dict(vocab_size=128, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4),
              "MambaCache", "cache_params",
              # 4.54 moved MambaCache to modeling_mamba, where the 4.x model-cache row takes it.
              "pytree.legacy.mamba_cache" if getattr(getattr(transformers, "MambaCache", None), "__module__", "")
              == "transformers.cache_utils"
              else "pytree.model_cache.mamba"),
}


def _fixed_case(name):
    config_name, model_name, extra, cache_cls, cache_arg, _ = FIXED[name]
    base = zoo.COMMON if cache_cls != "MambaCache" else {}
    config = getattr(transformers, config_name)(**{**base, **extra})
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    traced = _fixed_inputs(model, config, cache_cls, batch=2, past=6, seed=1, cache_arg=cache_arg)
    runs = [_fixed_inputs(model, config, cache_cls, batch=b, past=p, seed=p, cache_arg=cache_arg)
            for b, p in [(3, 9), (1, 2)]]
    # Cache layouts differ by version (4.48's MambaCache stacks the layers, batch second): the spec is guessed
    # from two input sets, under the row that defines the flattening.
    with patches(FIXED[name][5]):
        shapes = autopatch.guess_dynamic_shapes(traced, runs[0])
    return model, traced, shapes, runs


@pytest.mark.parametrize("name", list(FIXED))
@STRICT
def test_fixed_size_cache_fails_without_legacy_rows(agent, name, strict):
    model, traced, shapes, runs = _fixed_case(name)
    with patches(*TORCH, *_transformers_rows()), pytest.raises(Exception, match=NOT_A_NODE):
        _export_and_run(model, traced, shapes, runs, strict)


@pytest.mark.parametrize("name", list(FIXED))
@STRICT
def test_fixed_size_cache_with_legacy_rows(agent, name, strict):
    model, traced, shapes, runs = _fixed_case(name)
    with patches(*TORCH, *_transformers_rows(), *LEGACY) as own:
        _export_and_run(model, traced, shapes, runs, strict)
        assert own.records[FIXED[name][5]].hits > 0


@pytest.mark.parametrize("name", [*FIXED, "bart"])
def test_round_trip(agent, name):
    """flatten -> unflatten gives the same class holding the same tensors (identical objects), and flattens again
    to the same spec: the structure is all in the context, the data all in the leaves."""
    model, traced, _, _ = _bart_case() if name == "bart" else _fixed_case(name)
    cache_arg = "past_key_values" if name == "bart" else FIXED[name][4]
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
