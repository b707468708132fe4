"""transformers.weights.*: 4.x Gemma 3n clamps its AltUp correction weight in place on every call (and 4.x Mega caches
its EMA kernel on the module, last test).

Without the row the prefill and the decode step of the tiny catalogue's Gemma 3n text model stop (a fake tensor among
the program's constants); with it they export and match eager, every output leaf and the cache, at other batches and
lengths, on left-padded batches. One layer's correction weight is set beyond the config's clip (120, the config
class's own), so that the clamp changes the numbers: the program must clamp as eager does. The rewritten method
equals the original bit for bit in eager, and leaves the parameter unwritten."""

import copy

import pytest
import torch

import proving
from autopatch.models import tiny
from conftest import requires
from proving import Proof

pytestmark = requires("transformers<5")

ROW = "transformers.weights.gemma3n_altup_clamp"
FAKE_CONSTANT = "fake tensor in the exported program constant"


def _weight_beyond_clip(model):
    """Layer 0's first correction coefficient at three times the clip: eager clamps it on its first call."""
    altup = model.model.layers[0].altup
    with torch.no_grad():
        altup.correction_coefs.weight[0, 0] = 3 * model.config.altup_coef_clip
    return altup


def gemma3n_case(step):
    def build():
        arch = tiny.architecture("gemma3n_text", "causal")
        model = tiny.build(arch)
        _weight_beyond_clip(model)
        traced, other, third = (tiny.inputs(model, arch, step, k, padded=True) for k in range(3))
        return model, traced, other, [third, other]

    return Proof(f"gemma3n_text/{step}", build, rows=(ROW,), fails_with=FAKE_CONSTANT, beside=("all",))


@pytest.mark.parametrize("step", ["prefill", "decode"])
def test_gemma3n_exports_fail_without_the_row_and_match_eager_with_it(make_agent, step):
    proving.prove(gemma3n_case(step), make_agent)


def test_the_rewrite_equals_the_original_and_writes_no_weight():
    from transformers.models.gemma3n import modeling_gemma3n

    from autopatch.areas.weight_writes.clamps import gemma3n_correction_clamped_on_read

    model = tiny.build(tiny.architecture("gemma3n_text", "causal"))
    altup = _weight_beyond_clip(model)
    clip = model.config.altup_coef_clip
    torch.manual_seed(0)
    predictions = torch.randn(model.config.altup_num_inputs, 3, 5, model.config.hidden_size)
    activated = torch.randn(3, 5, model.config.hidden_size)
    rewritten = gemma3n_correction_clamped_on_read(modeling_gemma3n.Gemma3nTextAltUp.correct)
    untouched = altup.correction_coefs.weight.detach().clone()

    with torch.no_grad():
        got = rewritten(altup, predictions, activated)
        assert torch.equal(altup.correction_coefs.weight, untouched), "the rewrite wrote the weight"
        expected = modeling_gemma3n.Gemma3nTextAltUp.correct(copy.deepcopy(altup), predictions, activated)
        unclamped = torch.nn.functional.linear(altup.compute_router_modalities(activated), untouched)

    assert torch.equal(got, expected)
    assert untouched.abs().max() > clip  # the clamp mattered: without it the coefficients differ
    assert not torch.equal(unclamped, torch.nn.functional.linear(altup.compute_router_modalities(activated),
                                                                 untouched.clamp(-clip, clip)))


def test_mega_prefill_traced_after_eager_fails_without_the_row_and_matches_eager_with_it(make_agent):
    """4.x Mega (the tiny catalogue's; its EMA truncation and max positions the config's) keeps the longest EMA kernel
    it computed in eval mode on the module. A user who runs the model before exporting it (here at the longest
    length checked afterwards) gets, without the row, a program that refuses that length; with it the kernel is
    computed for the traced length and other batches and lengths match eager."""
    def build():
        arch = tiny.architecture("mega", "causal")
        model = tiny.build(arch)
        traced, other, third = (tiny.inputs(model, arch, "prefill", k) for k in range(3))
        with torch.no_grad():
            model(**copy.deepcopy(third))  # eager first: the kernel cached at the longest length
        ema = model.mega.layers[0].mega_layer.ema_gate
        assert ema._kernel is not None and ema._kernel.size(-1) == third["input_ids"].shape[1]
        return model, traced, other, [other, third]

    proving.prove(Proof("mega/prefill", build, rows=("transformers.weights.mega_ema_kernel",),
                        fails_with="Guard failed", beside=("all",), fails_at_run=True), make_agent)
