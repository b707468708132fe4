"""`autopatch validate`, run as a user runs it: the command in a subprocess, its exit code, its text, its JSON.
A decoder's decode step, a seq2seq decode step, a state-space model and a VLM, with and without ONNX; a local
config directory and a user's builder as sources; every bad input a one-line error with exit code 2."""

import json
import subprocess
import sys

import pytest

from autopatch.models import handmade
from conftest import REPO, assert_bad_input, clean_env, needs_onnx, requires

STAGES = ["build", "export", "run"]
ONNX_STAGES = STAGES + ["onnx", "onnxruntime"]


def _validate(*args, env=None):
    return subprocess.run([sys.executable, "-m", "autopatch", "validate", *args],
                          env=clean_env(PYTHONPATH=str(REPO / "tests"), **(env or {})), cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def _report(*args):
    out = _validate(*args, "--json")
    assert out.returncode in (0, 1), out.stderr[-2000:]
    return out.returncode, json.loads(out.stdout)


@pytest.mark.parametrize("arch, step, leaves", [("llama", "decode", 5), ("t5", "decode", 10), ("mamba", "decode", 5),
                                                ("llava", "prefill", 2)])
def test_validate_passes_with_every_leaf_compared(arch, step, leaves):
    code, report = _report("--arch", arch, "--step", step)
    assert code == 0 and report["ok"], report
    assert [s["stage"] for s in report["stages"]] == STAGES
    run = report["stages"][2]
    assert len(run["leaves"]) == leaves, run["leaves"]
    assert all(leaf["ok"] and leaf["max_abs"] < 1e-4 for leaf in run["leaves"].values())
    assert report["stages"][1]["dynamic_dims"] > 0
    assert report["patches_used"], report  # the agent was on, and its hits are reported


@pytest.mark.parametrize("arch", ["llama", "t5"])
def test_validate_with_onnx_runs_onnxruntime_against_eager(arch):
    needs_onnx()
    code, report = _report("--arch", arch, "--step", "decode", "--onnx")
    assert code == 0 and report["ok"], report
    assert [s["stage"] for s in report["stages"]] == ONNX_STAGES
    onnx, ort = report["stages"][3], report["stages"][4]
    assert onnx["nodes"] > 0 and onnx["bytes"] > 0
    assert onnx["symbolic_dims"] >= report["stages"][1]["dynamic_dims"]  # inputs and outputs both checked
    names = list(ort["leaves"])
    assert names[0] == "logits" and any(name.startswith("past_key_values") for name in names), names
    assert all(leaf["max_abs"] < 1e-4 for leaf in ort["leaves"].values())


@pytest.mark.parametrize("builder", ["tensors_out_of_signature_order", "a_flag_before_the_tensors"])
def test_onnxruntime_gets_the_inputs_by_name_whatever_the_dicts_order(builder):
    """torch's ONNXProgram(**inputs) pairs the graph's inputs with the dict's values by position: two tensors
    swapped answer wrong in silence, a flag first shifts them. validate feeds the ONNX model by name, as the
    exported program is fed, and the numbers match eager."""
    needs_onnx()
    code, report = _report("--builder", f"validate_target:{builder}", "--onnx")
    assert code == 0 and report["ok"], report
    assert report["stages"][4]["leaves"]["output"]["max_abs"] < 1e-6, report["stages"][4]


def test_onnx_inputs_run_orders_keywords_as_the_program_does_where_calling_the_program_does_not():
    """The function itself, beside what torch does with the same dict (the reason it exists)."""
    needs_onnx()
    import torch

    from autopatch import onnx_inputs
    from validate_target import tensors_out_of_signature_order

    model, a, b = tensors_out_of_signature_order()
    dynamic = {name: {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC} for name in ("x", "y")}
    program = torch.onnx.export(model, (), kwargs=a, dynamic_shapes={**dynamic, "halve": None}, dynamo=True,
                                verbose=False)
    assert [value.name for value in program.model.graph.inputs] == ["x", "y"]  # the traced dict's order
    torch.testing.assert_close(onnx_inputs.run(program, **b), model(**b))
    torch.testing.assert_close(program(**b)[0], -model(**b))  # torch's own call: x and y swapped, no error
    flag_first = {"halve": True, **b}
    torch.testing.assert_close(onnx_inputs.run(program, **flag_first), model(**b))


def test_onnx_inputs_run_puts_back_the_constant_leaves_the_graph_does_not_return(make_agent):
    """A hybrid cache on 4.57 holds None for the layers of the other kind: the program returns them as constants,
    the ONNX graph returns only the tensors. Pairing by position would shift every output after the first None;
    run rebuilds the whole tree, and the outputs are still named by their paths."""
    needs_onnx()
    import torch

    from autopatch import onnx_inputs

    class NoneBetween(torch.nn.Module):
        def forward(self, x):
            return {"first": x + 1, "missing": None, "last": x * 2}

    make_agent()
    model = NoneBetween()
    program = torch.onnx.export(model, (torch.ones(2, 3),), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},),
                                dynamo=True, verbose=False)
    assert [value.name for value in program.model.graph.outputs] == ["first", "last"]
    assert onnx_inputs.returned_leaves(program.exported_program) == [True, False, True]
    x = torch.randn(5, 3)
    got = onnx_inputs.run(program, x)
    assert list(got) == ["first", "missing", "last"] and got["missing"] is None
    torch.testing.assert_close(got["first"], x + 1)
    torch.testing.assert_close(got["last"], x * 2)
    with pytest.raises(ValueError, match="returns 1 outputs, its exported program returns 2 tensors"):
        onnx_inputs.program_leaves(program, [x])


