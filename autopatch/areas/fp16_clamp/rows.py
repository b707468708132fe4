"""The rows of this area. Control-flow rewriting (family ``rewrite``): encoder layers' float16 clamps behind a tensor
condition become ``torch.cond``. The rewriter itself is ``autopatch.rewrite``.
"""

from __future__ import annotations

from ...spec import PatchSpec, table_row

#: Encoder layers that clamp float16 hidden states behind a tensor condition (rows of the rewrite family, at the
#: end of PATCHES). Only models a test exports in float16. The same `if` also sits in led and nllb_moe (both fail
#: first elsewhere, in float32 too), the DETR family, the time-series transformers and the pixel decoders of
#: mask2former/oneformer (not measured yet).
ClampLayer = table_row("ClampLayer", ("model", "layer"))
FP16_CLAMP_LAYERS = (
    ClampLayer("bart", "BartEncoderLayer"),
    ClampLayer("plbart", "PLBartEncoderLayer"),
    ClampLayer("mvp", "MvpEncoderLayer"),
    ClampLayer("marian", "MarianEncoderLayer"),
    ClampLayer("blenderbot_small", "BlenderbotSmallEncoderLayer"),
    ClampLayer("bigbird_pegasus", "BigBirdPegasusEncoderLayer"),
)

ROWS = (
    *(
        PatchSpec(
            id=f"rewrite.fp16_clamp.{model}",
            family="rewrite",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{layer}.forward",
            mode="rewrite",
            replacement="autopatch.rewrite:rewrite_tensor_conditions",
            requires=("transformers>=4.56", "torch>=2.9"),
            reason=f"{layer}.forward clamps float16 hidden states with `if hidden_states.dtype == torch.float16 "
            "and <any inf or nan>`: the second operand is a tensor, so a float16 export stops on a "
            "data-dependent guard (Eq(u0, 1)). Rewritten to torch.cond (clamp or keep), decided at run time.",
        )
        for model, layer in FP16_CLAMP_LAYERS
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        (
            'rewrite.fp16_clamp.bart', 'rewrite.fp16_clamp.plbart', 'rewrite.fp16_clamp.mvp',
            'rewrite.fp16_clamp.marian', 'rewrite.fp16_clamp.blenderbot_small', 'rewrite.fp16_clamp.bigbird_pegasus',
        ),
        "Float16 exports of these seq2seq models stop on the encoder layer's `if hidden_states.dtype == "
        "torch.float16 and <any inf or nan>:` (a tensor condition). The layer's own source is rewritten "
        'to `torch.cond` when its module is imported: clamp or keep, decided by the exported program at '
        'run time.',
    ),
)
