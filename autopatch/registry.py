"""Every patch autopatch ships, as data.  Read top to bottom: what is patched, where, when, and why.

Two tables:
  EXPORT_ENTRY_POINTS  the functions whose call turns the export scope on for the calling thread. They are
                       part of the agent: installed whenever any patch is selected, never selected by name.
  PATCHES              the patches users select with EXPORT_PATCHES.
"""

from __future__ import annotations

from .spec import PatchSpec

#: The torch releases the torch rows and the entry points were measured on (benchmarks/torch_release.sh: 2.9.1,
#: 2.13.0, 2.14.1, 2.15.0); fingerprints, not an upper bound, catch a newer release that rewrote a patched function.
TORCH = (("torch", ">=2.9"),)
#: The rows inside torch.onnx's exporter: measured on 2.13.0, 2.14.1 and 2.15.0. On 2.9.1 its exporter differs
#: (other names, other decompositions) and their tests fail, so they are not installed there.
TORCH_ONNX = (("torch", ">=2.13"),)

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

#: Encoder layers that clamp float16 hidden states behind a tensor condition (rows of the rewrite family, at the
#: end of PATCHES). Only models a test exports in float16. The same `if` also sits in led and nllb_moe (both fail
#: first elsewhere, in float32 too), the DETR family, the time-series transformers and the pixel decoders of
#: mask2former/oneformer (not measured yet).
FP16_CLAMP_LAYERS = (
    ("bart", "BartEncoderLayer"),
    ("plbart", "PLBartEncoderLayer"),
    ("mvp", "MvpEncoderLayer"),
    ("marian", "MarianEncoderLayer"),
    ("blenderbot_small", "BlenderbotSmallEncoderLayer"),
    ("bigbird_pegasus", "BigBirdPegasusEncoderLayer"),
)

#: Vision-language models and the class holding their get_placeholder_mask: on 4.x Llava's source in each, on
#: 5.0-5.11 another source shared by all of them (each failed without its row on 4.57.6 and 5.3.0). Measured:
#: mistral3 fails first in Pixtral's vision tower (data-dependent image sizes): not listed.
PLACEHOLDER_MASK_MODELS = (
    ("llava", "LlavaModel"),
    ("gemma3", "Gemma3Model"),
    ("vipllava", "VipLlavaModel"),
    ("paligemma", "PaliGemmaModel"),
    ("aya_vision", "AyaVisionModel"),
    ("internvl", "InternVLModel"),
    ("got_ocr2", "GotOcr2Model"),
    ("cohere2_vision", "Cohere2VisionModel"),
    ("fuyu", "FuyuModel"),
)

#: Hybrid mamba/attention models of 4.x and 5.0-5.4 (model-local caches until 5.5) whose decode step exports with
#: their cache row, the mask replacement and the mixer rewrite (falcon_h1: and its cache's update).
#: (model, cache class, class with _update_mamba_mask, mixer class with torch_forward, fingerprints of that source
#: on 4.57.6 and 5.3.0).
HYBRID_MAMBA_4X = (
    ("bamba", "HybridMambaAttentionDynamicCache", "BambaModel", "BambaMixer", ("a1f8754ec6b6", "9952e7d77950")),
    ("granitemoehybrid", "HybridMambaAttentionDynamicCache", "GraniteMoeHybridModel", "GraniteMoeHybridMambaLayer",
     ("a1f8754ec6b6", "9952e7d77950")),
    ("falcon_h1", "FalconHybridMambaAttentionDynamicCache", "FalconH1Model", "FalconH1Mixer",
     ("04d321f63f14", "da683ccbe8ef")),
)
#: Where those models keep model-local caches (4.x, and 5.x until DynamicCache took their states in 5.5).
LOCAL_CACHES = ("transformers", ">=4.56,<5.5")

#: Idefics-family VLMs of 4.x: (model, class prefix, fingerprints of get_image_features on 4.57.6 and on 5.12.1,
#: where it is the same code (Idefics2 on 5.3.0 too, which also passes return_dict to the tower), its rewriter).
IDEFICS_4X = (
    ("idefics2", "Idefics2", ("b7dfd689b1da", "745d41d063c7", "a35cb0515be1"), "idefics_image_features_4x"),
    ("idefics3", "Idefics3", ("fd6b32bc0b14", "95f194c6ed61"), "idefics_image_features_4x"),
    ("smolvlm", "SmolVLM", ("b1325e7e4dfe",), "smolvlm_image_features_4x"),  # 4.57 only (see SmolVLM 5.x below)
)

#: 5.23 VLMs that pack all images' patches into one sequence (Qwen2-VL's tower), each exported by a test. Their
#: vision attention and get_placeholder_mask share one source (fingerprints in the rows); each model module binds
#: vision_utils.get_vision_position_ids by name. Columns: model, vision attention class, model class,
#: get_image_features (fingerprint, rewriter), get_rope_index (fingerprint, replacement).
PACKED_VISION_MODELS = (
    ("qwen2_vl", "VisionAttention", "Qwen2VLModel", "54bb4440fb12", "packed_image_features",
     "31c7fed95e71", "qwen2_vl_rope_index"),
    ("qwen2_5_vl", "Qwen2_5_VLVisionAttention", "Qwen2_5_VLModel", "54bb4440fb12", "packed_image_features",
     "a52a842c5d34", "qwen2_5_vl_rope_index"),
    ("qwen3_vl", "Qwen3VLVisionAttention", "Qwen3VLModel", "cf364b3e5fa9", "packed_deepstack_image_features",
     "b3d7f47d79df", "qwen3_vl_rope_index"),
    # GLM-4V: Qwen2-VL's feature split, Qwen3-VL's rope index (the same code under its own docstring).
    ("glm4v", "Glm4vVisionAttention", "Glm4vModel", "54bb4440fb12", "packed_image_features",
     "2791d473e5f4", "qwen3_vl_rope_index"),
    # Qwen3.5: Qwen3-VL's tower without deepstack (Qwen2-VL's feature split) and rope index; its text model's
    # linear-attention layers need transformers.qwen3_5.gated_delta_scan too.
    ("qwen3_5", "Qwen3_5VisionAttention", "Qwen3_5Model", "54bb4440fb12", "packed_image_features",
     "b3d7f47d79df", "qwen3_vl_rope_index"),
)

#: Of those, the models whose strict export fixes the image size while formatting get_placeholder_mask's message
#: (measured: Qwen2.5-VL's strict program takes other images without the row, so it has none), with the
#: fingerprint of that method (GLM-4V's differs only in its video mask, which reads the image token).
PLACEHOLDER_CHECK_STRICT = {"qwen2_vl": "e96fc4bdcbe2", "qwen3_vl": "e96fc4bdcbe2", "glm4v": "be2b76473392"}

#: What every packed-vision row requires: the 5.23 sources (vision_utils and the shared attention).
PACKED_VISION_REQUIRES = (("transformers", ">=5.13"), ("torch", ">=2.9"))

#: The same models in 4.57's sources (the ``*_4x`` rows): each module has its own copies, mostly of one source.
#: Columns: model, vision tower class, vision attention class, model class, and the fingerprints of the tower's
#: rot_pos_emb, the attention's forward, get_image_features, get_placeholder_mask, get_rope_index.
PACKED_VISION_MODELS_4X = (
    ("qwen2_vl", "Qwen2VisionTransformerPretrainedModel", "VisionAttention", "Qwen2VLModel",
     ("7290f8a51f13", "e272c1758c19", "03ab8c6986fe", "b6431acf2fe5", "a52f6da348cc")),
    ("qwen2_5_vl", "Qwen2_5_VisionTransformerPretrainedModel", "Qwen2_5_VLVisionAttention", "Qwen2_5_VLModel",
     ("7290f8a51f13", "e272c1758c19", "03ab8c6986fe", "b6431acf2fe5", "4df9dd73ae33")),
    ("qwen3_vl", "Qwen3VLVisionModel", "Qwen3VLVisionAttention", "Qwen3VLModel",
     ("bde0eb1ec127", "e272c1758c19", "9e199b02c42f", "b6431acf2fe5", "fba6bcaef532")),
)
PACKED_VISION_REQUIRES_4X = (("transformers", ">=4.56,<5"), ("torch", ">=2.9"))

#: transformers 4.48-4.55 cache rows: (short name, class in cache_utils, what fails without the row).
LEGACY_CACHES = (
    ("dynamic_cache", "DynamicCache", "as an export input or output. 4.48-4.49: not a pytree node; 4.50-4.53 "
     "register it themselves, but their torch.fx flatten spec returns the leaves, and every program fails its "
     "guards on its first call; 4.54-4.55's registration builds DynamicCache() on unflatten, which strict=True "
     "cannot trace: replaced."),
    ("static_cache", "StaticCache", "as an export input or output: not a pytree node."),
    ("hybrid_cache", "HybridCache", "the sliding + full cache of Gemma2 and its kin: not a pytree node."),
    ("mamba_cache", "MambaCache", "the cache of Mamba and FalconMamba (cache_utils then): not a pytree node."),
)