@requires("transformers>=5")
def test_an_onnx_failure_names_what_stopped_the_conversion_and_the_patches_the_conversion_used():
    """A 5.x MoE model: without the grouped-matmul row, the onnx stage names the operator torch.onnx could not
    translate (the cause under torch's ConversionError, no terminal colour codes); with it, every stage passes and
    the row counts among the patches used, though only the ONNX conversion uses it."""
    needs_onnx()
    row = "transformers.moe.onnx_grouped_mm"
    code, report = _report("--arch", "mixtral", "--onnx", "--patches", f"all,-{row}")
    assert code == 1 and [s["ok"] for s in report["stages"]] == [True, True, True, False], report
    error = report["stages"][3]["error"]
    assert error.startswith("ConversionError") and "grouped_mm_fallback" in error and "\x1b" not in error, error
    code, report = _report("--arch", "mixtral", "--onnx")
    assert code == 0 and report["ok"], report
    assert row not in report["stages"][1]["patches"] and report["stages"][3]["patches"][row] > 0
    assert report["patches_used"][row] == report["stages"][3]["patches"][row]


@requires("transformers>=5.13")
def test_an_onnx_graph_that_fixes_a_dim_the_program_keeps_symbolic_is_named():
    """The ONNX check pairs the graph's inputs (by name) and outputs (by position) with the program's: a graph
    converted from a static export fixes the dims a dynamic program of the same module keeps symbolic."""
    needs_onnx()
    import torch

    from autopatch.validate import onnx_fixed_dims

    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 2

    x = torch.ones(2, 3)
    dynamic = torch.export.export(Scale(), (x,), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    static = torch.onnx.export(Scale(), (x,), dynamo=True, verbose=False).model_proto.graph
    assert onnx_fixed_dims(static, dynamic) == (["x.shape[0] = 2", f"{static.output[0].name}.shape[0] = 2"], 2)
    same = torch.onnx.export(dynamic, dynamo=True, verbose=False).model_proto.graph
    assert onnx_fixed_dims(same, dynamic) == ([], 2)


def test_a_specialized_dim_is_named_with_torchs_reason_line():
    """torch's constraint violation says what went wrong on its second line: the report carries it."""
    code, report = _report("--arch", "mamba", "--step", "prefill", "--patches", "none")
    assert code == 1 and report["stages"][1]["stage"] == "export" and not report["stages"][1]["ok"], report
    error = report["stages"][1]["error"]
    assert "Constraints violated" in error and "specialized it to be a constant" in error, error


@requires("transformers>=5.13")
def test_the_run_time_checks_an_onnx_model_drops_are_named_with_the_patch_that_made_them():
    needs_onnx()
    import onnx

    code, report = _report("--builder", "validate_target:jamba_steps_of_several_tokens", "--onnx")
    assert code == 0 and report["ok"], report
    stage = report["stages"][3]
    dropped = {check["by"]: check for check in stage["dropped_checks"]}
    assert dropped["transformers.jamba.selective_scan"]["count"] == 2  # one per mamba layer
    assert "several new tokens" in dropped["transformers.jamba.selective_scan"]["message"]
    assert "transformers.jamba.selective_scan x2" in stage["detail"]
    graph = onnx.load(stage["path"], load_external_data=False).graph  # indeed not in the model
    assert not any("assert" in node.op_type.lower() for node in graph.node)


def test_a_failed_stage_names_the_model_code_it_came_from():
    code, report = _report("--builder", "validate_target:refuses")
    export = report["stages"][1]
    assert code == 1 and export["stage"] == "export" and not export["ok"], report
    assert "this model refuses to be traced" in export["error"]
    assert export["location"].endswith("in forward") and "validate_target.py:" in export["location"], export


def test_the_text_report_reads_at_a_glance():
    out = _validate("--arch", "llama")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("autopatch validate") and "llama" in lines[0] and "decode" in lines[0]
    assert [line.split()[0] for line in lines[1:4]] == STAGES
    assert all(line.split()[1] == "ok" for line in lines[1:4])
    assert lines[-1].startswith("ok: every stage passed")


def test_a_failing_stage_exits_1_and_names_it():
    out = _validate("--arch", "llama", "--patches", "none")
    assert out.returncode == 1, out.stdout
    assert "export       FAILED" in out.stdout and out.stdout.splitlines()[-1] == "failed at export"
    code, report = _report("--arch", "llama", "--patches", "none")
    assert code == 1 and not report["ok"]
    assert report["stages"][-1]["stage"] == "export" and "DynamicCache" in report["stages"][-1]["error"]


def test_a_local_config_directory(tmp_path):
    """Sizes as the directory's config gives them, random weights: nothing is downloaded."""
    config = handmade.config("qwen2", architectures=["Qwen2ForCausalLM"])
    config.save_pretrained(tmp_path)
    code, report = _report("--model", str(tmp_path))
    assert code == 0 and report["ok"], report
    assert report["step"] == "decode" and "Qwen2ForCausalLM" in report["stages"][0]["detail"]


def test_a_users_builder():
    code, report = _report("--builder", "validate_target:build")
    assert code == 0 and report["ok"], report
    assert set(report["stages"][2]["leaves"]) == {"scaled", "total"}


@pytest.mark.parametrize("args, message", [
    (["--arch", "lama"], "unknown architecture 'lama'; did you mean llama"),
    (["--arch", "llama", "--step", "forward"], "llama (causal) has no step 'forward'; valid: prefill, decode"),
    (["--arch", "whisper", "--kind", "vlm"], "whisper has no vlm head; valid kinds: causal, speech"),
    (["--model", "/nonexistent/model"], "--model '/nonexistent/model': not a directory with a config.json"),
    (["--builder", "validate_target"], "--builder 'validate_target': expected MODULE:CALLABLE"),
    (["--builder", "validate_target:missing"], "--builder 'validate_target:missing': AttributeError"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    assert_bad_input(_validate(*args), "validate", message)


def test_onnx_without_onnxruntime_says_how_to_install_it():
    """An environment without onnxruntime (``None`` in sys.modules is how Python itself marks a module that cannot
    be imported): one line naming the missing package and the extra, exit code 2, nothing built."""
    code = ("import sys; sys.modules['onnxruntime'] = None; from autopatch.cli import main; "
            "sys.exit(main(['validate', '--arch', 'llama', '--onnx']))")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2, (out.stdout, out.stderr[-2000:])
    errors = [line for line in out.stderr.splitlines() if line.startswith("autopatch validate:")]
    assert errors == ["autopatch validate: --onnx needs onnxruntime: pip install 'autopatch[onnx]'"], out.stderr
    assert out.stdout == ""


def test_a_builder_that_returns_something_else_fails_its_build_stage():
    code, report = _report("--builder", "validate_target:not_a_triple")
    assert code == 1 and report["stages"][0]["stage"] == "build" and not report["stages"][0]["ok"]
    assert "must return (model, inputs_a, inputs_b)" in report["stages"][0]["error"]


def test_a_program_that_disagrees_with_eager_names_the_patches_that_made_its_nodes():
    code, report = _report("--builder", "validate_target:answers_otherwise")
    run = report["stages"][2]
    assert code == 1 and run["stage"] == "run" and not run["ok"], report
    assert run["error"].startswith("set B: 1 leaves differ from eager beyond 0.0001, first output (max abs 1)")
    assert "test.triple" in run["error"].split("; nodes in the program made by ")[1].split(", "), run["error"]
