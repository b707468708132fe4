"""Beside transformers' own exporters (5.x `transformers.exporters`): with the agent on, their programs give
eager's numbers, and a cache flattens to transformers' names and order inside their flat-graph exporters.

The scripts run as a user runs them: a subprocess, the agent switched on by EXPORT_PATCHES alone, the program
run by transformers' own runner at the traced sizes and at other ones, every output leaf compared with eager."""

import copy
import json
import sys

import pytest
import torch
import transformers
from torch.utils import _pytree as pytree

import proving
from autopatch.models import builders, handmade, recurrent
from conftest import REPO, clean_env, requires

pytestmark = requires("transformers>=5.23")
ROW = "transformers.exporters.flat_graph_layout"
TARGET = str(REPO / "tests" / "hf_exporter_target.py")


def _run(arch, exporter, selection, window=""):
    import subprocess

    out = subprocess.run([sys.executable, TARGET, arch, exporter, window], env=clean_env(EXPORT_PATCHES=selection),
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


#: The optional package each exporter's runner needs (the test extras, and executorch in the 5.23 venv).
RUNTIME = {"onnx": "onnxruntime", "dynamo": "torch", "executorch": "executorch"}


#: Llama (full-attention layers) and Mistral (sliding layers, its window beyond the sequence; past it below). Qwen3
#: takes Llama's cache path (the same layer class, the same flat layout), so it is not run again. ExecuTorch's
#: lowering (XNNPACK) takes half a minute a model: it runs on Mistral alone, the model whose sliding layers its
#: runner's flattening by spec refuses without the agent.
CASES = [(arch, exporter) for arch in ("llama", "mistral") for exporter in ("onnx", "dynamo")]


@pytest.mark.parametrize("arch, exporter", [*CASES, ("mistral", "executorch")])
def test_exporter_matches_eager_with_the_agent_on(arch, exporter):
    """OnnxExporter (onnxruntime), DynamoExporter and ExecutorchExporter (XNNPACK), each run by its own runner:
    every leaf (logits, each layer's keys and values) and the output structure equal eager's, at the traced and at
    other sizes. (ExecuTorch's runner flattens a caller's inputs by the program's saved spec, through torch.fx's
    flatten-by-spec; without the agent, Mistral's sliding layers put their count in that spec and other past
    lengths are refused.)"""
    pytest.importorskip(RUNTIME[exporter], reason=f"{exporter} exporter's runner needs {RUNTIME[exporter]}")
    result = _run(arch, exporter, "1")
    for sizes in ("traced", "other"):
        assert result[sizes]["same_structure"], result
        assert len(result[sizes]["diff"]) == 5, result  # logits + keys and values of two layers
        assert max(result[sizes]["diff"].values()) < 1e-4, (sizes, result[sizes]["diff"])


def test_onnx_exporter_gives_wrong_numbers_without_the_row():
    """The bug the row fixes, as it is without it: transformers names the ONNX inputs layer by layer, the agent's
    own layout orders them keys first; the shapes agree, so the graph runs, and its numbers are wrong."""
    pytest.importorskip("onnxruntime", reason="OnnxExporter's runner needs onnxruntime (test extra)")
    result = _run("llama", "onnx", f"all,-{ROW}")
    assert max(result["other"]["diff"].values()) > 1e-2, result


SLIDING_ROW = "transformers.exporters.sliding_layers_as_eager"


@pytest.mark.parametrize("exporter", ["onnx", "dynamo"])
@pytest.mark.parametrize("arch", ["mistral", "gemma2"])
def test_past_the_window_matches_eager_with_the_agent_on(arch, exporter):
    """A window of 4, every past (5 traced, 7 run) beyond it: eager's sliding layers hold their last 3 tokens.
    Mistral (every layer sliding: the count comes from the attention mask) and Gemma2 (sliding beside full
    layers): every leaf equal to eager's, caches included, at the traced and at other sizes."""
    pytest.importorskip(RUNTIME[exporter], reason=f"{exporter} exporter's runner needs {RUNTIME[exporter]}")
    result = _run(arch, exporter, "1", window="4")
    for sizes in ("traced", "other"):
        assert result[sizes]["same_structure"], result
        assert len(result[sizes]["diff"]) == 5, result
        assert max(result[sizes]["diff"].values()) < 1e-4, (sizes, result[sizes]["diff"])


def test_past_the_window_gives_wrong_numbers_without_the_row():
    """The bug the row fixes: transformers' exporters trace a sliding layer as a full one, so the program reads
    eager's 3 kept tokens as the whole past: its logits are wrong, silently, even at the traced sizes, and its
    caches keep every token (with the agent off, DynamoExporter refuses other sizes; OnnxExporter answers as
    wrong)."""
    result = _run("mistral", "dynamo", f"all,-{SLIDING_ROW}", window="4")
    for sizes in ("traced", "other"):
        assert result[sizes]["diff"]["['logits']"] > 1e-3, result


def test_transformers_stand_ins_stay_where_the_agents_sliding_rows_are_not():
    """Withheld only when both of the agent's sliding rows route the layer: with one deselected, transformers'
    three stand-ins apply as they would without the agent (the agent never mixes the two conventions)."""
    code = (
        "import autopatch, transformers.cache_utils as c; from transformers.exporters import exporter_dynamo as d\n"
        "inside = lambda: [getattr(c.DynamicSlidingWindowLayer, n) is getattr(c.DynamicLayer, n)"
        " for n in ('update', 'get_mask_sizes', 'get_seq_length')]\n"
        "with d.apply_patches('dynamo'): print(inside())\n"
        "print(next(r.state for r in autopatch.patches() if r.spec.id == '%s'))\n" % SLIDING_ROW
    )
    import subprocess

    for selection, stand_ins in (("1", "[False, False, False]"),
                                 ("all,-transformers.cache.sliding_mask_sizes", "[True, True, True]")):
        out = subprocess.run([sys.executable, "-c", code], env=clean_env(EXPORT_PATCHES=selection), cwd=REPO,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        lines = out.stdout.strip().splitlines()
        assert lines[-2] == stand_ins, (selection, out.stdout)
        assert lines[-1].startswith("applied"), out.stdout


def _decoder_cache(name, past=6):
    model, config = handmade.build(name)
    return builders.decode_inputs(model, config, batch=2, past=past, seq=2, seed=1)["past_key_values"]


def _static_cache():
    """A StaticCache (static full and static sliding layers, tensor position counters) filled by a prefill."""
    model, config = handmade.build("gemma3_own_pattern")
    cache = transformers.StaticCache(config=config, max_cache_len=16)
    with torch.no_grad():
        model(input_ids=torch.randint(0, 128, (2, 5)), past_key_values=cache, use_cache=True)
    return cache


def _caches():
    """Every layer kind a 5.23 DynamicCache holds, from real models: full (Llama); sliding only, inside its
    window (Mistral's own 4096) and past it (window 4); sliding beside full (Gemma 3's own 5:1 pattern); linear
    attention beside full (Qwen3-Next, Jamba); a StaticCache of static full and sliding layers; and an
    EncoderDecoderCache (Bart)."""
    made = {
        "llama": _decoder_cache("llama"),
        "mistral": _decoder_cache("mistral"),
        "mistral_past_window": _decoder_cache("mistral_past_window"),
        "gemma3": _decoder_cache("gemma3_own_pattern", past=9),
    }
    for name in ("qwen3_next", "jamba"):
        made[name] = recurrent.hybrid_decode_inputs(recurrent.build(name)[0], 2, 5, 1)["past_key_values"]
    made["static_gemma3"] = _static_cache()
    model, config = handmade.build("bart")
    made["bart"] = builders.seq2seq_decode_inputs(model, config, batch=2, source=5, past=3, seq=2, seed=1)[
        "past_key_values"]
    return made


def test_both_layouts_for_every_layer_kind(agent):
    """Outside transformers' exporters: the agent's layout (keys of every layer, then values). Inside: the
    tensors in the order and under the names transformers' own walk gives. Each round-trips to a cache that
    walks the same and holds the same tensors."""
    from transformers.exporters.utils import get_leaf_tensors

    from autopatch.areas.exporters import flat_layout as transformers_exporters

    agent.enable("1")
    for name, cache in _caches().items():
        walk = get_leaf_tensors(vars(cache))
        own, _ = pytree.tree_flatten(cache)
        token = transformers_exporters._FLAT_GRAPH.set(True)
        try:
            leaves, spec = pytree.tree_flatten(cache)
            rebuilt = pytree.tree_unflatten(leaves, spec)
            keyed, _ = pytree.tree_flatten_with_path(cache)
        finally:
            transformers_exporters._FLAT_GRAPH.reset(token)
        assert [id(t) for t in leaves] == [id(t) for t in walk.values()], name
        assert list(get_leaf_tensors(vars(rebuilt))) == list(walk), name
        assert all(a is b for a, b in zip(get_leaf_tensors(vars(rebuilt)).values(), walk.values())), name
        assert len(keyed) == len(walk), name
        if name != "bart":
            keys = [layer.keys for layer in cache.layers if getattr(layer, "keys", None) is not None]
            assert [id(t) for t in own[:len(keys)]] == [id(t) for t in keys], name  # the agent's layout outside
        # Outside again: the agent's layout, and a spec written inside still unflattens the same way.
        assert [id(t) for t in pytree.tree_flatten(cache)[0]] == [id(t) for t in own], name
        again = pytree.tree_unflatten(leaves, spec)
        assert list(get_leaf_tensors(vars(again))) == list(walk), name


def test_walk_spec_survives_a_dump_and_load(agent):
    """transformers' metadata writes the program's specs with treespec_dumps and its runner reads them back."""
    from autopatch.areas.exporters import flat_layout as transformers_exporters

    agent.enable("1")
    cache = _caches()["mistral"]
    token = transformers_exporters._FLAT_GRAPH.set(True)
    try:
        leaves, spec = pytree.tree_flatten({"past_key_values": cache})
    finally:
        transformers_exporters._FLAT_GRAPH.reset(token)
    loaded = pytree.treespec_loads(pytree.treespec_dumps(spec))
    rebuilt = pytree.tree_unflatten(leaves, loaded)["past_key_values"]
    for a, b in zip(rebuilt.layers, cache.layers):
        assert a.keys is b.keys and a.values is b.values
        assert type(a) is type(b) and a.sliding_window == b.sliding_window


def test_flatten_of_symbolic_outputs_outside_an_export(agent):
    """transformers' metadata flattens the traced outputs after the export (record_output_structure): a sliding
    cache holding symbolic sizes flattens outside any export without raising."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    agent.enable("1")
    cache = _caches()["mistral"]
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        for layer in cache.layers:
            layer.keys = mode.from_tensor(layer.keys, static_shapes=False)
            layer.values = mode.from_tensor(layer.values, static_shapes=False)
            layer.cumulative_length = layer.keys.shape[-2]
        leaves, spec = pytree.tree_flatten(cache)
    assert len(leaves) == 2 * len(cache.layers)
    assert all(isinstance(leaf, torch.Tensor) for leaf in leaves)


class NestedStateCache(transformers.DynamicCache):
    """A user's cache keeping tensors in a dict beside its layers: the agent's layout carries the dict as one
    child, which no permutation maps onto transformers' per-tensor names."""


def test_a_cache_the_walk_cannot_permute_is_deferred_to_transformers(agent):
    from autopatch import runs, scope
    from autopatch.areas.exporters import flat_layout as transformers_exporters

    agent.enable("1")
    cache = NestedStateCache()
    cache.update(torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4), 0)
    cache.extra = {"state": torch.randn(2, 5)}
    run = runs.ExportRun("test")
    run_token, flag = scope._RUN.set(run), transformers_exporters._FLAT_GRAPH.set(True)
    try:
        leaves, spec = pytree.tree_flatten(cache)
    finally:
        transformers_exporters._FLAT_GRAPH.reset(flag)
        scope._RUN.reset(run_token)
    assert spec.context[0] == transformers_exporters.DEFERRED
    assert any("NestedStateCache" in note and "transformers' own" in note for note in run.notes)
    rebuilt = pytree.tree_unflatten(leaves, spec)
    assert type(rebuilt) is NestedStateCache and rebuilt.extra["state"] is cache.extra["state"]
    assert rebuilt.layers[0].keys is cache.layers[0].keys


def test_flattening_by_a_spec_follows_the_layout_it_was_written_with(agent):
    """Runners of saved programs flatten a caller's inputs by the program's spec (torch.fx's tree_flatten_spec:
    transformers' ExecuTorch runner). A spec written inside a flat-graph exporter gets transformers' order there,
    outside any exporter; a plain one the agent's. And a spec's structure rebuilt with placeholder leaves (as
    ExecuTorch's emitter describes its inputs) unflattens without raising."""
    import torch.fx._pytree as fx_pytree
    from transformers.exporters.utils import get_leaf_tensors

    from autopatch.areas.exporters import flat_layout as transformers_exporters

    agent.enable("1")
    for name, cache in _caches().items():
        plain_leaves, plain_spec = pytree.tree_flatten(cache)
        with transformers_exporters.layout_of((transformers_exporters.WALK,)):
            walk_leaves, walk_spec = pytree.tree_flatten(cache)
        assert [id(t) for t in fx_pytree.tree_flatten_spec(cache, walk_spec)] == [id(t) for t in walk_leaves], name
        assert [id(t) for t in fx_pytree.tree_flatten_spec(cache, plain_spec)] == [id(t) for t in plain_leaves], name
        if name != "bart":
            assert [id(t) for t in walk_leaves] == [id(t) for t in get_leaf_tensors(vars(cache)).values()], name
        for spec in (plain_spec, walk_spec):
            described = pytree.tree_unflatten([0] * spec.num_leaves, spec)
            assert type(described) is type(cache), name


def test_a_saved_program_loads_and_runs_with_the_agents_layout(agent, tmp_path):
    """torch.export.save writes the input spec through the registration's dumpable context; load reads it back
    (the layout of a sliding cache included) and the loaded program matches eager at other sizes, every state."""
    agent.enable("1")
    model, config = handmade.build("mistral_past_window")
    traced = builders.decode_inputs(model, config, batch=2, past=6, seq=2, seed=1)
    other = builders.decode_inputs(model, config, batch=3, past=8, seq=3, seed=2)
    program = proving.export(model, traced, other)
    # The example inputs hold the cache object itself, which torch.load's weights_only policy refuses to unpickle
    # (torch's choice, agent or not: README, known limits); the program and its specs need none of it.
    program.example_inputs = None
    torch.export.save(program, tmp_path / "decode.pt2")
    loaded = torch.export.load(tmp_path / "decode.pt2")
    run = builders.decode_inputs(model, config, batch=1, past=9, seq=1, seed=3)
    with torch.no_grad():
        got, expected = loaded.module()(**copy.deepcopy(run)), model(**copy.deepcopy(run))
    proving.assert_same_outputs(got, expected)
