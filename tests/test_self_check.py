"""EXPORT_PATCHES_VALIDATE=1 (issue 17, item 7): every export in scope checks its program against eager on its own
inputs and that every dim asked dynamic stayed symbolic, in the report; a failed check is a warning line, an
exception under EXPORT_PATCHES_STRICT=1, and the export's result is returned as it was. Run as a user runs it:
a fresh interpreter with the variables set."""

import json

import pytest

from conftest import requires, run_py

LLAMA_DECODE = """
import json, torch, transformers
import autopatch
cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(cfg).eval()

def inputs(batch, past, seq):
    cache = transformers.DynamicCache(config=cfg)
    with torch.no_grad():
        model(input_ids=torch.randint(0, 128, (batch, past)), past_key_values=cache)
    return dict(input_ids=torch.randint(0, 128, (batch, seq)),
                attention_mask=torch.ones(batch, past + seq, dtype=torch.long), past_key_values=cache)

a, b = inputs(2, 5, 3), inputs(3, 4, 2)
program = torch.export.export(model, (), kwargs=a, dynamic_shapes=autopatch.guess_dynamic_shapes(a, b))
print(json.dumps(autopatch.last_export_report()["validation"]))
"""

SPECIALIZES = """
import json, torch
import autopatch

class Specializes(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 2:  # decided on the traced batch: Dim.AUTO lets torch specialize it without a word
            return x + 1
        return x - 1

program = torch.export.export(Specializes(), (torch.randn(2, 3),), dynamic_shapes=({0: torch.export.Dim.AUTO},))
print("returned", type(program).__name__)
print(json.dumps(autopatch.last_export_report()["validation"]))
"""


#: A small model for the ONNX checks.
MLP = """
import json, torch, autopatch

class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 4)
    def forward(self, x):
        return torch.relu(self.linear(x))

torch.manual_seed(0)
"""