PATCHES = (
    PatchSpec(
        id="pytree.dynamic_cache",
        family="pytree",
        trigger="transformers.cache_utils",
        target="DynamicCache",
        mode="install",
        replacement="autopatch.patches.pytree_caches:register_dynamic_cache",
        requires=(("transformers", ">=4.56"), ("torch", ">=2.9")),
        reason="DynamicCache (and every subclass: cache_utils' own, a model's such as MiniMaxCache, a user's, "
        "also those defined later) is not a pytree node, so torch.export rejects it "
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
        requires=(("transformers", ">=4.56"), ("torch", ">=2.9")),
        reason="StaticCache and its subclasses (on 4.56-4.57 SlidingWindowCache, HybridCache, HybridChunkedCache) as an export "
        "input or output; the layers' position counters are tensors and travel as leaves.",
    ),
    PatchSpec(
        id="pytree.encoder_decoder_cache",
        family="pytree",
        trigger="transformers.cache_utils",
        target="EncoderDecoderCache",
        mode="install",
        replacement="autopatch.patches.pytree_caches:register_encoder_decoder_cache",
        requires=(("transformers", ">=4.48"), ("torch", ">=2.9")),
        reason="Encoder-decoder models (bart, t5, whisper...) take and return an EncoderDecoderCache; it flattens "
        "to [self_attention_cache, cross_attention_cache].",
    ),
    PatchSpec(
        id="pytree.model_output_keys",
        family="pytree",
        trigger="transformers.utils.generic",
        target="ModelOutput",
        mode="install",
        replacement="autopatch.patches.pytree_model_outputs:install_model_output_keys",
        requires=(("transformers", ">=4.48,<5"), ("torch", ">=2.9")),
        reason="4.x registers model outputs as pytree nodes without key paths, so a seq2seq decode step given "
        "encoder_outputs=BaseModelOutput(...) (as optimum and Whisper runtimes feed it) stops with 'Did not find a "
        "flatten_with_keys_fn'. Adds the field names as keys to transformers' own registration (kept).",
    ),
    PatchSpec(
        id="transformers.exporters.flat_graph_layout",
        family="pytree",
        trigger="transformers.exporters.base",
        target="HfExporter._export_component",
        mode="install",
        replacement="autopatch.patches.transformers_exporters:install_flat_graph_layout",
        requires=(("transformers", ">=5.0"), ("torch", ">=2.9")),
        reason="transformers' ONNX, OpenVINO and ExecuTorch exporters name graph inputs and outputs by their own "
        "walk of a cache (layers.0.keys, layers.0.values, layers.1.keys...) and pass the names by position: inside "
        "them a cache flattens in that order under those paths, else keys and values would be wired to each "
        "other's names (wrong numbers, silently). DynamoExporter and plain torch.export keep the agent's layout.",
    ),
    PatchSpec(
        id="transformers.exporters.sliding_layers_as_eager",
        family="transformers",
        trigger="transformers.exporters.exporter_dynamo",
        target="apply_patches",
        mode="install",
        replacement="autopatch.patches.transformers_exporters_sliding:install_sliding_layers_as_eager",
        requires=(("transformers", ">=5.0"), ("torch", ">=2.9")),
        reason="transformers' exporters trace a sliding-window layer as a full one, so their program reads the keys "
        "it is given as every token seen: a cache filled past its window (as eager leaves it) gives wrong numbers, "
        "silently. Where the agent's sliding rows are in place, those three stand-ins are withheld for the export: "
        "the program takes and returns eager's caches, right in every regime.",
    ),
    # Sliding-window layers: one program for every past length, inside the window, crossing it and beyond it.
    PatchSpec(
        id="transformers.cache.sliding_update",
        family="transformers",
        trigger="transformers.cache_utils",
        target="DynamicSlidingWindowLayer.update",
        mode="route",
        replacement="autopatch.patches.transformers_sliding:sliding_update",
        requires=(("transformers", ">=4.56"), ("torch", ">=2.9")),
        fingerprints=("1d2449946249", "ee796ceb5145"),
        reason="A sliding layer keeps its last window - 1 tokens with keys[:, :, -window + 1:]: torch compares the "
        "traced past with the window, so a program traced inside the window refuses a past beyond it and the other "
        "way round. Keeps min(length, window - 1) tokens (torch.sym_min): no guard, the same tensors.",
    ),
    PatchSpec(
        id="transformers.cache.sliding_mask_sizes",
        family="transformers",
        trigger="transformers.cache_utils",
        target="DynamicSlidingWindowLayer.get_mask_sizes",
        mode="route",
        replacement="autopatch.patches.transformers_sliding:sliding_mask_sizes",
        requires=(("transformers", ">=4.56"), ("torch", ">=2.9")),
        fingerprints=("ac86092c14a3", "68bb5db6d9c1"),
        reason="With transformers.cache.sliding_update: the mask sizes branch on 'seen >= window' and take "
        "max(seen - window + 1, 0) in Python (guards on the past). Computed with torch.sym_min/sym_max.",
    ),
    PatchSpec(
        id="transformers.masks.sdpa_causal_skip",
        family="transformers",
        trigger="transformers.masking_utils",
        target="_ignore_causal_mask_sdpa",
        mode="route",
        replacement="autopatch.patches.transformers_sliding:ignore_causal_mask_sdpa",
        requires=(("transformers", ">=4.56"), ("torch", ">=2.9")),
        fingerprints=("265aa69ff0b2", "14bd2b59ba26"),
        reason="With the sliding rows: before answering False under any trace, this trims a padding mask longer "
        "than the keys behind 'if mask length > kv_length', which for a sliding layer traced inside its window "
        "ties the past to the window. Answers False without the unused trim.",
    ),
    # transformers 4.48-4.55: tensor-list caches, then CacheLayerMixin ones (pytree_legacy_caches). One row per
    # root class; each registers its subclasses too.
    *(
        PatchSpec(
            id=f"pytree.legacy.{short}",
            family="pytree",
            trigger="transformers.cache_utils",
            target=cache_class,
            mode="install",
            replacement=f"autopatch.patches.pytree_legacy_caches:register_{short}",
            requires=(("transformers", ">=4.48,<4.56"), ("torch", ">=2.9")),
            reason=f"{cache_class} of transformers 4.48-4.55 (and its subclasses), {why} Flattened by attribute: "
            "its tensor lists as children, the rest as structure; per-call counters rebuilt from the tensors.",
        )
        for short, cache_class, why in LEGACY_CACHES
    ),
    # transformers 4.x model-local caches: one row per model module, generated below from _MODEL_CACHES_4X.
    *(
        PatchSpec(
            id=f"pytree.model_cache.{model}",
            family="pytree",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=cache_class,
            mode="install",
            # The installer names its hit counter pytree.model_cache.<model> from the module, as here.
            replacement="autopatch.patches.pytree_caches:register_attribute_cache",
            requires=(("transformers", f">={since},<5.5"), ("torch", ">=2.9")),
            reason=f"{cache_class}, the {model} cache of transformers 4.x and 5.0-5.4 (5.5 and later keep these "
            "states in DynamicCache), "
            "as an export input or output: its tensor attributes in definition order, the rest as structure.",
        )
        # Only caches whose models then export and run, with the transformers rows of the hybrid models below
        # (mamba2 and lfm2: their decode_by_length rows). zamba2 registers with the same codec but fails further
        # in its own code: nothing could prove its row. (falcon_mamba's program unlifts with
        # torch.export.parameter_buffers.)
        # MambaCache moved out of cache_utils into modeling_mamba in 4.54 (pytree.legacy.mamba_cache before).
        for model, cache_class, since in (("mamba", "MambaCache", "4.54"), ("falcon_mamba", "FalconMambaCache", "4.54"),
                                          ("qwen3_next", "Qwen3NextDynamicCache", "4.56"),
                                          ("jamba", "HybridMambaAttentionDynamicCache", "4.56"),
                                          ("mamba2", "Mamba2Cache", "4.56"), ("lfm2", "Lfm2HybridConvCache", "4.56"),
                                          *((row[0], row[1], "4.56") for row in HYBRID_MAMBA_4X))
    ),
    # --- torch family: symbolic-shape fixes (issue 4) ---
    PatchSpec(
        id="torch.broadcast.infer_size",
        family="torch",
        trigger="torch._subclasses.fake_impls",
        target="infer_size",
        mode="route",
        replacement="autopatch.patches.torch_shapes:infer_size",
        requires=TORCH,
        fingerprints=("7b5dd4cdd595", "a91789a75c4d"),
        reason="x + y with independent dynamic dims traced at equal sizes: the FakeTensor fast path decides "
        "size_a == size_b from the hints and replaces one dim by the other, so the program rejects broadcasting "
        "inputs ((1,3)+(4,3)) and named Dims fail with 'must always be equal'. Keeps both dims: Max(a, b) and a "
        "deferred 'equal or 1' check.",
    ),
    PatchSpec(
        id="torch.broadcast.fast_binary",
        family="torch",
        trigger="torch._subclasses.fake_tensor",
        target="get_fast_op_impls",
        mode="route",
        replacement="autopatch.patches.torch_shapes:get_fast_op_impls",
        requires=TORCH,
        # 2.9.1 and 2.13.0 differ in annotations; 2.14 adds aten.alias.default to the table; the add/sub/mul/div
        # entries this wraps are the same.
        fingerprints=("bdb846b589cd", "4e4663b18f03", "8b476f7b3971"),
        reason="With torch.broadcast.infer_size: the add/sub/mul/div.Tensor fast path then checks 'operand shape == "
        "output shape' on the hints (guard_or_false) and the program again rejects broadcasting inputs. An output "
        "no operand statically matches is built contiguous of the broadcast shape, with no guard.",
    ),
    PatchSpec(
        id="torch.broadcast_refs.broadcast_shapes",
        family="torch",
        trigger="torch._refs",
        target="_broadcast_shapes",
        mode="route",
        replacement="autopatch.patches.torch_shapes:broadcast_shapes",
        requires=TORCH,
        fingerprints=("7f6c86c08b3e", "fdb146ffee68"),
        reason="Refs path of where/maximum/pow/eq/expand_as...: torch._check(common == shape) replaces one "
        "independent dim by the other. Opt-in: helps only with torch.backed_size_oblivious and the other "
        "torch.broadcast_refs.* patches.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.broadcast_shapes_meta_registrations",
        family="torch",
        trigger="torch._meta_registrations",
        target="_broadcast_shapes",
        mode="route",
        replacement="autopatch.patches.torch_shapes:broadcast_shapes",
        requires=TORCH,
        fingerprints=("7f6c86c08b3e", "fdb146ffee68"),
        reason="The alias of torch._refs._broadcast_shapes bound by torch._meta_registrations.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.broadcast_shapes_conversions",
        family="torch",
        trigger="torch._refs._conversions",
        target="_broadcast_shapes",
        mode="route",
        replacement="autopatch.patches.torch_shapes:broadcast_shapes",
        requires=TORCH,
        fingerprints=("7f6c86c08b3e", "fdb146ffee68"),
        reason="The alias of torch._refs._broadcast_shapes bound by torch._refs._conversions.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.maybe_broadcast",
        family="torch",
        trigger="torch._refs",
        target="_maybe_broadcast",
        mode="route",
        replacement="autopatch.patches.torch_shapes:maybe_broadcast",
        requires=TORCH,
        fingerprints=("b9bb818767f9", "68f8551e77ba"),
        reason="Refs path: its should_expand asks torch._check(x == y) for each dim. Expands unless the shape is "
        "statically the common one. Opt-in, with torch.backed_size_oblivious.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.maybe_broadcast_meta_registrations",
        family="torch",
        trigger="torch._meta_registrations",
        target="_maybe_broadcast",
        mode="route",
        replacement="autopatch.patches.torch_shapes:maybe_broadcast",
        requires=TORCH,
        fingerprints=("b9bb818767f9", "68f8551e77ba"),
        reason="The alias of torch._refs._maybe_broadcast bound by torch._meta_registrations.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.broadcast_in_dim",
        family="torch",
        trigger="torch._prims",
        target="broadcast_in_dim.prim_meta_impl",
        mode="route",
        replacement="autopatch.patches.torch_shapes:broadcast_in_dim_meta",
        requires=TORCH,
        fingerprints=("227b3f26efb3", "3a6441582085"),
        reason="The meta of prims.broadcast_in_dim (FakeTensor calls op.prim_meta_impl) checks a.shape[i] == "
        "shape[i], which forces the dims equal; a deferred 'broadcastable' check instead. Opt-in, with "
        "torch.backed_size_oblivious.",
        default=False,
    ),
    PatchSpec(
        id="torch.backed_size_oblivious",
        family="torch",
        trigger="torch.export._trace",
        target="_export_for_training",
        mode="route",
        replacement="autopatch.patches.torch_shapes:export_backed_size_oblivious",
        requires=TORCH,
        reason="Runs the export with torch.fx.experimental._config backed_size_oblivious=True: size checks stop "
        "reading the hints of backed symbols. With torch.broadcast_refs.* it keeps independent dims in "
        "torch.where/maximum/... Opt-in: it changes which guards every export records.",
        default=False,
    ),
    PatchSpec(
        id="torch.min_max_by_range",
        family="torch",
        trigger="torch.fx.experimental.symbolic_shapes",
        target="ShapeEnv._maybe_evaluate_static",
        mode="route",
        replacement="autopatch.patches.torch_shapes:maybe_evaluate_static",
        requires=TORCH,
        # The replacement asks the original again on a reduced expression, so it relies on what the original's
        # keywords (compute_hint, unbacked_only, var_to_range) mean: 2.9.1, 2.13.0, 2.14.1 (simplify gets the
        # ranges), 2.15.0 (singleton ints decided first).
        fingerprints=("46bbccaed0ad", "fb311d8f650f", "dcfd46f0b5dc", "00f3ff12404d"),
        reason="Grouped-query attention (repeat_kv's expand + reshape) makes torch guard Eq(Min(16*p + 16, "
        "32*p + 32), 16*p + 16): always true, but undecidable for torch, so a decode step exported with a named "
        "Dim for the past length fails ('Not all values of past ... satisfy the generated guard'). Drops the "
        "Min/Max arguments the Dims' ranges show can never win, and lets torch decide again; a Min/Max neither of whose "
        "arguments always wins is taken as a symbol over its own range (GPT-2's reshape after adding position "
        "embeddings of broadcast dims: 'Max(b1, b2) * Max(s1, s2) != Max(b1, b2)' refused every one-token step).",
    ),
    PatchSpec(
        id="torch.stop_if_static",
        family="torch",
        trigger="torch.fx.experimental.symbolic_shapes",
        target="ShapeEnv._set_replacement",
        mode="route",
        replacement="autopatch.patches.torch_shapes:set_replacement",
        requires=TORCH,
        fingerprints=("b0b1b38551b6", "78a9265cf80f"),
        reason="Debugging aid: raises StopIfStaticError the moment a dynamic input dim is specialized to a constant "
        "or forced equal to another input dim, naming the guard and the user's file:line (torch reports it only "
        "at the end, without a location, or not at all for x + y).",
        default=False,
    ),
    PatchSpec(
        id="torch.export.range_constraints_varkw",
        family="torch",
        trigger="torch.export._trace",
        target="_get_range_constraints",
        mode="route",
        replacement="autopatch.patches.torch_shapes:get_range_constraints",
        # 2.14 builds the traced order with _combine_args_for_tracing, which flattens the group itself: the
        # same export passes there without this row (tests/test_torch_shapes.py shows both).
        requires=(("torch", ">=2.9,<2.14"),),
        fingerprints=("4839f12dce44",),
        reason="forward(self, input_ids, attention_mask=None, **kwargs) with dynamic shapes for the **kwargs: the "
        "'traced order' rebuild keeps the kwargs group and re-adds its keys, and export fails with 'Must provide a "
        "tree_name when there might be a mismatch'. Flattens the group in inputs and dynamic_shapes alike.",
    ),
    PatchSpec(
        id="torch.export.guards_varkw",
        family="torch",
        trigger="torch.export._unlift",
        target="_convert_guards_code_to_fn",
        mode="install",
        replacement="autopatch.patches.torch_shapes:install_varkw_guards",
        requires=TORCH,
        # The guard text it rewrites is what this function parses: 2.9.1, 2.13.0 (math in the namespace), and
        # 2.14.1/2.15.0 (a RecursionError fallback added).
        fingerprints=("ad9f32dc2fcb", "4fdda57458c7", "263d048e763b"),
        reason="Then, non-strict: ep.module() fails with \"NameError: name 'L' is not defined\": guards name "
        "L['kwargs']['past'] while the module's inputs are flat. Rewrites them to L['past']. Runs in ep.module(), "
        "after the export, so it is always on; it changes only guards that could not run.",
    ),
    PatchSpec(
        id="torch.export.parameter_buffers",
        family="torch",
        trigger="torch.export._unlift",
        target="_unlift_exported_program_lifted_states",
        mode="install",
        replacement="autopatch.patches.torch_shapes:install_parameter_buffers",
        requires=TORCH,
        reason="A non-persistent buffer whose value is an nn.Parameter (5.12 FalconMambaMixer's b_c_rms, dt_rms): "
        "ep.module() fails with \"KeyError: attribute 'b_c_rms' already exists\": the constants loop setattrs it "
        "(so it becomes a parameter), then the fix-up of non-persistent buffers registers it as a buffer. Unlifts "
        "it detached (same storage) instead. Runs in ep.module(), after the export, so it is always on; it changes only "
        "programs that would raise.",
    ),
    PatchSpec(
        id="torch.fake_tensor_cache_bypass",
        family="torch",
        trigger="torch._subclasses.fake_tensor",
        target="FakeTensorMode._cached_dispatch_impl",
        mode="route",
        replacement="autopatch.patches.torch_shapes:dispatch_without_cache",
        # Measured failing on torch 2.9.1 (with transformers 4.57.6) and passing on 2.13.0.
        requires=(("torch", ">=2.9,<2.13"),),
        fingerprints=("9dfbaaee428a",),
        reason="torch 2.9's FakeTensor dispatch cache rebuilds a cached output with set_(..., stride) whose "
        "symbolic strides (8*s72) the export tracer never saw: 'is not tracked with proxy', in every transformers "
        "4.x attention mask (padding_mask[batch_idx, kv_idx]). Dispatches without the cache while the thread "
        "exports, as torch does when the cache is off; 2.13 no longer needs it.",
    ),
    # --- end of torch family ---
    # --- transformers family: RoPE and state-space scans (issue 5) ---
    PatchSpec(
        id="transformers.rope.dynamic",
        family="transformers",
        trigger="transformers.modeling_rope_utils",
        target="dynamic_rope_update",
        mode="install",
        replacement="autopatch.patches.transformers_rope:install_dynamic_rope_update",
        requires=(("transformers", ">=4.57"), ("torch", ">=2.9")),
        fingerprints=("97e426d014ac", "9f96bf12a97e", "54741fa0ea32"),
        reason="Dynamic RoPE (rope_type='dynamic'; and 'longrope' on 4.x and 5.3-5.12, e.g. Phi-3) tests max(position_ids)+1 "
        "in Python ifs and re-registers inv_freq: export fails with 'Could not guard on data-dependent expression'. Under export, the decorated "
        "rotary forward uses where(seq_len > original length, rescaled, original) frequencies, without state; "
        "every model using the decorator, including classes decorated before activation.",
    ),
    PatchSpec(
        id="transformers.mamba.selective_scan",
        family="transformers",
        trigger="transformers.models.mamba.modeling_mamba",
        target="mamba_selective_scan",
        mode="route",
        replacement="autopatch.patches.transformers_ssm:mamba_selective_scan",
        requires=(("transformers", ">=5.0"), ("torch", ">=2.9")),
        fingerprints=("b5b076947d18",),
        reason="Mamba's torch-only selective scan is a Python loop over the sequence: export unrolls it and "
        "specializes the sequence length. The recurrence runs as torch scan (higher-order op) instead; with a "
        "cache, the program refuses at run time the one-token step eager runs down another path.",
    ),
    PatchSpec(
        id="transformers.falcon_mamba.selective_scan",
        family="transformers",
        trigger="transformers.models.falcon_mamba.modeling_falcon_mamba",
        target="mamba_selective_scan",
        mode="route",
        replacement="autopatch.patches.transformers_ssm:mamba_selective_scan",
        requires=(("transformers", ">=5.0"), ("torch", ">=2.9")),
        fingerprints=("b5b076947d18",),
        reason="falcon_mamba's own copy of mamba_selective_scan: the same loop, the same scan.",
    ),
    PatchSpec(
        id="transformers.jamba.selective_scan",
        family="transformers",
        trigger="transformers.models.jamba.modeling_jamba",
        target="mamba_selective_scan",
        mode="route",
        replacement="autopatch.patches.transformers_ssm:mamba_selective_scan",
        requires=(("transformers", ">=5.0"), ("torch", ">=2.9")),
        fingerprints=("b5b076947d18",),
        reason="Jamba's own copy of mamba_selective_scan (its mamba layers' prefill, and a decode step of more than "
        "one token): the same loop, the same scan.",
    ),
    *(
        PatchSpec(
            id=f"transformers.{model}.slow_forward_scan",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{mixer}.slow_forward",
            mode="rewrite",
            replacement="autopatch.patches.transformers_ssm:scan_instead_of_loop",
            requires=(("transformers", ">=5,<5.13"), ("torch", ">=2.9")),
            fingerprints=fingerprints,
            reason=f"5.3-5.12 {mixer} prefill: under tracing associative_scan, whose program fixes the batch and "
            "refuses shorter sequences; with a cache a Python loop over the sequence, which fixes its length. "
            "Rewritten from the source: the loop's recurrence as a scan, the cache updates as written.",
        )
        # FalconMamba's mixer has the same code; its program unlifts with torch.export.parameter_buffers.
        # Fingerprints: 5.3.0 (its model-local cache's updates), 5.5-5.12 (DynamicCache's).
        for model, mixer, fingerprints in (("mamba", "MambaMixer", ("d3c6963850b0", "647e86c140af")),
                                           ("falcon_mamba", "FalconMambaMixer", ("be878582269b", "6fd5a458ef56")))
    ),
    PatchSpec(
        id="transformers.falcon_mamba.slow_forward_scan_4x",
        family="transformers",
        trigger="transformers.models.falcon_mamba.modeling_falcon_mamba",
        target="FalconMambaMixer.slow_forward",
        mode="rewrite",
        replacement="autopatch.patches.transformers_ssm:loop_as_scan",
        requires=(("transformers", ">=4.56,<5"), ("torch", ">=2.9")),
        fingerprints=("48877ccaa466",),
        reason="transformers 4.x: FalconMambaMixer.slow_forward loops over the sequence in Python, which fixes its "
        "length. Rewritten from the source: the loop's recurrence as a scan (its program also needs "
        "torch.export.parameter_buffers).",
    ),
    # The gated delta net's prefill (torch path): one source in these models on 5.23.
    *(
        PatchSpec(
            id=f"transformers.{model}.gated_delta_scan",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target="torch_chunk_gated_delta_rule",
            mode="rewrite",
            replacement="autopatch.patches.transformers_ssm:gated_delta_chunks_as_scan",
            requires=(("transformers", ">=5.13"), ("torch", ">=2.9")),
            fingerprints=("0dd16d07a108",),
            reason="The gated delta net's prefill (torch path, without flash-linear-attention) walks its chunks with "
            "`for i in range(num_chunks)`, ceil(seq / 64) iterations: export fixes the sequence length. Rewritten "
            "from the source: the same recurrence as torch scan over the chunks.",
        )
        for model in ("qwen3_next", "qwen3_5", "qwen3_5_moe", "olmo_hybrid")
    ),
    PatchSpec(
        id="transformers.minimax.lightning_decode_scan",
        family="transformers",
        trigger="transformers.models.minimax.modeling_minimax",
        target="MiniMaxLightningAttention.forward",
        mode="rewrite",
        replacement="autopatch.patches.transformers_ssm:lightning_decode_as_scan",
        requires=(("transformers", ">=4.56"), ("torch", ">=2.9")),
        fingerprints=("ec4256f9d53d", "69f87ef3f668", "dec6aa8a7765", "d52943090d9a"),  # 4.57, 5.3, 5.12, 5.23
        reason="MiniMax's lightning attention walks a cached step's tokens in a Python loop: a decode step of "
        "several tokens specializes its length. Rewritten from the source: the same recurrence as torch scan "
        "over the tokens.",
    ),
    PatchSpec(
        id="transformers.mamba.slow_forward",
        family="transformers",
        trigger="transformers.models.mamba.modeling_mamba",
        target="MambaMixer.slow_forward",
        mode="route",
        replacement="autopatch.patches.transformers_ssm:mamba_slow_forward",
        requires=(("transformers", "<5"), ("torch", ">=2.9")),
        fingerprints=("3b03478a8b54",),
        reason="transformers 4.x: the selective scan loop inside MambaMixer.slow_forward specializes the "
        "sequence length; the recurrence runs as torch scan instead (cache branches kept).",
    ),
    # 4.x hybrids' _update_mamba_mask: the mask above under its other name (Jamba's too, whose mixer needs no row).
    *(
        PatchSpec(
            id=f"transformers.{model}.mamba_mask",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}._update_mamba_mask",
            mode="route",
            replacement="autopatch.patches.transformers_ssm:linear_attention_mask",
            requires=(LOCAL_CACHES, ("torch", ">=2.9")),
            # One source, copied into each model; 5.3's Jamba also tests cache_position for None (its forward
            # always passes one).
            fingerprints=("7127cbd79e01", "5885cfd0e3f4") if model == "jamba" else ("7127cbd79e01",),
            reason=f"{owner}._update_mamba_mask (4.x, 5.0-5.4) is Qwen3-Next's linear-attention mask under "
            "another name (guard Eq(u0, 1) in every decode step): the same replacement.",
        )
        for model, owner in (*((row[0], row[2]) for row in HYBRID_MAMBA_4X), ("jamba", "JambaModel"))
    ),
    # 4.x Bamba-style mixers: the decode test.
    *(
        PatchSpec(
            id=f"transformers.{model}.decode_position",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{mixer}.torch_forward",
            mode="rewrite",
            replacement="autopatch.patches.transformers_ssm:assume_decode_position",
            requires=(LOCAL_CACHES, ("torch", ">=2.9")),
            fingerprints=mixer_fingerprints,
            reason=f"{mixer}.torch_forward (4.x, 5.0-5.4) picks its decode path with `... and seq_len == 1 and "
            "cache_position[0] > 0`: the last term is a data-dependent guard. Rewritten from the source: once the "
            "structural terms hold it is assumed, and the program asserts it at run time.",
        )
        for model, _, _, mixer, mixer_fingerprints in HYBRID_MAMBA_4X
    ),
    # 4.x and 5.0-5.4 Mamba2 mixer and LFM2 short convolution: the same decode test, without the structural terms.
    *(
        PatchSpec(
            id=f"transformers.{model}.decode_by_length",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=target,
            mode="rewrite",
            replacement=f"autopatch.patches.transformers_ssm:{rewriter}",
            requires=(LOCAL_CACHES, ("torch", ">=2.9")),
            fingerprints=fingerprints,  # 4.57.6, 5.3.0
            reason=f"{target} (4.x, 5.0-5.4) takes its one-token path when given a cache and `cache_position[0] > "
            "0`: a data-dependent guard with nothing structural beside it. Rewritten from the source: the step's "
            "length decides (one token: past position 0; several: position 0), asserted by the program at run time.",
        )
        for model, target, rewriter, fingerprints in (
            ("mamba2", "Mamba2Mixer.torch_forward", "assume_decode_by_length", ("3e7daa45c5a4", "6d13ddf29636")),
            ("lfm2", "Lfm2ShortConv.slow_forward", "short_conv_decode_by_length", ("fb11f66dbcc4", "c6000f7fd310")),
        )
    ),
    PatchSpec(
        id="transformers.jamba.causal_mask_length",
        family="transformers",
        trigger="transformers.models.jamba.modeling_jamba",
        target="JambaModel._update_causal_mask",
        mode="rewrite",
        replacement="autopatch.patches.transformers_ssm:causal_mask_length_from_mask",
        requires=(("transformers", ">=4.56,<5"), ("torch", ">=2.9")),
        fingerprints=("543f4a4249e5",),
        reason="Jamba's 4.x causal mask is `cache_position[-1] + 1` wide, a tensor: a data-dependent width the "
        "attention then fails to match with the keys (guard Eq(Min(6, u0), 6)). Rewritten from the source to take "
        "the 2D attention mask's width, asserted equal at run time.",
    ),
    PatchSpec(
        id="transformers.falcon_h1.cache_update",
        family="transformers",
        trigger="transformers.models.falcon_h1.modeling_falcon_h1",
        target="FalconHybridMambaAttentionDynamicCache.update",
        mode="rewrite",
        replacement="autopatch.patches.transformers_cache_len:shape_based_empty_check",
        requires=(LOCAL_CACHES, ("torch", ">=2.9")),
        fingerprints=("65abdfdf6e47", "745c19661b16"),  # 4.57, 5.3 (type hints only)
        reason="FalconH1's 4.x and 5.0-5.4 cache update tests `len(self.key_cache[layer_idx]) == 0` on a tensor: "
        "len() reads the batch as a plain int and fixes it to the traced size. Rewritten from the source to compare "
        "the first size.",
    ),
    PatchSpec(
        id="transformers.qwen3_next.one_token_path",
        family="transformers",
        trigger="transformers.models.qwen3_next.modeling_qwen3_next",
        target="Qwen3NextGatedDeltaNet.forward",
        mode="rewrite",
        replacement="autopatch.patches.transformers_ssm:one_token_path_checked",
        requires=(LOCAL_CACHES, ("torch", ">=2.9")),
        fingerprints=("8b7fcbc6ef29", "f5b167408bb0"),  # 4.57, 5.3
        reason="4.x and 5.0-5.4 Qwen3-Next picks its one-token recurrent path with `seq_len == 1`. A decode step "
        "traced with several tokens: torch assumes a dynamic length is never 1, but the program accepts one and "
        "runs the chunked path from no state (logits off by 0.04, measured on 4.57). The program refuses it instead.",
    ),
    PatchSpec(
        id="transformers.qwen3_next.linear_attention_mask",
        family="transformers",
        trigger="transformers.models.qwen3_next.modeling_qwen3_next",
        target="Qwen3NextModel._update_linear_attn_mask",
        mode="route",
        replacement="autopatch.patches.transformers_ssm:linear_attention_mask",
        requires=(LOCAL_CACHES, ("torch", ">=2.9")),
        fingerprints=("92e2bac7705f",),  # 4.57 and 5.3
        reason="4.x and 5.0-5.4 Qwen3-Next drops its linear-attention mask with `if cache_position[0] > 0 or "
        "torch.all(mask == 1)`: a data-dependent guard (Eq(u0, 1)) in every decode step. Under export the mask "
        "stays a tensor (ones where the original returns None; its consumer multiplies by it, so no bit changes).",
    ),
    PatchSpec(
        id="transformers.generation.input_preparation",
        family="transformers",
        trigger="transformers.generation.utils",
        target="GenerationMixin._cache_dependant_input_preparation_exporting",
        mode="route",
        replacement="autopatch.patches.transformers_generation:cache_dependant_input_preparation",
        requires=(("transformers", ">=4.56,<5"), ("torch", ">=2.9")),
        fingerprints=("472310d9b203",),
        reason="4.x prepare_inputs_for_generation, while exporting, always gathers input_ids[:, cache_position]: a "
        "decode step given only its new tokens exports, then every run raises IndexError. The eager cases instead: "
        "ids already the new tokens stay, a position past the ids keeps the last tokens (a traced select).",
    ),
    PatchSpec(
        id="transformers.legacy.cache_seq_length",
        family="transformers",
        trigger="transformers.cache_utils",
        target="DynamicCache.get_seq_length",
        mode="rewrite",
        replacement="autopatch.patches.transformers_cache_len:shape_based_empty_check",
        requires=(("transformers", ">=4.48,<4.51"), ("torch", ">=2.9")),
        fingerprints=("528bacc3dfd5",),
        reason="4.48-4.50: `len(self.key_cache[layer_idx]) == 0` reads the batch size as a plain int, so every "
        "decode step (decoders call it in forward, EncoderDecoderCache per layer) exports with a constant batch. "
        "Rewritten from the source to compare the first size.",
    ),
    PatchSpec(
        id="transformers.legacy.cache_update",
        family="transformers",
        trigger="transformers.cache_utils",
        target="DynamicCache.update",
        mode="rewrite",
        replacement="autopatch.patches.transformers_cache_len:shape_based_empty_check",
        requires=(("transformers", ">=4.48,<4.51"), ("torch", ">=2.9")),
        fingerprints=("f7165761909b",),
        reason="The same test in DynamicCache.update of 4.48-4.50, called by every attention layer.",
    ),
    # --- end of RoPE and state-space scans ---
    # --- transformers family: MoE and vision-language models (issue 5) ---
    PatchSpec(
        id="transformers.moe.mixtral",
        family="transformers",
        trigger="transformers.models.mixtral.modeling_mixtral",
        target="MixtralSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:mixtral_sparse_moe_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("7008bd8a53b3",),
        reason="The 4.x block loops in Python over nonzero() of the experts hit: a data-dependent guard "
        "(Eq(u0, 0)). Under export every expert runs on every token, weighted by a dense top-k routing matrix.",
    ),
    PatchSpec(
        id="transformers.moe.qwen3_moe",
        family="transformers",
        trigger="transformers.models.qwen3_moe.modeling_qwen3_moe",
        target="Qwen3MoeSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:qwen3_moe_sparse_moe_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("751ffe2704e4",),
        reason="Same nonzero() expert loop as Mixtral (data-dependent guard Eq(u0, 0)); replaced by all experts "
        "on all tokens with dense routing weights (norm_topk_prob honoured).",
    ),
    PatchSpec(
        id="transformers.moe.minimax",
        family="transformers",
        trigger="transformers.models.minimax.modeling_minimax",
        target="MiniMaxSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:mixtral_sparse_moe_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("7008bd8a53b3",),  # the same source as Mixtral's block
        reason="A copy of Mixtral's 4.x block (same nonzero() loop, same guard Eq(u0, 0)): the same replacement.",
    ),
    PatchSpec(
        id="transformers.moe.qwen2_moe",
        family="transformers",
        trigger="transformers.models.qwen2_moe.modeling_qwen2_moe",
        target="Qwen2MoeSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:qwen2_moe_sparse_moe_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("b6675bc3b3ad",),
        reason="The nonzero() expert loop (guard Eq(u0, 0)) plus a gated shared expert; all experts on all tokens "
        "with dense routing weights, then the shared expert as the original adds it.",
    ),
    *(
        PatchSpec(
            id=f"transformers.moe.{model}",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{block}.moe",
            mode="route",
            replacement="autopatch.patches.transformers_moe:deepseek_moe",
            requires=(("transformers", ">=4.56,<5"),),
            fingerprints=("c8160923e43e",),  # one source, copied into each of these models
            reason=f"{block}.moe (4.x) loops over every expert and skips those no token picked with `if "
            "token_indices.numel() > 0`: a data-dependent guard (u0 > 0). Every expert on every token instead, "
            "weighted by the router's top-k weights scattered densely.",
        )
        for model, block in (("deepseek_v3", "DeepseekV3MoE"), ("dots1", "Dots1MoE"), ("glm4_moe", "Glm4MoeMoE"),
                             ("longcat_flash", "LongcatFlashMoE"))
    ),
    PatchSpec(
        id="transformers.moe.jamba",
        family="transformers",
        trigger="transformers.models.jamba.modeling_jamba",
        target="JambaSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:jamba_sparse_moe_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("cfbc37d21130",),
        reason="Jamba's 4.x sparse block: Mixtral's expert loop with `if top_x.shape[0] == 0: continue` (guard "
        "Eq(u1, 0)), its gate named router, no renormalisation. Every expert on every token instead.",
    ),
    PatchSpec(
        id="transformers.moe.qwen3_next",
        family="transformers",
        trigger="transformers.models.qwen3_next.modeling_qwen3_next",
        target="Qwen3NextSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:qwen2_moe_sparse_moe_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("b6675bc3b3ad",),  # the same source as Qwen2-MoE's block
        reason="Qwen3-Next's 4.x sparse block is Qwen2-MoE's (nonzero() expert loop, guard Eq(u0, 0); gated shared "
        "expert): the same replacement.",
    ),
    PatchSpec(
        id="transformers.moe.gpt_oss",
        family="transformers",
        trigger="transformers.models.gpt_oss.modeling_gpt_oss",
        target="GptOssExperts.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:gpt_oss_experts_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("e24f33c77bb1",),
        reason="On CPU the 4.x experts loop over nonzero() of the experts hit (data-dependent guard Eq(u0, 0)); "
        "under export the batched all-experts path (the one 4.x uses on accelerators) runs on every device.",
    ),
    PatchSpec(
        id="transformers.moe.dbrx_v4",
        family="transformers",
        trigger="transformers.models.dbrx.modeling_dbrx",
        target="DbrxExperts.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:dbrx_experts_forward_v4",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("724e56fa79c6",),
        reason="DBRX's 4.x experts loop over every expert and skip those no token picked (`if token_idx.shape[0] "
        "== 0`: guard Eq(u0, 0)); every expert's GLU on every token instead, weighted by the dense top-k weights.",
    ),
    PatchSpec(
        id="transformers.moe.deepseek_v2",
        family="transformers",
        trigger="transformers.models.deepseek_v2.modeling_deepseek_v2",
        target="DeepseekV2MoE.moe",
        mode="route",
        replacement="autopatch.patches.transformers_moe:deepseek_moe",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("2345d276c45e",),
        reason="DeepseekV2MoE.moe (4.x) sorts tokens by expert and loops over the per-expert counts, skipping "
        "experts with `if num_tokens == 0` and slicing by them: data-dependent guards. The DeepSeek-V3 replacement "
        "(every expert on every token, the top-k weights scattered densely) computes the same sum.",
    ),
    PatchSpec(
        id="transformers.moe.ernie4_5_moe",
        family="transformers",
        trigger="transformers.models.ernie4_5_moe.modeling_ernie4_5_moe",
        target="Ernie4_5_MoeSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:ernie4_5_moe_sparse_moe_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("61d73c8e5555",),
        reason="Ernie 4.5 MoE's 4.x block: Mixtral's nonzero() loop over the experts hit (guard Eq(u0, 0)) behind "
        "its own float32 router; the router kept as it is, every expert on every token, then the shared experts.",
    ),
    PatchSpec(
        id="transformers.moe.aria",
        family="transformers",
        trigger="transformers.models.aria.modeling_aria",
        target="sequential_experts_gemm",
        mode="route",
        replacement="autopatch.patches.transformers_moe:aria_sequential_experts_gemm",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("02e2d015232b",),
        reason="Aria's 4.x experts (without the grouped_gemm package) slice the expert-sorted rows with tensor "
        "bounds: data-dependent sizes. Every expert's matrix on every row, each row keeping its own expert's.",
    ),
    PatchSpec(
        id="transformers.moe.hunyuan_v1_moe",
        family="transformers",
        trigger="transformers.models.hunyuan_v1_moe.modeling_hunyuan_v1_moe",
        target="HunYuanMoEV1Moe.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:hunyuan_v1_moe_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("0a547cedc372",),
        reason="Hunyuan-MoE's 4.x block: Mixtral's nonzero() loop over the experts hit (guard Eq(u0, 0)) beside a "
        "shared MLP; every expert on every token instead, the shared MLP added as before.",
    ),
    PatchSpec(
        id="transformers.moe.phimoe",
        family="transformers",
        trigger="transformers.models.phimoe.modeling_phimoe",
        target="PhimoeSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:phimoe_sparse_moe_forward",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("7a25d6fe3386",),
        reason="Phi-MoE's 4.x block loops over every expert and skips those no token picked (`if top_x.shape[0] == "
        "0`: guard Eq(u1, 0)); its sparsemixer router kept, every expert on every token instead.",
    ),
    PatchSpec(
        id="transformers.moe.longcat_flash_experts",
        family="transformers",
        trigger="transformers.models.longcat_flash.modeling_longcat_flash",
        target="LongcatFlashExperts.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:longcat_flash_experts_forward",
        requires=(("transformers", ">=5"),),
        fingerprints=("453eaea1d033",),  # 5.3, 5.12 and 5.23
        reason="LongCat-Flash's 5.x experts (not behind transformers' experts implementations; identity 'zero' "
        "experts among them) loop over nonzero() of the experts hit with .item(): guard Eq(u0, 0). Every expert "
        "on every token instead, the identities as the tokens themselves.",
    ),
    PatchSpec(
        id="transformers.moe.dbrx",
        family="transformers",
        trigger="transformers.models.dbrx.modeling_dbrx",
        target="DbrxExperts.forward",
        mode="route",
        replacement="autopatch.patches.transformers_moe:dbrx_experts_forward",
        requires=(("transformers", ">=5"),),
        fingerprints=("2b7ca3a044a8",),  # 5.23's; 5.3-5.12 reshape by ffn_hidden_size, which eager itself fails on
        reason="DBRX's 5.x experts (not behind transformers' experts implementations) loop over nonzero() of the "
        "experts hit: a data-dependent number of iterations (guard Eq(u0, 0)). Every expert on every token instead.",
    ),
    PatchSpec(
        id="torch.onnx.output_names_from_paths",
        family="torch",
        trigger="torch.onnx._internal.exporter._core",
        target="export",
        mode="install",
        replacement="autopatch.patches.onnx_output_names:install_output_names",
        requires=TORCH_ONNX,
        reason="torch.onnx.export(dynamo=True) names inputs by their paths but outputs by FX node (linear_14, "
        "cat_3): a runtime cannot tell which output is which layer's cache. Without output_names given, outputs "
        "are named by their paths too (logits, present_key_cache_0 ...); given names are kept.",
    ),
    PatchSpec(
        id="torch.onnx.is_all_true",
        family="torch",
        trigger="torch.onnx._internal.exporter._registration",
        target="ONNXRegistry.from_torchlib",
        mode="install",
        replacement="autopatch.patches.onnx_translations:install_is_all_true",
        requires=TORCH_ONNX,
        reason="torch._check_tensor_all (transformers 5.x image-token checks, the agent's vision rows) leaves "
        "_is_all_true in the program; torch.onnx.export drops the assertion but has no translation for its "
        "argument ('No ONNX function found'): every vision-language model stopped there. Translated as what it "
        "computes; the check itself is not in the ONNX model (validate lists such checks).",
    ),
    PatchSpec(
        id="torch.onnx.sdpa_masked_rows",
        family="torch",
        trigger="torch.onnx._internal.exporter._registration",
        target="ONNXRegistry.from_torchlib",
        mode="install",
        replacement="autopatch.patches.onnx_translations:install_sdpa_masked_rows",
        requires=TORCH_ONNX,
        reason="scaled_dot_product_attention answers zeros for a query row whose boolean mask hides every key; "
        "torch.onnx's translation answers the mean of the values, so the ONNX model of every left-padded batch "
        "disagrees with eager at the padding positions (measured up to 0.5 in the logits). The same translation "
        "with those rows zeroed (a ReduceMax, an Equal and a Where per attention), in the registries built while "
        "the thread exports.",
    ),
    PatchSpec(
        id="transformers.moe.onnx_grouped_mm",
        family="transformers",
        trigger="torch.onnx._internal.exporter._registration",
        target="ONNXRegistry.from_torchlib",
        mode="install",
        replacement="autopatch.patches.onnx_translations:install_onnx_grouped_mm",
        requires=(("transformers", ">=5.0"), ("torch", ">=2.9")),
        reason="5.x experts (Mixtral, Qwen3-MoE, DeepSeek-V3...) call transformers' custom operator "
        "grouped_mm_fallback on CPU; torch.onnx.export(dynamo=True) has no translation for it ('No ONNX function "
        "found'). Registers one (a MatMul per expert over the rows offs gives it) in the registries built while "
        "the thread exports; a custom_translation_table still wins.",
    ),
    PatchSpec(
        id="transformers.output_capturing.hooks_before_trace",
        family="transformers",
        trigger="transformers.utils.output_capturing",
        target="maybe_install_capturing_hooks",
        mode="install",
        replacement="autopatch.patches.transformers_output_capturing:install_hooks_before_trace",
        requires=(("transformers", ">=5.0"),),
        reason="strict=True: a 5.x model decorated with capture_outputs installs its output hooks on its first call, "
        "under a threading.Lock Dynamo cannot enter ('Unsupported context manager ... lock'), so a model (or a "
        "vision tower) first called inside the export stops. When an export starts, that first-call installation "
        "runs for the exported module's capturing submodules, outside the trace, as their first eager call would.",
    ),
    PatchSpec(
        id="transformers.vision.llava_image_features",
        family="transformers",
        trigger="transformers.models.llava.modeling_llava",
        target="LlavaModel.get_image_features",
        mode="route",
        replacement="autopatch.patches.transformers_vision:llava_image_features",
        requires=(("transformers", ">=4.56"),),
        fingerprints=("4d07a1e3c4e4", "80304841b3fc"),
        reason="list(image_features) unbinds the image batch, so export specialises pixel_values' batch to the "
        "traced size. Under export the features come back as one [images*patches, dim] tensor in a one-element "
        "list, which LlavaModel.forward concatenates to the same result.",
    ),
    PatchSpec(
        id="transformers.vision.llava_image_features_5_12",
        family="transformers",
        trigger="transformers.models.llava.modeling_llava",
        target="LlavaModel.get_image_features",
        mode="rewrite",
        replacement="autopatch.patches.transformers_vision:llava_features_one_tensor",
        requires=(("transformers", ">=5,<5.13"),),
        fingerprints=("7bba1ad18caa", "1b73e50d4b12"),  # 5.3, 5.5-5.12: the decorators' order differs
        reason="The same list(image_features) in 5.3-5.12's LlavaModel.get_image_features, whose body is neither "
        "4.x's nor 5.23's: rewritten from its own source to the same one-element list.",
    ),
    # 4.x VLMs whose get_placeholder_mask is Llava's, character for character (the fingerprint checks it).
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_placeholder_mask",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_placeholder_mask",
            mode="route",
            replacement="autopatch.patches.transformers_vision:llava_placeholder_mask",
            requires=(("transformers", ">=4.56,<5"),),
            fingerprints=("5d873236af34",),
            reason=f"{owner}.get_placeholder_mask (4.x) checks the image token count against the features with a "
            "Python if on a data-dependent size (guard Ne(u0, <features>)); under export the same condition is a "
            "torch._check_tensor_all (a runtime assertion), as 5.x does.",
        )
        for model, owner in PLACEHOLDER_MASK_MODELS
    ),
    # 5.0-5.11: the same models share another get_placeholder_mask, whose check sizes a boolean selection.
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_placeholder_mask_5_11",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_placeholder_mask",
            mode="rewrite",
            replacement="autopatch.patches.transformers_vision:placeholder_check_on_token_count",
            requires=(("transformers", ">=5,<5.12"),),
            fingerprints=("90d5ead58350",),
            reason=f"{owner}.get_placeholder_mask (5.0-5.11) checks `inputs_embeds[mask].numel()` against the "
            "features: torch solves the image batch from that selection's size in floating point and fails on the "
            "rounded bound (`tgt_bound ... not a subset of src_bound`). Rewritten to 5.12's check on the token count.",
        )
        for model, owner in PLACEHOLDER_MASK_MODELS
    ),
    # 5.12 and later: the same models share a get_placeholder_mask whose check formats its message eagerly.
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_placeholder_message",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_placeholder_mask",
            mode="rewrite",
            replacement="autopatch.patches.transformers_vision:placeholder_message_lazy",
            requires=(("transformers", ">=5.12"),),
            fingerprints=("c17fb3a6d93c", "f2744c485034"),  # 5.12, 5.23 (a type hint and torch.full differ)
            reason=f"strict=True: {owner}.get_placeholder_mask (5.12+) formats the feature count into its check's "
            "message before the check runs; Dynamo fixes the image batch to do so (the batch 'specialized to a "
            "constant'). Rewritten from the source: the message is a lambda, formatted only on failure.",
        )
        for model, owner in PLACEHOLDER_MASK_MODELS
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_image_features",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_image_features",
            mode="rewrite",
            replacement="autopatch.patches.transformers_vision:idefics_image_features",
            requires=(("transformers", ">=5"), ("torch", ">=2.9")),
            fingerprints=(fingerprint,),
            reason=f"{owner}.get_image_features (5.x) splits the features with `.tolist()` of per-sample image counts "
            "and views the pixel mask as `batch_size * num_images`: both fix the image batch (and the images per "
            "sample) to the traced sizes. Rewritten from the source: one flattened list element (concatenated by "
            "the caller to the same tensor) and a flatten of the mask's first two dims.",
        )
        # Not SmolVLM: its 5.x output returns get_image_features' result itself, one tensor per sample, so no
        # program can keep that list and a dynamic batch (measured: the features would come back as one element).
        for model, owner, fingerprint in (("idefics2", "Idefics2Model", "716925f847c1"),
                                          ("idefics3", "Idefics3Model", "139f24c52f3b"))
    ),
    # 4.x Idefics2 / Idefics3 / SmolVLM: patch positions without a loop over images, the mask reshape of 5.23 (that
    # one on 5.3-5.12 too, whose get_image_features is 4.57's).
    *(
        spec
        for model, prefix, features_fingerprints, rewriter in IDEFICS_4X
        for spec in (
            PatchSpec(
                id=f"transformers.vision.{model}_patch_positions",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target=f"{prefix}VisionEmbeddings.forward",
                mode="route",
                replacement="autopatch.patches.transformers_vision:navit_position_embeddings",
                requires=(("transformers", ">=4.56,<5"), ("torch", ">=2.9")),
                fingerprints=("1483d2a65a17",),  # one source in the three models (5.12's own is loop-free)
                reason=f"{prefix}VisionEmbeddings.forward (4.x) loops over the images and builds "
                "torch.arange(<patches kept>), a data-dependent length (guard Eq(u0, 0)). The same bucketed "
                "positions for the whole batch at once; the program checks each mask keeps a top-left rectangle.",
            ),
            PatchSpec(
                id=f"transformers.vision.{model}_image_features_4x",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target=f"{prefix}Model.get_image_features",
                mode="rewrite",
                replacement=f"autopatch.patches.transformers_vision:{rewriter}",
                requires=(("transformers", ">=4.56,<5.13"), ("torch", ">=2.9")),
                fingerprints=features_fingerprints,
                reason=f"{prefix}Model.get_image_features "
                + ("(4.x, 5.3-5.12)" if len(features_fingerprints) > 1 else "(4.x)") + " views the pixel mask as "
                "batch_size * num_images, which fixes the images per sample"
                + (" and tests `not any(real_images_inds)` in Python" if model == "smolvlm" else "")
                + ". Rewritten from the source: flatten(0, 1)"
                + (", and the flag update as one tensor expression" if model == "smolvlm" else "") + ".",
            ),
        )
    ),
    PatchSpec(
        id="transformers.vision.idefics2_full_patch_mask",
        family="transformers",
        trigger="transformers.models.idefics2.modeling_idefics2",
        target="Idefics2VisionTransformer.forward",
        mode="rewrite",
        replacement="autopatch.patches.transformers_vision:idefics2_full_patch_mask",
        requires=(("transformers", ">=4.56,<5"), ("torch", ">=2.9")),
        fingerprints=("5b07d59eaa6c",),
        reason="4.x Idefics2's vision tower drops an all-true patch mask with `if not torch.any(~mask)` (reads the "
        "mask). While tracing it takes the other branch, the 4D additive mask, which attends the same (Idefics3's "
        "order).",
    ),
    PatchSpec(
        id="transformers.vision.smolvlm_merger_check",
        family="transformers",
        trigger="transformers.models.smolvlm.modeling_smolvlm",
        target="SmolVLMModel.inputs_merger",
        mode="rewrite",
        replacement="autopatch.patches.transformers_vision:smolvlm_merger_check",
        requires=(("transformers", ">=4.56,<5"), ("torch", ">=2.9")),
        fingerprints=("410688bf374b",),
        reason="4.x SmolVLM checks image token counts with `if not torch.all(...): raise`; a torch._check_tensor_all "
        "instead (a runtime assertion in the program), as 5.x does.",
    ),
    PatchSpec(
        id="transformers.vision.fuyu_image_features",
        family="transformers",
        trigger="transformers.models.fuyu.modeling_fuyu",
        target="FuyuModel.get_image_features",
        mode="route",
        replacement="autopatch.patches.transformers_vision:fuyu_image_features",
        requires=(("transformers", ">=4.56,<5"),),
        fingerprints=("9a7c4431468f",),
        reason="4.x embeds the images in a Python loop over image_patches, so export specialises the image batch. "
        "Under export all images are embedded at once and returned as one list element (the caller "
        "concatenates the list: the same tensor).",
    ),
    # 5.23 VLMs that pack every image's patches into one sequence (Qwen2-VL and its kin).
    *(
        spec
        for model, attention, owner, features_fingerprint, features_rewriter, rope_fingerprint, rope_index
        in PACKED_VISION_MODELS
        for spec in (
            PatchSpec(
                id=f"transformers.vision.{model}_patch_positions_packed",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target="get_vision_position_ids",  # the module's own binding of transformers.vision_utils'
                mode="route",
                replacement="autopatch.patches.transformers_packed_vision:packed_position_ids",
                requires=PACKED_VISION_REQUIRES,
                fingerprints=("0d795946698a",),
                reason="get_vision_position_ids loops over image_grid_thw.tolist() to lay out each image's rotary "
                "(row, column) positions, which fixes the number of images. The same positions for every patch "
                "at once: a patch finds its image by searchsorted over the cumulative patch counts.",
            ),
            PatchSpec(
                id=f"transformers.vision.{model}_attention_packed",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target=f"{attention}.forward",
                mode="rewrite",
                replacement="autopatch.patches.transformers_packed_vision:packed_attention_one_call",
                requires=PACKED_VISION_REQUIRES,
                fingerprints=("b918fa098915",),
                reason=f"{attention}.forward (eager and sdpa) splits q/k/v per frame with lengths.tolist() and "
                "attends chunk by chunk (guard Eq(u0, 0)). Rewritten from the source: one attention call with a "
                "block-diagonal mask built from cu_seqlens, the same result.",
            ),
            PatchSpec(
                id=f"transformers.vision.{model}_image_features_packed",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target=f"{owner}.get_image_features",
                mode="rewrite",
                replacement=f"autopatch.patches.transformers_packed_vision:{features_rewriter}",
                requires=PACKED_VISION_REQUIRES,
                fingerprints=(features_fingerprint,),
                reason=f"{owner}.get_image_features splits the merged features per image with .tolist() sizes, "
                "which fixes the number of images; its caller concatenates them at once. Rewritten from the "
                "source: one element with every image's features"
                + (" (and per deepstack layer)." if "deepstack" in features_rewriter else "."),
            ),
            PatchSpec(
                id=f"transformers.vision.{model}_rope_index",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target=f"{owner}.get_rope_index",
                mode="route",
                replacement=f"autopatch.patches.transformers_packed_vision:{rope_index}",
                requires=PACKED_VISION_REQUIRES,
                fingerprints=(rope_fingerprint,),
                reason=f"{owner}.get_rope_index groups each sample's tokens with itertools.groupby over "
                "mm_token_type_ids.tolist() and walks the groups in Python (guard Eq(u0, 0)). The same 3-axis "
                "positions and deltas for every token at once, from cumulative sums over the batch.",
            ),
        )
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_placeholder_check_packed",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_placeholder_mask",
            mode="rewrite",
            replacement="autopatch.patches.transformers_packed_vision:packed_placeholder_check",
            requires=PACKED_VISION_REQUIRES,
            fingerprints=(PLACEHOLDER_CHECK_STRICT[model],),
            reason=f"strict=True: {owner}.get_placeholder_mask formats the feature count into its check's "
            "message before the check runs; Dynamo fixes the image size to do so, without reporting it, and "
            "the program refuses other sizes. Rewritten from the source: the message is a lambda.",
        )
        for model, _, owner, *_ in PACKED_VISION_MODELS
        if model in PLACEHOLDER_CHECK_STRICT
    ),
    # 4.57's Qwen2-VL, Qwen2.5-VL, Qwen3-VL: the same problems in 4.x sources (the rope index by 4.x's rules).
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_{name}_4x",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=target,
            mode=mode,
            replacement=f"autopatch.patches.transformers_packed_vision:{replacement}",
            requires=PACKED_VISION_REQUIRES_4X,
            fingerprints=(fingerprint,),
            reason=reason,
        )
        for model, tower, attention, owner, fingerprints in PACKED_VISION_MODELS_4X
        for name, target, mode, replacement, fingerprint, reason in (
            ("rot_pos_emb", f"{tower}.rot_pos_emb", "route", "rot_pos_emb_4x", fingerprints[0],
             "Loops over the images for the rotary positions and builds a frequency table as long as the largest "
             "grid side (read from the data). The loop-free positions times the frequencies."),
            ("attention_packed", f"{attention}.forward", "rewrite", "packed_attention_one_call", fingerprints[1],
             "Splits q/k/v per frame with lengths.tolist() (guard Eq(u0, 0)). Rewritten from the source: one "
             "attention call with a block-diagonal mask."),
            ("image_features_packed", f"{owner}.get_image_features", "rewrite", "packed_image_features_4x",
             fingerprints[2], "Splits the features per image with .tolist() sizes, which fixes the number of "
             "images. Rewritten from the source: one element, which the caller concatenates to the same tensor."),
            ("placeholder_check", f"{owner}.get_placeholder_mask", "rewrite", "placeholder_check_4x",
             fingerprints[3], "Compares a data-dependent size with the features in a Python if (guard Ne(u0, ...)). "
             "Rewritten from the source: a torch._check_tensor_all, a runtime assertion."),
            ("rope_index", f"{owner}.get_rope_index", "route", f"{model}_rope_index_4x", fingerprints[4],
             "Walks each sample's vision-start tokens with .tolist() and .item() (guard Eq(u0, 0)). The same 3-axis "
             "positions and deltas for every token at once, by 4.x's rules."),
        )
    ),
    PatchSpec(
        id="transformers.vision.qwen2_5_vl_windows_packed_4x",
        family="transformers",
        trigger="transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
        target="Qwen2_5_VisionTransformerPretrainedModel.get_window_index",
        mode="route",
        replacement="autopatch.patches.transformers_packed_vision:qwen2_5_vl_window_index_4x",
        requires=PACKED_VISION_REQUIRES_4X,
        fingerprints=("d26b9bc4b7ae",),
        reason="Lists each image's attention windows in a loop over the grid, with the window bounds as a Python "
        "list of .tolist() values. The same order and bounds at once (as the 5.x row), the bounds as a tensor.",
    ),
    PatchSpec(
        id="transformers.vision.qwen3_vl_position_grid_4x",
        family="transformers",
        trigger="transformers.models.qwen3_vl.modeling_qwen3_vl",
        target="Qwen3VLVisionModel.fast_pos_embed_interpolate",
        mode="route",
        replacement="autopatch.patches.transformers_packed_vision:qwen3_vl_position_grid_4x",
        requires=PACKED_VISION_REQUIRES_4X,
        fingerprints=("90702c2a169f",),
        reason="Resamples the learned position grid per image in a loop that reads the sizes and collects the "
        "taps and weights with .tolist(). The same four taps and weights for every patch at once.",
    ),
    PatchSpec(
        id="transformers.vision.qwen2_5_vl_windows_packed",
        family="transformers",
        trigger="transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
        target="get_vision_window_index",  # the module's binding of vision_utils'
        mode="route",
        replacement="autopatch.patches.transformers_packed_vision:packed_window_index",
        requires=PACKED_VISION_REQUIRES,
        fingerprints=("420d88ca4b33",),
        reason="Qwen2.5-VL's windowed attention lists each image's windows in a loop over grid_thw.tolist(), "
        "which fixes the number of images. The same token order and window bounds at once: every token gets its "
        "window's number and place, one sort orders them.",
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_interpolation_packed",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target="get_vision_interpolation_indices_and_weights",  # the module's binding of vision_utils'
            mode="rewrite",
            replacement="autopatch.patches.transformers_packed_vision:packed_interpolation_starts",
            requires=PACKED_VISION_REQUIRES,
            fingerprints=("826f09883daa",),
            reason="The learned position grid's resampling is loop-free, but pads counts.cumsum(0)[:-1], a tensor "
            "one shorter than the number of images: torch fixes that number doing so (guard Eq(images - 1, 1)). "
            "Rewritten from the source: the same exclusive cumulative sum as cumsum - counts.",
        )
        for model in ("qwen3_vl", "qwen3_5")  # Qwen3.5's tower is Qwen3-VL's without deepstack
    ),
    # --- end of MoE and vision-language models ---
    # --- rewrite family: control flow -> torch.cond, generated from the original source at install ---
    *(
        PatchSpec(
            id=f"rewrite.fp16_clamp.{model}",
            family="rewrite",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{layer}.forward",
            mode="rewrite",
            replacement="autopatch.rewrite:rewrite_tensor_conditions",
            requires=(("transformers", ">=4.56"), ("torch", ">=2.9")),
            reason=f"{layer}.forward clamps float16 hidden states with `if hidden_states.dtype == torch.float16 "
            "and <any inf or nan>`: the second operand is a tensor, so a float16 export stops on a "
            "data-dependent guard (Eq(u0, 1)). Rewritten to torch.cond (clamp or keep), decided at run time.",
        )
        for model, layer in FP16_CLAMP_LAYERS
    ),
)
