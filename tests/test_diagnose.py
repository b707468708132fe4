"""`autopatch diagnose`: models that fail to export in one known submodule without the agent (a dynamic RoPE, a
Mamba mixer, a 4.x MoE block, a user's `if` on a tensor). The tree must pin that piece by its qualified name, say
what to do, give dynamic shapes that export it, and with the agent on report every piece OK. The command runs as a
user runs it (a subprocess: exit code, text, JSON); bad input is one line and exit code 2."""

import json
import subprocess
import sys

import pytest
import torch

from conftest import REPO, assert_bad_input, clean_env, requires

sys.path.insert(0, str(REPO / "tests"))


def _diagnose(*args, env=None):
    return subprocess.run([sys.executable, "-m", "autopatch", "diagnose", *args],
                          env=clean_env(PYTHONPATH=str(REPO / "tests"), **(env or {})), cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def _report(*args, env=None):
    out = _diagnose(*args, "--json", env=env)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert out.returncode == (0 if report["ok"] else 1)
    return report


def _piece(report, name):
    return next(p for p in report["pieces"] if p["name"] == name)


def _assert_every_ok_piece_was_compared(report):
    """An OK piece is a program run on recorded calls at other sizes and matched leaf by leaf: never unchecked."""
    for piece in report["pieces"]:
        if piece["status"] == "ok":
            assert piece["compared"] >= 2 and piece["other_sizes"] >= 1 and piece["leaves"] >= 1, piece
            assert piece["max_abs"] <= report["tolerance"], piece


# --- the tree pins the piece, and says what to do ---------------------------------------------------------------


def test_a_users_if_on_a_tensor_is_pinned_to_its_module_with_the_rewrite_advice():
    report = _report("--builder", "diagnose_target:tensor_if", "--patches", "none")
    assert report["failing"] == ["gate"], report["failing"]
    gate = _piece(report, "gate")
    assert gate["status"] == "fail" and gate["error"].startswith("GuardOnDataDependentSymNode"), gate
    assert gate["location"].endswith("diagnose_target.py:12 in forward"), gate["location"]
    assert gate["advice"]["kind"] == "rewrite" and "EXPORT_PATCHES_REWRITE=auto" in gate["advice"]["text"]
    assert "EXPORT_PATCHES_REWRITE=diagnose_target:Gate.forward" in gate["advice"]["text"]  # the rewriter's words
    assert "diagnose_target.Gate.forward" in gate["advice"]["text"]
    assert [p["status"] for p in report["pieces"]] == ["fail", "ok", "fail", "ok"]  # (model), first, gate, last
    assert gate["dynamic_shapes"] == "{'x': {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}}"
    _assert_every_ok_piece_was_compared(report)


def test_with_the_rewrite_on_the_same_model_is_all_ok():
    report = _report("--builder", "diagnose_target:tensor_if", env={"EXPORT_PATCHES_REWRITE": "auto"})
    assert report["ok"] and report["failing"] == [] and len(report["pieces"]) == 1, report
    assert "rewrite.auto.diagnose_target.Gate.forward" in report["pieces"][0]["patches"]
    _assert_every_ok_piece_was_compared(report)


def test_a_dynamic_rope_is_pinned_to_the_rotary_embedding_and_names_the_patch_that_is_off():
    report = _report("--builder", "diagnose_target:dynamic_rope_llama", "--patches", "none")
    assert report["failing"] == ["model.rotary_emb"], report["failing"]
    rotary = _piece(report, "model.rotary_emb")
    assert rotary["class"] == "LlamaRotaryEmbedding" and rotary["status"] == "fail"
    assert rotary["advice"] == {"kind": "patch-off", "patch": "transformers.rope.dynamic",
                                "text": "shipped patch transformers.rope.dynamic is off: "
                                        "EXPORT_PATCHES=transformers.rope.dynamic (EXPORT_PATCHES=1 selects it too)"}
    assert "modeling_rope_utils.py" in rotary["location"], rotary["location"]
    assert _piece(report, "model.layers.0")["status"] == "ok"  # looked through the ModuleList, never called
    assert _piece(report, "model.layers")["status"] == "not-called"
    _assert_every_ok_piece_was_compared(report)


def test_with_the_agent_on_the_dynamic_rope_model_is_all_ok_and_the_patch_is_used():
    report = _report("--builder", "diagnose_target:dynamic_rope_llama")
    assert report["ok"] and [p["name"] for p in report["pieces"]] == ["(model)"], report
    assert report["pieces"][0]["patches"].get("transformers.rope.dynamic", 0) > 0, report["pieces"][0]["patches"]
    _assert_every_ok_piece_was_compared(report)


@requires("transformers>=5.13")
def test_a_mamba_mixer_is_pinned_in_every_layer_and_the_agent_makes_it_ok():
    report = _report("--arch", "mamba", "--step", "prefill", "--patches", "none")
    assert report["failing"] == ["backbone.layers.0.mixer", "backbone.layers.1.mixer"], report["failing"]
    mixer = _piece(report, "backbone.layers.0.mixer")
    assert mixer["class"] == "MambaMixer" and mixer["advice"]["kind"] == "patch-off", mixer
    assert mixer["advice"]["patch"].startswith("transformers.mamba."), mixer["advice"]
    assert _piece(report, "backbone.layers.0.norm")["status"] == "ok"
    on = _report("--arch", "mamba", "--step", "prefill")
    assert on["ok"] and len(on["pieces"]) == 1, on
    _assert_every_ok_piece_was_compared(on)


@requires("transformers<5")
def test_a_4x_moe_block_is_pinned_and_the_agent_makes_it_ok():
    """Only the MoE row off (the caches' registrations on): the sparse block is the piece that fails."""
    report = _report("--arch", "mixtral", "--step", "prefill", "--patches", "all,-transformers.moe.mixtral")
    failing = report["failing"]
    assert failing and all(name.endswith(".block_sparse_moe") for name in failing), failing
    block = _piece(report, failing[0])
    assert block["class"] == "MixtralSparseMoeBlock", block
    assert block["advice"]["kind"] == "patch-off" and block["advice"]["patch"] == "transformers.moe.mixtral"
    on = _report("--arch", "mixtral", "--step", "prefill")
    assert on["ok"] and len(on["pieces"]) == 1, on
    _assert_every_ok_piece_was_compared(on)


def test_a_decode_step_pins_the_attention_that_takes_the_cache_and_the_agent_flattens_it():
    """Without the agent the DynamicCache cannot be flattened: each attention layer (the pieces that take it) is
    pinned, with the registration row to turn on; with it, every piece exports, the attention's dynamic shapes
    laying the cache out as the registration flattens it, and the model's cache outputs compared with eager's."""
    report = _report("--arch", "llama", "--step", "decode", "--patches", "none")
    assert report["failing"] == ["model.layers.0.self_attn", "model.layers.1.self_attn"], report["failing"]
    advice = _piece(report, "model.layers.0.self_attn")["advice"]
    assert advice["kind"] == "patch-off" and advice["patch"] == "pytree.dynamic_cache", advice
    on = _report("--arch", "llama", "--step", "decode", "--strategy", "always")
    assert on["ok"] and on["pieces"][0]["leaves"] == 5, on["pieces"][0]  # logits, two layers' keys and values
    attention = _piece(on, "model.layers.0.self_attn")
    assert "'past_key_values': [[{0: Dim.DYNAMIC, 2: Dim.DYNAMIC}" in attention["dynamic_shapes"], attention
    _assert_every_ok_piece_was_compared(on)


def test_a_local_config_directory(tmp_path):
    from autopatch.models import handmade

    config = handmade.config("llama", architectures=["LlamaForCausalLM"])
    config.save_pretrained(tmp_path)
    report = _report("--model", str(tmp_path), "--step", "prefill")
    assert report["ok"] and report["model"].startswith("LlamaForCausalLM"), report
    _assert_every_ok_piece_was_compared(report)


# --- the suggested dynamic shapes -------------------------------------------------------------------------------


def test_the_suggested_dynamic_shapes_export_the_failing_piece_with_its_patch(global_agent):
    """The text the report shows is code: pasted into torch.export.export with the recorded inputs, it exports the
    rotary embedding (the patch on), and the program matches eager at the other set's sizes."""
    import autopatch
    import diagnose_target
    from autopatch import diagnose

    model, a, b = diagnose_target.dynamic_rope_llama()
    root = diagnose.trace(model, [a, b])
    piece = next(p for p in diagnose._all(root) if p.name == "model.rotary_emb")
    assert [len(calls) for calls in piece.calls] == [1, 1]
    text = diagnose.shapes_text(diagnose.piece_shapes(piece))
    assert text == "{'x': {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, 'position_ids': {1: Dim.DYNAMIC}}", text
    shapes = eval(text, {"Dim": torch.export.Dim})  # noqa: S307 - what a user pastes
    args, kwargs, _ = piece.calls[0][0]
    with autopatch.patched("1"):
        program = torch.export.export(model.model.rotary_emb, args, kwargs, dynamic_shapes=shapes)
    args_b, kwargs_b, (cos_b, sin_b) = piece.calls[1][0]
    assert args_b[0].shape != args[0].shape
    cos, sin = program.module()(*args_b, **kwargs_b)
    torch.testing.assert_close(cos, cos_b)
    torch.testing.assert_close(sin, sin_b)


def test_the_trace_records_args_kwargs_caches_repeated_calls_and_uncalled_modules():
    """A shared module called twice per run, one never called, a cache passed by keyword: each recorded as
    called, with copies the later in-place cache updates did not change."""
    import diagnose_target
    from autopatch import diagnose

    model, a, b = diagnose_target.twice_and_never()
    root = diagnose.trace(model, [a, b])
    by_name = {p.name: p for p in diagnose._all(root)}
    assert [len(c) for c in by_name["shared"].calls] == [2, 2]
    assert [len(c) for c in by_name["unused"].calls] == [0, 0]
    args, kwargs, output = by_name["shared"].calls[0][1]
    assert args == () and set(kwargs) == {"x"}  # called by keyword: recorded by keyword
    assert torch.equal(output, kwargs["x"] * 2)
    args, kwargs, output = by_name["writer"].calls[1][0]  # *args, **kwargs: set B's one call
    assert len(args) == 1 and set(kwargs) == {"cache"}
    assert kwargs["cache"].get_seq_length() == 4  # the cache as it came in, not as the update left it
    assert b["cache"].get_seq_length() == 4  # the trace ran on copies: the caller's inputs are untouched
    assert output.shape == (3, 4)


# --- the command: text, exit codes, bad input -------------------------------------------------------------------


def test_the_text_report_is_a_tree_with_the_smallest_failing_piece_detailed():
    out = _diagnose("--builder", "diagnose_target:tensor_if", "--patches", "none", "-v")
    assert out.returncode == 1, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("autopatch diagnose") and "patches none" in out.stdout
    gate = next(line for line in lines if " gate (Gate)" in line)
    assert "FAIL" in gate and "smallest failing" in gate
    first = next(line for line in lines if " first (Linear)" in line)
    root = next(line for line in lines if "(model) (Sandwich)" in line)
    assert first.index("first") == root.index("(model)") + 2  # indented one level under the model
    assert any("what to do: rewrite diagnose_target.Gate.forward (the `if`" in line for line in lines), out.stdout
    assert any("dynamic_shapes={'x': {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}}" in line for line in lines), out.stdout
    assert lines[-1] == "failed: 1 smallest failing piece: gate"
    progress = [line for line in out.stderr.splitlines() if line.startswith("autopatch diagnose: [")]
    assert len(progress) == 4 and progress[2].startswith("autopatch diagnose: [3/4] gate: fail"), progress


def test_an_all_ok_model_exits_0():
    out = _diagnose("--builder", "validate_target:build")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-1].startswith("ok: every piece tried exported")