def _validation(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_decode_step_checks_out_against_eager_with_every_dim_symbolic(tmp_path):
    report = tmp_path / "report.json"
    result = run_py(LLAMA_DECODE, EXPORT_PATCHES="1", EXPORT_PATCHES_VALIDATE="1", EXPORT_PATCHES_REPORT=str(report))
    validation = _validation(result)
    assert validation["ok"] is True and "autopatch" not in result.stderr
    # logits and the four cache tensors, the same numbers as eager on the export's own inputs
    assert validation["matches_eager"] == {"ok": True, "runner": "program", "leaves": 5, "max_abs": 0.0,
                                           "worst": "logits"}
    # batch and length of ids and mask, batch and past of the four cache tensors
    assert validation["dims"] == {"ok": True, "requested": 12, "specialized": []}
    (export,) = json.loads(report.read_text())["exports"]
    assert export["validation"] == validation and export["error"] is None


def test_without_the_variable_nothing_is_checked():
    result = run_py(LLAMA_DECODE.replace('["validation"]', '.get("validation")'), EXPORT_PATCHES="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "null"


def test_a_dim_torch_specialized_silently_is_named_and_the_program_still_returned():
    result = run_py(SPECIALIZES, EXPORT_PATCHES="1", EXPORT_PATCHES_VALIDATE="1")
    validation = _validation(result)
    assert "returned ExportedProgram" in result.stdout
    assert validation["ok"] is False and validation["matches_eager"]["ok"] is True
    assert validation["dims"]["specialized"] == ["x.shape[0] = 2"]
    warnings = [line for line in result.stderr.splitlines() if "EXPORT_PATCHES_VALIDATE" in line]
    assert warnings == ["autopatch: EXPORT_PATCHES_VALIDATE: torch.export.export: 1 of 1 dims requested dynamic "
                        "were specialized: x.shape[0] = 2"]


def test_under_strict_a_failed_check_is_an_exception():
    result = run_py(SPECIALIZES, EXPORT_PATCHES="1", EXPORT_PATCHES_VALIDATE="1", EXPORT_PATCHES_STRICT="1")
    assert result.returncode != 0
    assert "AssertionError: autopatch: EXPORT_PATCHES_VALIDATE: torch.export.export: 1 of 1 dims" in result.stderr


def test_a_program_that_answers_otherwise_than_eager_is_caught():
    """A patch whose replacement computes something else under export (here a custom route, triple for double):
    the program runs and answers wrong, which only a comparison with eager shows."""
    code = """
import json, torch, autopatch
import scope_target
autopatch.register(id="test.triple", family="custom", trigger="scope_target", target="double", mode="route",
                   replacement="scope_target:triple", reason="answers otherwise under export")
autopatch.enable("test.triple")
program = torch.export.export(scope_target.UsesDouble(), (torch.ones(2, 3),))
print(json.dumps(autopatch.last_export_report()["validation"]))
"""
    result = run_py(code, EXPORT_PATCHES_VALIDATE="1", PYTHONPATH="tests")
    validation = _validation(result)
    assert validation["ok"] is False and validation["dims"] == {"requested": 0, "specialized": []}
    # ... and named beside it: the patch whose nodes are in the program
    assert validation["matches_eager"]["problem"] == "1 of 1 leaves differ from eager beyond 0.0001: output: " \
                                                     "max abs 1; nodes in the program made by test.triple"
    assert validation["matches_eager"]["patches_in_program"] == {"test.triple": 1}


def test_the_check_leaves_the_callers_model_as_the_export_found_it():
    """The eager call is the check's, not the user's: a buffer the forward updates keeps its value."""
    code = """
import json, torch, autopatch

class Counts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
    def forward(self, x):
        self.calls.add_(1)
        return x * 2

model = Counts()
program = torch.export.export(model, (torch.ones(2),))
print(json.dumps([model.calls.item(), autopatch.last_export_report()["validation"]["ok"]]))
"""
    plain = run_py(code.replace('autopatch.last_export_report()["validation"]["ok"]', "None"), EXPORT_PATCHES="1")
    checked = run_py(code, EXPORT_PATCHES="1", EXPORT_PATCHES_VALIDATE="1")
    assert plain.returncode == 0 and checked.returncode == 0, checked.stderr[-2000:]
    calls_plain = json.loads(plain.stdout.strip().splitlines()[-1])[0]
    assert json.loads(checked.stdout.strip().splitlines()[-1]) == [calls_plain, True]


@requires("torch>=2.13")
def test_an_onnx_export_is_checked_with_onnxruntime():
    pytest.importorskip("onnxruntime", reason="the ONNX check runs onnxruntime (pip install 'autopatch[onnx]')")
    code = MLP + """torch.onnx.export(Mlp().eval(), (torch.randn(2, 3),), dynamo=True,
                  dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
print(json.dumps(autopatch.last_export_report()["validation"]))
"""
    validation = _validation(run_py(code, EXPORT_PATCHES="1", EXPORT_PATCHES_VALIDATE="1"))
    assert validation["ok"] is True
    assert validation["matches_eager"]["runner"] == "onnxruntime" and validation["matches_eager"]["leaves"] == 1
    assert validation["dims"] == {"ok": True, "requested": 1, "specialized": []}


@requires("torch>=2.13")
def test_an_onnx_conversion_of_a_program_is_checked_against_that_program():
    pytest.importorskip("onnxruntime", reason="the ONNX check runs onnxruntime (pip install 'autopatch[onnx]')")
    code = MLP + """program = torch.export.export(Mlp().eval(), (torch.randn(2, 3),),
                              dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
torch.onnx.export(program, (torch.randn(5, 3),), dynamo=True)
print(json.dumps(autopatch.last_export_report()["validation"]))
"""
    validation = _validation(run_py(code, EXPORT_PATCHES="1", EXPORT_PATCHES_VALIDATE="1"))
    assert validation["ok"] is True, validation
    assert validation["matches_eager"]["runner"] == "onnxruntime"
