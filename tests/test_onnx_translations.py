"""torch.onnx.is_all_true: torch._check_tensor_all leaves aten._is_all_true in a program, which torch.onnx.export
cannot translate; every vision-language model with transformers' 5.x image-token checks stopped there. Fails
without the row, converts with it, onnxruntime matches eager; the translation computes what the operator does.
(The grouped-matmul translation is proven in test_transformers_moe.py.)"""

import json
import subprocess
import sys

import pytest
import torch

import autopatch
from autopatch.errors import causes
from conftest import REPO, clean_env, needs_onnx, requires

ROW = "torch.onnx.is_all_true"


@pytest.fixture(autouse=True)
def _onnx():
    needs_onnx()


class AllPositive(torch.nn.Module):
    """Returns the operator's value itself, so that the translation is compared, not only converted."""

    def forward(self, x):
        return torch.ops.aten._is_all_true(x > 0), x * 2


@pytest.mark.parametrize("rows", [2, 0], ids=["rows", "empty"])
def test_the_translation_computes_what_the_operator_does(make_agent, rows):
    make_agent()
    with torch.no_grad():
        program = torch.onnx.export(AllPositive(), (torch.ones(3, 4),), dynamo=True, verbose=False,
                                    dynamic_shapes=({0: torch.export.Dim("n", min=0)},))
    assert autopatch.last_export_report()["patches"][ROW] == 1
    for x in (torch.ones(rows, 4), torch.ones(rows, 4) - 2 * (torch.arange(4) == 1), torch.randn(rows, 4)):
        expected = AllPositive()(x)
        got = program(x)
        assert bool(got[0]) == bool(expected[0]), (x, got[0])
        torch.testing.assert_close(torch.as_tensor(got[1]), expected[1])


def test_the_operator_stops_onnx_without_the_row(make_agent):
    make_agent(selection=f"all,-{ROW}")
    with pytest.raises(Exception) as failure:
        torch.onnx.export(AllPositive(), (torch.ones(3, 4),), dynamo=True, verbose=False)
    chain = [str(error) for error in causes(failure.value)]
    assert any("No ONNX function found" in text and "_is_all_true" in text for text in chain), chain[-1][:300]


def _validate(*args):
    done = subprocess.run([sys.executable, "-m", "autopatch", "validate", *args, "--json"], env=clean_env(),
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return json.loads(done.stdout)


@requires("transformers>=5")
def test_a_vision_language_prefill_reaches_onnxruntime(make_agent):
    """LLaVA's 5.x image-token check is a torch._check_tensor_all: without the row the conversion stops at it;
    with it onnxruntime matches eager at other sizes, and validate names the check the ONNX model does not make."""
    without = _validate("--arch", "llava", "--step", "prefill", "--onnx", "--patches", f"all,-{ROW}")
    assert [s["ok"] for s in without["stages"]] == [True, True, True, False], without
    assert "_is_all_true" in without["stages"][3]["error"]
    report = _validate("--arch", "llava", "--step", "prefill", "--onnx")
    assert report["ok"], report
    assert report["patches_used"][ROW] >= 1
    assert report["stages"][3]["dropped_checks"], report["stages"][3]
    assert all(leaf["max_abs"] < 1e-4 for leaf in report["stages"][4]["leaves"].values())
