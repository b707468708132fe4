"""torch.onnx.output_names_from_paths: an ONNX model's outputs are named by their paths, as its inputs are, the
same on transformers 4.57 and 5.x, so a runtime feeds a decode step's cache back by name; names a caller gives
are kept; without the row, torch's node names (linear_14, cat_3...)."""

import copy

import torch

import autopatch
import proving
from autopatch.models import builders, handmade
from conftest import ONNX_ROWS

pytestmark = ONNX_ROWS

ROW = "torch.onnx.output_names_from_paths"
CACHE = ["key_cache_0", "key_cache_1", "value_cache_0", "value_cache_1"]


def _llama_step():
    model, config = handmade.build("llama")
    traced = builders.decode_inputs(model, config, batch=2, past=5, seq=3, seed=1)
    other = builders.decode_inputs(model, config, batch=3, past=7, seq=2, seed=2)
    return model, traced, other


def _names(values):
    return [value.name for value in values]


def test_decode_step_outputs_are_named_by_their_paths_and_runtimes_match_eager(make_agent):
    model, traced, other = _llama_step()
    make_agent()
    program = proving.export_onnx(model, traced, other)
    given = [[f"past_key_values_{n}" for n in CACHE] if key == "past_key_values" else [key] for key in traced]
    assert _names(program.model.graph.inputs) == sum(given, [])  # in the order given
    assert _names(program.model.graph.outputs) == ["logits", *(f"present_{n}" for n in CACHE)]
    assert autopatch.last_export_report()["patches"][ROW] == 1
    got = program(**copy.deepcopy(other))  # onnxruntime, by the renamed graph
    with torch.no_grad():
        expected = model(**copy.deepcopy(other))
    proving.assert_onnx_matches(got, (expected.logits, expected.past_key_values), rtol=1e-4, atol=1e-5)


def test_names_a_caller_gives_are_kept(make_agent):
    model, traced, other = _llama_step()
    make_agent()
    given = ["out", "k0", "k1", "v0", "v1"]
    program = proving.export_onnx(model, traced, other, output_names=given)
    assert _names(program.model.graph.outputs) == given
    assert ROW not in autopatch.last_export_report()["patches"]


def test_without_the_row_outputs_are_named_by_fx_nodes(make_agent):
    model, traced, other = _llama_step()
    make_agent(selection=f"all,-{ROW}")
    names = _names(proving.export_onnx(model, traced, other).model.graph.outputs)
    assert "logits" not in names and not any(name.startswith("present_") for name in names), names


def test_a_seq2seq_steps_unchanged_cross_attention_cache_keeps_its_input_names(make_agent):
    """torch names an input the graph returns unchanged ``<name>_orig``; with the outputs named by their paths,
    the cross-attention cache's inputs are named like every other cache input again."""
    model, config = handmade.build("t5")
    traced = builders.seq2seq_decode_inputs(model, config, batch=2, source=6, past=4, seq=2, seed=1)
    other = builders.seq2seq_decode_inputs(model, config, batch=3, source=5, past=6, seq=3, seed=2)
    make_agent()
    program = proving.export_onnx(model, traced, other)
    inputs, outputs = _names(program.model.graph.inputs), _names(program.model.graph.outputs)
    assert not any(name.endswith("_orig") for name in inputs), inputs
    for kind in ("self_attention_cache", "cross_attention_cache"):
        assert [f"past_key_values_{kind}_{n}" for n in CACHE] == [n for n in inputs if kind in n]
        assert [f"present_{kind}_{n}" for n in CACHE] == [n for n in outputs if kind in n]
    assert outputs[0] == "logits" and outputs[-1] == "encoder_last_hidden_state"
    got = program(**copy.deepcopy(other))
    with torch.no_grad():
        expected = model(**copy.deepcopy(other))
    torch.testing.assert_close(torch.as_tensor(got[0]), expected.logits, rtol=1e-4, atol=1e-5)
