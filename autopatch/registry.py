"""Every patch autopatch ships, as data.  Read top to bottom: what is patched, where, when, and why.

Two tables:
  EXPORT_ENTRY_POINTS  the functions whose call turns the export scope on for the calling thread. They are
                       part of the agent: installed whenever any patch is selected, never selected by name.
  PATCHES              the patches users select with EXPORT_PATCHES.
"""

from __future__ import annotations

from .spec import PatchSpec

TORCH = (("torch", ">=2.6"),)

EXPORT_ENTRY_POINTS = (
    PatchSpec(
        id="agent.scope.export",
        family="agent",
        trigger="torch.export._trace",
        target="_export",
        mode="entry",
        requires=TORCH,
        reason="Every torch.export path (export, draft_export, torch.onnx.export(dynamo=True), transformers' "
        "exporters) ends here, looked up at call time, so aliases bound before activation are covered too.",
    ),
    PatchSpec(
        id="agent.scope.public_export",
        family="agent",
        trigger="torch.export",
        target="export",
        mode="entry",
        requires=TORCH,
        reason="Starts the scope before torch.export.export's own argument processing.",
    ),
    PatchSpec(
        id="agent.scope.draft_export",
        family="agent",
        trigger="torch.export",
        target="draft_export",
        mode="entry",
        requires=TORCH,
        reason="draft_export re-exports several times; one scope covers them all.",
    ),
    PatchSpec(
        id="agent.scope.onnx_export",
        family="agent",
        trigger="torch.onnx",
        target="export",
        mode="entry",
        requires=TORCH,
        reason="torch.onnx.export(dynamo=True) runs the model before and after torch.export; one scope covers it.",
    ),
)

PATCHES = (
    PatchSpec(
        id="pytree.dynamic_cache",
        family="pytree",
        trigger="transformers.cache_utils",
        target="DynamicCache",
        mode="install",
        replacement="autopatch.patches.pytree_caches:register_dynamic_cache",
        requires=(("transformers", ">=4.56"), ("torch", ">=2.6")),
        reason="DynamicCache (and its subclasses in cache_utils) is not a pytree node, so torch.export rejects it "
        "as an input or output. Flattened as {'key_cache': [...], 'value_cache': [...]} (plus linear-attention "
        "states when present); the context keeps each layer's class and constructor arguments.",
    ),
    PatchSpec(
        id="pytree.static_cache",
        family="pytree",
        trigger="transformers.cache_utils",
        target="StaticCache",
        mode="install",
        replacement="autopatch.patches.pytree_caches:register_static_cache",
        requires=(("transformers", ">=4.56"), ("torch", ">=2.6")),
        reason="StaticCache (and on 4.56-4.57 SlidingWindowCache, HybridCache, HybridChunkedCache) as an export "
        "input or output; the layers' position counters are tensors and travel as leaves.",
    ),
    PatchSpec(
        id="pytree.encoder_decoder_cache",
        family="pytree",
        trigger="transformers.cache_utils",
        target="EncoderDecoderCache",
        mode="install",
        replacement="autopatch.patches.pytree_caches:register_encoder_decoder_cache",
        requires=(("transformers", ">=4.56"), ("torch", ">=2.6")),
        reason="Encoder-decoder models (bart, t5, whisper...) take and return an EncoderDecoderCache; it flattens "
        "to [self_attention_cache, cross_attention_cache].",
    ),
    PatchSpec(
        id="pytree.mamba_cache",
        family="pytree",
        trigger="transformers.models.mamba.modeling_mamba",
        target="MambaCache",
        mode="install",
        replacement="autopatch.patches.pytree_caches:register_mamba_cache",
        requires=(("transformers", ">=4.56,<5"), ("torch", ">=2.6")),
        reason="Mamba's own cache (before 5.0 moved it into DynamicCache's linear-attention layers) as an export "
        "input or output: {'conv_states': [...], 'ssm_states': [...]}.",
    ),
    # --- torch family: symbolic-shape fixes (issue 4) ---
    # --- end of torch family ---
    # --- transformers family: RoPE and state-space scans (issue 5) ---
    # --- end of RoPE and state-space scans ---
    # --- transformers family: MoE and vision-language models (issue 5) ---
    # --- end of MoE and vision-language models ---
)