@pytest.mark.parametrize("args, message", [
    (["--builder", "diagnose_target:tensor_if", "--strategy", "sometimes"],
     "unknown strategy 'sometimes'; valid: only-if-failing, always, local, none"),
    (["--arch", "llamma"], "unknown architecture 'llamma'; did you mean llama"),
    (["--model", "/nonexistent/model"], "--model '/nonexistent/model': not a directory with a config.json"),
    (["--builder", "diagnose_target"], "--builder 'diagnose_target': expected MODULE:CALLABLE"),
    (["--builder", "diagnose_target:missing"], "--builder 'diagnose_target:missing': AttributeError"),
    (["--builder", "validate_target:not_a_triple"], "cannot build the model: StageFailed: validate_target:not_a_triple "
                                                    "must return (model, inputs_a, inputs_b)"),
    (["--builder", "validate_target:refuses"], "the model does not run eagerly: ValueError: this model refuses"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    assert_bad_input(_diagnose(*args), "diagnose", message)


# --- --replace-failing: the smallest failing pieces as custom ops, the whole model exported around them ----------


def _assert_replaced_program_matches_eager(report, pieces, leaves):
    replaced = report["replaced"]
    assert replaced["pieces"] == pieces and replaced["refused"] == {}, replaced
    assert replaced["status"] == "ok", replaced
    assert replaced["compared"] >= 2 and replaced["other_sizes"] >= 1 and replaced["leaves"] == leaves, replaced
    assert replaced["max_abs"] <= report["tolerance"]


def test_replace_failing_exports_the_whole_model_around_a_users_if():
    report = _report("--builder", "diagnose_target:tensor_if", "--patches", "none", "--replace-failing")
    assert report["failing"] == ["gate"] and not report["ok"]  # replaced is not fixed: still exit 1
    _assert_replaced_program_matches_eager(report, ["gate"], leaves=1)


def test_replace_failing_with_args_kwargs_and_a_cache_grown_in_place():
    """The failing piece takes ``*args, **kwargs`` and a DynamicCache it updates in place; the model returns the
    cache: the op hands the grown cache back (its length learned as past + step), every leaf matches eager."""
    report = _report("--builder", "diagnose_target:cache_writer_with_if", "--replace-failing")
    assert report["failing"] == ["writer"], report["failing"]
    assert "'args': ({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},)" in _piece(report, "writer")["dynamic_shapes"]
    _assert_replaced_program_matches_eager(report, ["writer"], leaves=3)  # out, the cache's keys and values


def test_replace_failing_replaces_the_dynamic_rope_and_the_text_says_so():
    out = _diagnose("--builder", "diagnose_target:dynamic_rope_llama", "--patches", "none", "--replace-failing")
    assert out.returncode == 1, out.stderr[-3000:]
    assert "  replaced by custom ops: model.rotary_emb" in out.stdout
    assert "ok the whole model exports around them: 2 calls compared, 1 at other sizes" in out.stdout, out.stdout


@requires("transformers>=5.13")
def test_replace_failing_replaces_every_mamba_mixer():
    report = _report("--arch", "mamba", "--step", "prefill", "--patches", "pytree.dynamic_cache", "--replace-failing")
    assert report["failing"] == ["backbone.layers.0.mixer", "backbone.layers.1.mixer"], report["failing"]
    _assert_replaced_program_matches_eager(report, report["failing"], leaves=1)  # logits


def test_a_shape_the_calls_cannot_teach_is_refused_unless_a_shape_function_gives_it(global_agent):
    from autopatch.diagnose import diagnose

    report = diagnose(builder="diagnose_target:tripler", patches="none", replace_failing=True)
    assert report["failing"] == ["triple"]
    assert "no input's dim, no sum of two, not constant: give a shape function" in report["replaced"]["refused"]["triple"]
    assert report["replaced"]["status"] == "fail"

    def triple_shape(x):
        return [((x.shape[0], 3 * x.shape[1], x.shape[2]), x.dtype)]

    report = diagnose(builder="diagnose_target:tripler", patches="none", replace_failing=True,
                      shape_functions={"Triple": triple_shape})
    _assert_replaced_program_matches_eager(report, ["triple"], leaves=1)


# --- strategies, and a patch that exists but does not apply ---------------------------------------------------


def test_strategy_always_tries_every_piece_and_none_only_the_model():
    report = _report("--builder", "diagnose_target:dynamic_rope_llama", "--strategy", "always")
    names = [p["name"] for p in report["pieces"]]
    assert report["ok"] and names[0] == "(model)" and "model.layers.0.self_attn.q_proj" in names, names
    assert "model.rotary_emb" in names and len(names) > 10
    _assert_every_ok_piece_was_compared(report)
    report = _report("--builder", "diagnose_target:dynamic_rope_llama", "--strategy", "none", "--patches", "none")
    assert [p["name"] for p in report["pieces"]] == ["(model)"] and report["failing"] == ["(model)"], report


@pytest.mark.parametrize("fields, state", [({"requires": (("torch", ">=99"),)}, "skipped"),
                                           ({"fingerprints": ("000000000000",)}, "drifted")])
def test_a_patch_for_the_piece_that_does_not_apply_here_is_named_with_why(global_agent, fields, state):
    """A patch of the failing piece's own function, selected, but skipped (version) or drifted (its source
    changed): the advice names it and its state rather than the rewrite."""
    import autopatch
    from autopatch.diagnose import diagnose
    from autopatch.spec import PatchSpec

    spec = PatchSpec("custom.gate", "custom", "diagnose_target", "Gate.forward", "route", "diagnose_target:Gate",
                     **fields)
    with autopatch.patched("none", extra_patches=[spec]):
        report = diagnose(builder="diagnose_target:tensor_if", patches="custom.gate")
    advice = _piece(report, "gate")["advice"]
    assert advice["kind"] == "patch-not-applied" and advice["patch"] == "custom.gate", advice
    assert advice["text"].startswith(f"patch custom.gate does not apply here ({state}: "), advice
    assert ("needs torch>=99" if state == "skipped" else "written against 000000000000") in advice["text"]


def test_compare_shows_which_pieces_the_patches_make_export():
    import io

    from autopatch.diagnose_text import render
    from autopatch.terminal import Output

    report = _report("--builder", "diagnose_target:dynamic_rope_llama", "--compare", "--strategy", "always")
    text = render(report, Output(io.StringIO(), wide=True))  # the text of this same report, not cut to a width
    assert "model.rotary_emb (LlamaRotaryEmbedding)  [no patch: FAIL]  2 calls compared" in text, text
    assert "the patches make these pieces export (they fail with no patch): (model), model," in text, text
    made = report["patches_make_export"]
    assert "(model)" in made and "model.rotary_emb" in made and "model.layers.0.mlp" not in made, made
    rotary = _piece(report, "model.rotary_emb")
    assert rotary["status"] == "ok" and rotary["without_patches"]["status"] == "fail", rotary
    assert rotary["without_patches"]["error"].startswith("GuardOnDataDependentSymNode")
    assert _piece(report, "model.layers.0.mlp")["without_patches"]["status"] == "ok"


def test_strategy_local_exports_each_piece_with_its_submodules_as_custom_ops():
    """The model around custom ops of first, gate and last is OK (its own code exports); gate alone fails."""
    report = _report("--builder", "diagnose_target:tensor_if", "--strategy", "local", "--patches", "none")
    root = report["pieces"][0]
    assert root["status"] == "ok" and root["local"] and root["replaced_children"] == ["first", "gate", "last"], root
    assert report["failing"] == ["gate"] and _piece(report, "gate")["advice"]["kind"] == "rewrite"
    _assert_every_ok_piece_was_compared(report)


def test_strategy_local_pins_the_rotary_embeddings_own_code():
    report = _report("--builder", "diagnose_target:dynamic_rope_llama", "--strategy", "local", "--patches", "none")
    assert "model.rotary_emb" in report["failing"], report["failing"]
    assert _piece(report, "model.rotary_emb")["advice"]["patch"] == "transformers.rope.dynamic"
    assert _piece(report, "model.layers.0.mlp")["status"] == "ok" and _piece(report, "lm_head")["status"] == "ok"
    _assert_every_ok_piece_was_compared(report)
