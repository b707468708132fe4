"""pytree.dynamic_cache: fails without the patch, exports with it, and the program matches eager on other sizes."""

import copy
import subprocess
import sys

import pytest
import torch
import torch.utils._pytree as pytree
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

import train_export
from autopatch import registry
from conftest import REPO, clean_env, requires

DYN = torch.export.Dim.DYNAMIC


@pytest.fixture
def patched(make_agent):
    # The registrations, and on torch < 2.13 the one torch row every transformers 4.x mask needs there
    # (tests/test_older_torch.py proves it); elsewhere that row does not install.
    return make_agent(registry.PATCHES, "pytree,torch.fake_tensor_cache_bypass")


def _decode_shapes(n_layers):
    cache = [{0: DYN, 2: DYN}] * n_layers
    return {"input_ids": {0: DYN, 1: DYN}, "attention_mask": {0: DYN, 1: DYN}, "past_key_values": [cache, cache]}


def _assert_cache_equal(a, b):
    assert type(a) is type(b) and [type(l) for l in a.layers] == [type(l) for l in b.layers]
    for la, lb in zip(a.layers, b.layers):
        assert torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)


def test_example_script_fails_without_the_variable_and_exports_with_it():
    script = str(REPO / "examples" / "train_export.py")
    without = subprocess.run([sys.executable, script], env=clean_env(), capture_output=True, text=True)
    assert without.returncode != 0
    assert "non-tensor type <class 'transformers.cache_utils.DynamicCache'>" in without.stderr
    with_patches = subprocess.run([sys.executable, script], env=clean_env(EXPORT_PATCHES="1"), capture_output=True,
                                  text=True)
    assert with_patches.returncode == 0, with_patches.stderr
    lines = with_patches.stdout.splitlines()
    assert lines[0] == "exported: ExportedProgram" and lines[-1] == "ok"
    assert lines[1].startswith("batch=1 seq=1 past=9: max |eager - exported| = ")
    assert lines[2].startswith("batch=3 seq=4 past=2: max |eager - exported| = ")


def test_round_trip_keeps_tensors_layer_classes_and_windows(patched):
    cache = DynamicCache()
    cache.layers = [DynamicLayer(), DynamicSlidingWindowLayer(sliding_window=4), DynamicLayer()]
    # 3 positions: below the window (past it, the cumulative length is not in the tensors: issue 3).
    keys = [torch.randn(2, 3, 3, 8) for _ in range(2)]
    values = [torch.randn(2, 3, 3, 6) for _ in range(2)]  # values need not be shaped like keys
    for idx, (k, v) in enumerate(zip(keys, values)):
        cache.layers[idx].update(k, v)
    leaves, spec = pytree.tree_flatten(cache)
    assert len(leaves) == 4  # the third layer is not initialised: it holds no tensor
    rebuilt = pytree.tree_unflatten(leaves, spec)
    assert [type(l) for l in rebuilt.layers] == [DynamicLayer, DynamicSlidingWindowLayer, DynamicLayer]
    assert rebuilt.layers[1].sliding_window == 4 and rebuilt.layers[1].cumulative_length == 3
    assert rebuilt.layers[0].keys is leaves[0] and rebuilt.layers[0].values is leaves[2]
    assert rebuilt.layers[2].keys is None and not rebuilt.layers[2].is_initialized
    assert rebuilt.get_seq_length() == cache.get_seq_length()
    # The context is structure only: a cache of other sizes has the same spec.
    other = DynamicCache()
    other.layers = [DynamicLayer(), DynamicSlidingWindowLayer(sliding_window=4), DynamicLayer()]
    for idx in range(2):
        other.layers[idx].update(torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 6))
    assert pytree.tree_flatten(other)[1] == spec


def test_decode_step_needs_the_patch():
    model, config = train_export.tiny_llama()
    inputs = train_export.decode_inputs(config, 2, 3, 5)
    with pytest.raises(Exception, match="non-tensor type <class 'transformers.cache_utils.DynamicCache'>"):
        torch.export.export(model, (), kwargs=inputs, dynamic_shapes=_decode_shapes(config.num_hidden_layers))


# strict=True on torch 2.9: dynamo stops in transformers' own code with or without any row (4.57: `.item()` under
# the mask's vmap; 5.23: a graph break at its output-capturing global), fixed upstream by 2.13.
@pytest.mark.parametrize("strict", [False, pytest.param(True, marks=requires("torch>=2.13"))],
                         ids=["non-strict", "strict"])
