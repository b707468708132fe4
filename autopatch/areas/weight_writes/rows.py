"""The rows of this area. Models that write their own weights while they run: 4.x Gemma 3n's AltUp clamps its
correction weight in place (``weight.data.clamp_``) on every call, in eval mode too. Under export the parameter is
a traced value and ``.data`` a tensor the tracer cannot follow: the program would hold a fake tensor as a constant.
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
)
