"""torch.onnx.output_names_from_paths: an ONNX model's outputs are named by their paths, as its inputs are, the
same on transformers 4.57 and 5.x, so a runtime feeds a decode step's cache back by name; names a caller gives
are kept; without the row, torch's node names (linear_14, cat_3...)."""

import pytest
import torch

import autopatch
import zoo
from conftest import needs_onnx, requires

# The torch.onnx rows these tests prove are measured on torch 2.13 to 2.15 (autopatch.areas.bounds.TORCH_ONNX); 2.9's exporter
# is another one, and the rows are not installed there.
pytestmark = requires("torch>=2.13")

ROW = "torch.onnx.output_names_from_paths"
CACHE = ["key_cache_0", "key_cache_1", "value_cache_0", "value_cache_1"]


@pytest.fixture(autouse=True)
def _onnx():
    needs_onnx()


def _llama_step():
    model, config = zoo.build("llama")
    traced = zoo.decode_inputs(model, config, batch=2, past=5, seq=3, seed=1)
    other = zoo.decode_inputs(model, config, batch=3, past=7, seq=2, seed=2)
    return model, traced, other


def _export(model, traced, other, **options):
    with torch.no_grad():
        return torch.onnx.export(model, (), kwargs=zoo.copy_inputs(traced), dynamo=True, verbose=False,
                                 dynamic_shapes=autopatch.guess_dynamic_shapes(traced, other), **options)


def _names(values):
    return [value.name for value in values]


def test_decode_step_outputs_are_named_by_their_paths_and_runtimes_match_eager(make_agent):
    model, traced, other = _llama_step()
    make_agent()
    program = _export(model, traced, other)
    assert _names(program.model.graph.inputs) == ["input_ids", "attention_mask",  # in the order given
                                                  *(f"past_key_values_{n}" for n in CACHE)]
    assert _names(program.model.graph.outputs) == ["logits", *(f"present_{n}" for n in CACHE)]
    assert autopatch.last_export_report()["patches"][ROW] == 1
    got = program(**zoo.copy_inputs(other))  # onnxruntime, by the renamed graph
    with torch.no_grad():
        expected = model(**zoo.copy_inputs(other))
    leaves = torch.utils._pytree.tree_leaves((expected.logits, expected.past_key_values))
    for got_leaf, expected_leaf in zip(got, leaves, strict=True):
        torch.testing.assert_close(torch.as_tensor(got_leaf), expected_leaf, rtol=1e-4, atol=1e-5)


def test_names_a_caller_gives_are_kept(make_agent):
    model, traced, other = _llama_step()
    make_agent()
    given = ["out", "k0", "k1", "v0", "v1"]
    program = _export(model, traced, other, output_names=given)
    assert _names(program.model.graph.outputs) == given
    assert ROW not in autopatch.last_export_report()["patches"]


def test_without_the_row_outputs_are_named_by_fx_nodes(make_agent):
    model, traced, other = _llama_step()
    make_agent(selection=f"all,-{ROW}")
    names = _names(_export(model, traced, other).model.graph.outputs)
    assert "logits" not in names and not any(name.startswith("present_") for name in names), names


def test_a_seq2seq_steps_unchanged_cross_attention_cache_keeps_its_input_names(make_agent):
    """torch names an input the graph returns unchanged ``<name>_orig``; with the outputs named by their paths,
    the cross-attention cache's inputs are named like every other cache input again."""
    model, config = zoo.build_seq2seq("t5")
    traced = zoo.seq2seq_decode_inputs(model, config, batch=2, source=6, past=4, seq=2, seed=1)
    other = zoo.seq2seq_decode_inputs(model, config, batch=3, source=5, past=6, seq=3, seed=2)
    make_agent()
    program = _export(model, traced, other)
    inputs, outputs = _names(program.model.graph.inputs), _names(program.model.graph.outputs)
    assert not any(name.endswith("_orig") for name in inputs), inputs
    for kind in ("self_attention_cache", "cross_attention_cache"):
        assert [f"past_key_values_{kind}_{n}" for n in CACHE] == [n for n in inputs if kind in n]
        assert [f"present_{kind}_{n}" for n in CACHE] == [n for n in outputs if kind in n]
    assert outputs[0] == "logits" and outputs[-1] == "encoder_last_hidden_state"
    got = program(**zoo.copy_inputs(other))
    with torch.no_grad():
        expected = model(**zoo.copy_inputs(other))
    torch.testing.assert_close(torch.as_tensor(got[0]), expected.logits, rtol=1e-4, atol=1e-5)
