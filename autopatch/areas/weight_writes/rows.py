"""The rows of this area. Models that write their own weights while they run: 4.x Gemma 3n's AltUp clamps its
correction weight in place (``weight.data.clamp_``) on every call, in eval mode too. Under export the parameter is
a traced value and ``.data`` a tensor the tracer cannot follow: the program would hold a fake tensor as a constant.
GPTSAN-japanese's router casts its classifier module to the router's dtype on every call, a parameter swap under
export even when the dtype is already the router's. 4.x Mega keeps the longest EMA kernel it computed on the module.
"""

from __future__ import annotations

from ...spec import PatchSpec

ROWS = (
    PatchSpec(
        id="transformers.weights.gemma3n_altup_clamp",
        family="transformers",
        trigger="transformers.models.gemma3n.modeling_gemma3n",
        target="Gemma3nTextAltUp.correct",
        mode="rewrite",
        replacement="autopatch.areas.weight_writes.clamps:gemma3n_correction_clamped_on_read",
        # 5.0 clamps only while training, out of place
        requires=("transformers>=4.56,<5",),
        fingerprints=("4a8978d98176",),  # 4.57.6
        reason="4.x Gemma3nTextAltUp.correct clamps its correction weight in place on every call "
        "(`self.correction_coefs.weight.data.clamp_(-clip, clip)`, eval mode too): the export of Gemma 3n's "
        "prefill and decode stopped on 'We found a fake tensor in the exported program constant's list' "
        "(model.layers.0.lifted_tensor_2). Rewritten from the source: the weight is clamped where it is read "
        "(`F.linear(modalities, weight.clamp(-clip, clip))`), the values eager computes with its clamped "
        "weight; the model's own parameter is left as it is.",
    ),
    PatchSpec(
        id="transformers.weights.gptsan_router_cast",
        family="transformers",
        trigger="transformers.models.deprecated.gptsan_japanese.modeling_gptsan_japanese",
        target="GPTSanJapaneseTop1Router._cast_classifier",
        mode="route",
        replacement="autopatch.areas.weight_writes.casts:router_cast_when_needed",
        requires=("transformers<5",),  # the model is gone in 5.0
        fingerprints=("14faa3f8684c",),  # 4.57.6
        reason="GPTSAN-japanese's router runs `self.classifier = self.classifier.to(self.dtype)` on every call. "
        "Under export the parameters are fake tensors, which Module._apply swaps even for a same-dtype cast: the "
        "export stopped on \"_apply(): Couldn't swap Linear.weight\" (the traced weight has a weak reference). "
        "The cast is skipped when every classifier parameter already has the router's dtype (it changes no "
        "value then); another dtype still takes the original cast.",
    ),
    PatchSpec(
        id="transformers.weights.mega_ema_kernel",
        family="transformers",
        trigger="transformers.models.deprecated.mega.modeling_mega",
        target="MegaMultiDimensionDampedEma.get_ema_kernel",
        mode="route",
        replacement="autopatch.areas.weight_writes.kernels:mega_ema_kernel_uncached",
        requires=("transformers<5",),  # the model is gone in 5.0
        fingerprints=("24ec4bb10b1f",),  # 4.57.6
        reason="Mega's EMA keeps the longest kernel it computed in eval mode on the module and slices it: traced "
        "after an eager run, the program guarded the length on the eager one ('Guard failed: "
        "attention_mask.size()[1] != 9' at that length, longer ones refused) and a traced kernel could be left on "
        "the module. The kernel is computed afresh for the traced length, as in training mode.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ("transformers.weights.gemma3n_altup_clamp",),
        "4.x Gemma 3n clamps a weight in place in every forward (`weight.data.clamp_`): its prefill and decode "
        "stopped on a fake tensor among the program's constants. The weight is clamped where it is read: "
        "eager's values, the parameter left as it is.",
    ),
    (
        ("transformers.weights.gptsan_router_cast",),
        "GPTSAN-japanese's router casts its classifier module to the router's dtype in every forward: under export "
        "a same-dtype cast still swaps the traced parameters and the export stopped (\"Couldn't swap "
        "Linear.weight\"). The cast is skipped when it changes no dtype.",
    ),
    (
        ("transformers.weights.mega_ema_kernel",),
        "4.x Mega keeps the longest EMA kernel it computed on the module: a program traced after an eager run "
        "guarded the length on eager's. The kernel is computed afresh for the traced length.",
    ),
)