def test_decode_step_exports_and_matches_eager_on_other_sizes(patched, strict):
    model, config = train_export.tiny_llama()
    traced = train_export.decode_inputs(config, 2, 3, 5)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=traced, dynamic_shapes=_decode_shapes(2), strict=strict)
        for sizes in ((1, 1, 8), (3, 2, 11)):
            inputs = train_export.decode_inputs(config, *sizes)
            expected = model(**train_export.decode_inputs_copy(inputs))
            got = program.module()(**train_export.decode_inputs_copy(inputs))
            torch.testing.assert_close(got.logits, expected.logits)
            _assert_cache_equal(got.past_key_values, expected.past_key_values)
    assert patched.records["pytree.dynamic_cache"].hits > 0


def test_prefill_returns_the_cache_as_output(patched):
    model, config = train_export.tiny_llama()

    class Prefill(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True)
            return out.logits, out.past_key_values

    ids = torch.randint(0, 128, (2, 6))
    shapes = {"input_ids": {0: DYN, 1: DYN}, "attention_mask": {0: DYN, 1: DYN}}
    with torch.no_grad():
        program = torch.export.export(Prefill(), (ids, torch.ones_like(ids)), dynamic_shapes=shapes)
        other = torch.randint(0, 128, (3, 9))
        logits, cache = program.module()(other, torch.ones_like(other))
        expected_logits, expected_cache = Prefill()(other, torch.ones_like(other))
    torch.testing.assert_close(logits, expected_logits)
    assert isinstance(cache, DynamicCache)
    _assert_cache_equal(cache, expected_cache)
    assert cache.get_seq_length() == 9


def test_prefill_output_needs_the_patch():
    model, _ = train_export.tiny_llama()

    class Prefill(torch.nn.Module):
        def forward(self, input_ids):
            return model(input_ids=input_ids, use_cache=True).past_key_values

    with pytest.raises(RuntimeError, match=r"DynamicCache'> in output, which is not a known type"):
        torch.export.export(Prefill(), (torch.randint(0, 128, (2, 6)),))


def test_shapes_collection_keyed_by_the_cache_tensors(patched):
    """torch.export.ShapesCollection: dims given per tensor object, the cache's included; torch turns them into a
    dynamic_shapes structure through the registered flattening."""
    model, config = train_export.tiny_llama()
    traced = train_export.decode_inputs(config, 2, 3, 5)
    shapes = torch.export.ShapesCollection()
    shapes[traced["input_ids"]] = {0: DYN, 1: DYN}
    shapes[traced["attention_mask"]] = {0: DYN, 1: DYN}
    for layer in traced["past_key_values"].layers:
        shapes[layer.keys] = {0: DYN, 2: DYN}
        shapes[layer.values] = {0: DYN, 2: DYN}
    spec = shapes.dynamic_shapes(model, (), traced)
    assert spec["past_key_values"] == _decode_shapes(config.num_hidden_layers)["past_key_values"]
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=traced, dynamic_shapes=spec)
        inputs = train_export.decode_inputs(config, 3, 1, 8)
        expected = model(**train_export.decode_inputs_copy(inputs))
        got = program.module()(**train_export.decode_inputs_copy(inputs))
    torch.testing.assert_close(got.logits, expected.logits)


@pytest.mark.parametrize("model_type", [
    pytest.param(name, marks=requires("transformers>=5.23")) for name in ("deepseek_v32", "glm_moe_dsa")])
def test_a_sparse_attention_indexers_keys_travel_with_the_cache(make_agent, monkeypatch, model_type):
    """5.23's DynamicIndexedLayer keeps the sparse-attention indexer's keys beside the keys and values, grown the
    same way. Flattened as a leaf, they reach the program, which matches eager at other sizes (every leaf, the
    indexer's keys included); a cache rebuilt without them starts the indexer afresh: the export stops on its
    shapes."""
    import proving
    from autopatch.models import tiny
    from autopatch.areas.pytree import caches as pytree_caches

    arch = tiny.architecture(model_type, "causal")
    model = tiny.build(arch)
    traced, other, third = (tiny.inputs(model, arch, "decode", k) for k in range(3))
    make_agent(registry.PATCHES, "all")
    children, context = pytree.tree_flatten(traced["past_key_values"])
    assert "indexer_keys" in str(context)
    program = proving.export(model, traced, other)
    for inputs in (other, third):
        with torch.no_grad():
            proving.assert_same_outputs(program.module()(**copy.deepcopy(inputs)), model(**copy.deepcopy(inputs)))
    monkeypatch.setattr(pytree_caches, "LAYER_TENSORS", ())
    with pytest.raises(RuntimeError, match="Attempting to broadcast a dimension"):
        proving.export(model, traced, other)
