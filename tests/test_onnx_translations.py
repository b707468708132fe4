"""torch.onnx.sdpa_masked_rows: a query row whose boolean mask hides every key (each padding token of a left-padded
batch) is zero in torch and the mean of the values in torch.onnx's translation; wrong at those positions without
the row, equal to eager everywhere with it. (The grouped-matmul translation is proven in test_transformers_moe.py.)
And a vision-language prefill through ONNX, whose image-token check torch.onnx.dropped_check_conditions lets
convert."""

import json
import subprocess
import sys

import torch

import autopatch
import proving
from conftest import ONNX_ROWS, REPO, clean_env, requires

pytestmark = ONNX_ROWS

DROPPED_CHECKS = "torch.onnx.dropped_check_conditions"
MASKED_ROWS = "torch.onnx.sdpa_masked_rows"


def _validate(*args):
    done = subprocess.run([sys.executable, "-m", "autopatch", "validate", *args, "--json"], env=clean_env(),
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return json.loads(done.stdout)


@requires("transformers>=5")
def test_a_vision_language_prefill_reaches_onnxruntime(make_agent):
    """LLaVA's 5.x image-token check is a torch._check_tensor_all, _assert_async(_is_all_true(...)): torch.onnx
    drops the assertion, but without the row it translates the condition, and torchlib has no _is_all_true. With
    the row onnxruntime matches eager at other sizes, and validate names the check the ONNX model does not make."""
    without = _validate("--arch", "llava", "--step", "prefill", "--onnx", "--patches", f"all,-{DROPPED_CHECKS}")
    assert [s["ok"] for s in without["stages"]] == [True, True, True, False], without
    assert "_is_all_true" in without["stages"][3]["error"]
    report = _validate("--arch", "llava", "--step", "prefill", "--onnx")
    assert report["ok"], report
    assert report["patches_used"][DROPPED_CHECKS] >= 1
    assert report["stages"][3]["dropped_checks"], report["stages"][3]
    assert all(leaf["max_abs"] < 1e-4 for leaf in report["stages"][4]["leaves"].values())


class Attention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _attention_inputs(batch: int, length: int, hidden_rows: int, boolean: bool = True):
    """Causal attention whose last sample has its first ``hidden_rows`` queries masked at every key (left
    padding: a padding token attends to nothing); as a boolean mask or as the additive float mask of the same."""
    q, k, v = (torch.randn(batch, 2, length, 8) for _ in range(3))
    mask = torch.ones(batch, 1, length, length, dtype=torch.bool).tril()
    mask[-1, :, :hidden_rows, :] = False
    if not boolean:
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    return q, k, v, mask


def _export_attention(boolean: bool = True):
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    qkv = {0: batch, 2: length}
    return proving.export_onnx(Attention(), _attention_inputs(2, 5, 2, boolean),
                               shapes=(qkv, qkv, qkv, {0: batch, 2: length, 3: length}))


def test_rows_that_hide_every_key_are_zero_as_in_torch(make_agent):
    make_agent()
    program = _export_attention()
    assert autopatch.last_export_report()["patches"][MASKED_ROWS] == 1
    inputs = _attention_inputs(3, 7, 4)  # other batch, length and padding than traced
    expected = Attention()(*inputs)
    assert torch.equal(expected[-1, :, :4], torch.zeros_like(expected[-1, :, :4]))  # torch's answer for them
    torch.testing.assert_close(torch.as_tensor(program(*inputs)[0]), expected)


def test_without_the_row_the_padding_rows_differ_and_float_masks_need_nothing(make_agent):
    make_agent(selection=f"all,-{MASKED_ROWS}")
    inputs = _attention_inputs(3, 7, 4)
    got, expected = torch.as_tensor(_export_attention()(*inputs)[0]), Attention()(*inputs)
    assert (got[-1, :, :4] - expected[-1, :, :4]).abs().max() > 0.05  # the mean of the values, not zero
    torch.testing.assert_close(got[:, :, 4:], expected[:, :, 4:])  # rows that attend to a key agree
    # A float mask hides nothing for torch either: its rows are the mean of the values on both sides.
    inputs = _attention_inputs(3, 7, 4, boolean=False)
    program = _export_attention(boolean=False)
    torch.testing.assert_close(torch.as_tensor(program(*inputs)[0]), Attention()(*inputs))


@requires("transformers>=5")
def test_a_left_padded_prefill_matches_eager_at_every_position(make_agent):
    """transformers 5.x gives SDPA boolean masks: a padded Llama prefill through ONNX differs from eager at the
    padding positions without the row (logits and the cache there), matches everywhere with it."""
    without = _validate("--arch", "llama", "--step", "prefill", "--padded", "--onnx", "--patches",
                        f"all,-{MASKED_ROWS}")
    assert [s["ok"] for s in without["stages"]] == [True, True, True, True, False], without
    report = _validate("--arch", "llama", "--step", "prefill", "--padded", "--onnx")
    assert report["ok"], report
    assert report["patches_used"][MASKED_ROWS] >= 1
    assert all(leaf["max_abs"] < 1e-4 for leaf in report["stages"][4]["leaves"].values())
