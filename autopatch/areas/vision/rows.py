"""The rows of this area. Vision-language models: placeholder masks and image features without data-dependent guards
(Llava's family, Idefics, SmolVLM...).
"""

from __future__ import annotations

from ...spec import PatchSpec, table_row

#: Vision-language models and the class holding their get_placeholder_mask: on 4.x Llava's source in each, on
#: 5.0-5.11 another source shared by all of them (each failed without its row on 4.57.6 and 5.3.0). Mistral 3's is
#: Llava's on 4.x too, but only its 4.x row is proven (with the Pixtral rows below): a row of its own.
PlaceholderModel = table_row("PlaceholderModel", ("model", "owner"))
PLACEHOLDER_MASK_MODELS = (
    PlaceholderModel("llava", "LlavaModel"),
    PlaceholderModel("gemma3", "Gemma3Model"),
    PlaceholderModel("vipllava", "VipLlavaModel"),
    PlaceholderModel("paligemma", "PaliGemmaModel"),
    PlaceholderModel("aya_vision", "AyaVisionModel"),
    PlaceholderModel("internvl", "InternVLModel"),
    PlaceholderModel("got_ocr2", "GotOcr2Model"),
    PlaceholderModel("cohere2_vision", "Cohere2VisionModel"),
    PlaceholderModel("fuyu", "FuyuModel"),
)
#: More 4.x VLMs whose get_placeholder_mask is Llava's or DeepSeek-VL's (4.57.6: Llava's check, the feature count
#: computed inside the if): (model, owner, fingerprints). Their 5.0-5.11 sources are not proven here. Not
#: DeepSeek-VL-Hybrid: the same source, but its 4.57 prefill exports without the row.
LLAVA_MASK_4X = ("5d873236af34",)
Placeholder4x = table_row("Placeholder4x", ("model", "owner", "fingerprints"))
PLACEHOLDER_MASK_4X_MORE = (
    Placeholder4x("aria", "AriaModel", LLAVA_MASK_4X),
    Placeholder4x("florence2", "Florence2Model", LLAVA_MASK_4X),
    Placeholder4x("deepseek_vl", "DeepseekVLModel", ("6da7b8f9b40b",)),
    Placeholder4x("janus", "JanusModel", ("6da7b8f9b40b",)),
    # LFM2-VL's counts its features by rows (they come flat, [tokens, dim]): the same check on the numbers of elements
    Placeholder4x("lfm2_vl", "Lfm2VlModel", ("07deb545a2be",)),
    # Llama 4's: Llava's check, its token count taken before it and the message formatted from the feature rows
    Placeholder4x("llama4", "Llama4ForConditionalGeneration", ("241b8afd64ff",)),
)
#: Every 4.x model of Llava's placeholder-mask row: the family above with Llava's source, then those.
PLACEHOLDER_MASK_4X = (*(Placeholder4x(model, owner, LLAVA_MASK_4X) for model, owner in PLACEHOLDER_MASK_MODELS),
                       *PLACEHOLDER_MASK_4X_MORE)
#: The 5.12+ get_placeholder_mask sources whose check formats the feature count into its message (strict export fixes
#: the image batch to do so): (model, the method, fingerprints, the versions where its strict export fails without
#: the row). Llava's source (5.12.1, 5.23.0: a type hint and torch.full differ) is shared by the models above and
#: seven more (Janus and Ovis2 among them); Llama 4's, Video-LLaVA's (a second check, for videos), Chameleon's (its
#: image token read from a vocabulary mapping) and T5Gemma 2's (its encoder's, under another method name) are their
#: own. DeepSeek-VL-Hybrid exports strict on 5.12.1 without the row; Llama 4's inputs are not built by the tiny
#: catalogue on 5.12.1.
LLAVA_MESSAGE = ("c17fb3a6d93c", "f2744c485034")
MessageModel = table_row("MessageModel", ("model", "target", "fingerprints", "requires"))
PLACEHOLDER_MESSAGE_MODELS = (
    *(MessageModel(model, f"{owner}.get_placeholder_mask", LLAVA_MESSAGE, "transformers>=5.12")
      for model, owner in PLACEHOLDER_MASK_MODELS),
    MessageModel("aria", "AriaModel.get_placeholder_mask", LLAVA_MESSAGE, "transformers>=5.12"),
    MessageModel("deepseek_vl", "DeepseekVLModel.get_placeholder_mask", LLAVA_MESSAGE, "transformers>=5.12"),
    MessageModel("deepseek_vl_hybrid", "DeepseekVLHybridModel.get_placeholder_mask", LLAVA_MESSAGE[1:],
                 "transformers>=5.13"),
    MessageModel("florence2", "Florence2Model.get_placeholder_mask", LLAVA_MESSAGE, "transformers>=5.12"),
    MessageModel("qianfan_ocr", "QianfanOCRModel.get_placeholder_mask", LLAVA_MESSAGE, "transformers>=5.12"),
    MessageModel("llama4", "Llama4ForConditionalGeneration.get_placeholder_mask", ("da7b79cb700d",),
                 "transformers>=5.13"),
    MessageModel("video_llava", "VideoLlavaModel.get_placeholder_mask", ("49eb66c81538", "92fe1b2335c4"),
                 "transformers>=5.12"),
    MessageModel("janus", "JanusModel.get_placeholder_mask", LLAVA_MESSAGE, "transformers>=5.12"),
    MessageModel("chameleon", "ChameleonModel.get_placeholder_mask", ("0ba07318f099", "34028a121490"),
                 "transformers>=5.12"),
    MessageModel("ovis2", "Ovis2Model.get_placeholder_mask", LLAVA_MESSAGE, "transformers>=5.12"),
    # T5Gemma 2's encoder checks its image tokens in a method of another name, with the same f-string message.
    MessageModel("t5gemma2", "T5Gemma2Encoder.get_image_placeholder_mask",
                 ("79d77638c303", "56b5f494e6ce"), "transformers>=5.12"),  # 5.12.1, 5.23.0
)

#: Idefics-family VLMs of 4.x: (model, class prefix, fingerprints of get_image_features on 4.57.6 and on 5.12.1,
#: where it is the same code (Idefics2 on 5.3.0 too, which also passes return_dict to the tower), its rewriter).
IdeficsModel = table_row("IdeficsModel", ("model", "prefix", "fingerprints", "rewriter"))
IDEFICS_4X = (
    IdeficsModel("idefics2", "Idefics2", ("b7dfd689b1da", "745d41d063c7", "a35cb0515be1"), "idefics_image_features_4x"),
    IdeficsModel("idefics3", "Idefics3", ("fd6b32bc0b14", "95f194c6ed61"), "idefics_image_features_4x"),
    # SmolVLM: 4.57 only (see SmolVLM 5.x below).
    IdeficsModel("smolvlm", "SmolVLM", ("b1325e7e4dfe",), "smolvlm_image_features_4x"),
)

#: LLaVA-NeXT-family VLMs whose get_image_features tiles images by LLaVA-NeXT's "anyres" code: (model, owner class,
#: fingerprints of get_image_features on 4.57.6, 5.12.1 and 5.23.0, its rewriter). LLaVA-OneVision packs
#: differently (it also resamples a large image down, bilinearly, to a size read from the data): its own row.
AnyresModel = table_row("AnyresModel", ("model", "owner", "fingerprints", "rewriter"))
ANYRES_MODELS = (
    AnyresModel("llava_next", "LlavaNextModel", ("0a12c1ac989b", "6e3766ca7e9c", "372d091f7943"),
                "anyres_image_features"),
    AnyresModel("llava_next_video", "LlavaNextVideoModel", ("c647aeb3ca9d", "bae581e5bd81", "1e689551fc5d"),
                "anyres_image_features_video"),
)

#: VLMs on Pixtral's tower whose projector merges patch blocks (Mistral3PatchMerger, one source: fc054ec47794):
#: (model, class prefix, get_image_features fingerprints on 4.57.6, 5.12.1 and 5.23.0, its rewriter, the versions
#: that have that source). Pixtral's own rows (the tower) serve them all.
MergedModel = table_row("MergedModel", ("model", "prefix", "fingerprints", "rewriter", "requires"))
MERGED_PATCH_MODELS = (
    MergedModel("mistral3", "Mistral3", ("593b08edb652",), "merged_features_one_element_4x",
                ("transformers>=4.56,<5",)),
    MergedModel("mistral3", "Mistral3", ("d2f681f1dcd1", "fe300f6e450f"), "merged_features_one_element",
                ("transformers>=5",)),
    MergedModel("mistral_large4", "MistralLarge4", ("fe300f6e450f",), "merged_features_one_element",
                ("transformers>=5.13",)),
    MergedModel("lighton_ocr", "LightOnOcr", ("80eeb543d19e", "b3c7884372fe"), "lighton_features_one_element",
                ("transformers>=5",)),
)
#: The versions each of those models' merger row applies to: from its earliest features row's lower bound on (the
#: merger's source is the same on every version that has it).
MERGER_REQUIRES = {row.model: (row.requires[0].split(",")[0],) for row in reversed(MERGED_PATCH_MODELS)}

ROWS = (
    PatchSpec(
        id="transformers.vision.llava_image_features",
        family="transformers",
        trigger="transformers.models.llava.modeling_llava",
        target="LlavaModel.get_image_features",
        mode="route",
        replacement="autopatch.areas.vision.vlm:llava_image_features",
        requires=("transformers>=4.56",),
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
        replacement="autopatch.areas.vision.vlm:llava_features_one_tensor",
        requires=("transformers>=5,<5.13",),
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
            replacement="autopatch.areas.vision.vlm:llava_placeholder_mask",
            requires=("transformers>=4.56,<5",),
            fingerprints=fingerprints,
            reason=f"{owner}.get_placeholder_mask (4.x) checks the image token count against the features with a "
            "Python if on a data-dependent size (guard Ne(u0, <features>)); under export the same condition is a "
            "torch._check_tensor_all (a runtime assertion), as 5.x does.",
        )
        for model, owner, fingerprints in PLACEHOLDER_MASK_4X
    ),
    # 5.0-5.11: the same models share another get_placeholder_mask, whose check sizes a boolean selection.
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_placeholder_mask_5_11",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_placeholder_mask",
            mode="rewrite",
            replacement="autopatch.areas.vision.vlm:placeholder_check_on_token_count",
            requires=("transformers>=5,<5.12",),
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
            target=target,
            mode="rewrite",
            replacement="autopatch.areas.vision.vlm:placeholder_message_lazy",
            requires=(requires,),
            fingerprints=fingerprints,
            reason=f"strict=True: {target} (5.12+) formats the feature count into its check's message before the "
            "check runs; Dynamo fixes the image batch to do so (the batch 'specialized to a "
            "constant'). Rewritten from the source: the message is a lambda, formatted only on failure.",
        )
        for model, target, fingerprints, requires in PLACEHOLDER_MESSAGE_MODELS
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_image_features",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_image_features",
            mode="rewrite",
            replacement="autopatch.areas.vision.vlm:idefics_image_features",
            requires=("transformers>=5", "torch>=2.9"),
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
                replacement="autopatch.areas.vision.vlm:navit_position_embeddings",
                requires=("transformers>=4.56,<5", "torch>=2.9"),
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
                replacement=f"autopatch.areas.vision.vlm:{rewriter}",
                requires=("transformers>=4.56,<5.13", "torch>=2.9"),
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
        replacement="autopatch.areas.vision.vlm:idefics2_full_patch_mask",
        requires=("transformers>=4.56,<5", "torch>=2.9"),
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
        replacement="autopatch.areas.vision.vlm:smolvlm_merger_check",
        requires=("transformers>=4.56,<5", "torch>=2.9"),
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
        replacement="autopatch.areas.vision.vlm:fuyu_image_features",
        requires=("transformers>=4.56,<5",),
        fingerprints=("9a7c4431468f",),
        reason="4.x embeds the images in a Python loop over image_patches, so export specialises the image batch. "
        "Under export all images are embedded at once and returned as one list element (the caller "
        "concatenates the list: the same tensor).",
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_anyres",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_image_features",
            mode="rewrite",
            replacement=f"autopatch.areas.vision.vlm:{rewriter}",
            requires=("transformers>=4.56",),
            fingerprints=fingerprints,
            reason=f"{owner}.get_image_features chooses each image's tile grid from image_sizes.tolist() in Python "
            "(select_best_resolution) and keeps, splits and unpads the tiles image by image: the export stops on "
            "'IntTrueDiv(56, u0) < IntTrueDiv(112, u1)'. Rewritten from the source: the same grids, tiles and "
            "packing for all images at once, from the sizes as data.",
        )
        for model, owner, fingerprints, rewriter in ANYRES_MODELS
    ),
    PatchSpec(
        id="transformers.vision.llava_next_placeholder_mask",
        family="transformers",
        trigger="transformers.models.llava_next.modeling_llava_next",
        target="LlavaNextModel.get_placeholder_mask",
        mode="route",
        replacement="autopatch.areas.vision.vlm:llava_placeholder_mask",
        requires=("transformers>=4.56,<5",),
        # Llava's 4.x source but for the error message's feature count
        fingerprints=("241b8afd64ff",),
        needs=("transformers.vision.llava_next_anyres",),
        reason="LlavaNextModel.get_placeholder_mask (4.x) checks the image token count against the features with "
        "a Python if on a data-dependent size (guard Ne(u2, 64*u1)); under export a torch._check_tensor_all (a "
        "runtime assertion), as for Llava.",
    ),
    PatchSpec(
        id="transformers.vision.llava_next_video_placeholder_mask",
        family="transformers",
        trigger="transformers.models.llava_next_video.modeling_llava_next_video",
        target="LlavaNextVideoModel.get_placeholder_mask",
        mode="route",
        replacement="autopatch.areas.vision.vlm:llava_next_video_placeholder_masks",
        requires=("transformers>=4.56,<5",),
        fingerprints=("9747035a4f6b",),
        needs=("transformers.vision.llava_next_video_anyres",),
        reason="The same check in LlavaNextVideoModel.get_placeholder_mask (4.x), for images and for videos.",
    ),
    PatchSpec(
        id="transformers.vision.video_llava_placeholder_mask",
        family="transformers",
        trigger="transformers.models.video_llava.modeling_video_llava",
        target="VideoLlavaModel.get_placeholder_mask",
        mode="route",
        replacement="autopatch.areas.vision.vlm:llava_next_video_placeholder_masks",
        requires=("transformers>=4.56,<5",),
        fingerprints=("9c53153d0944",),  # 4.57.6
        reason="VideoLlavaModel.get_placeholder_mask (4.x) checks its image and its video tokens against their "
        "features as LLaVA-NeXT-Video's does (Python ifs on data-dependent sizes: guard Ne(u0, 1024*s99)): the "
        "same replacement, each check a runtime assertion.",
    ),
    PatchSpec(
        id="transformers.vision.chameleon_placeholder_mask",
        family="transformers",
        trigger="transformers.models.chameleon.modeling_chameleon",
        target="ChameleonModel.get_placeholder_mask",
        mode="route",
        replacement="autopatch.areas.vision.vlm:chameleon_placeholder_mask",
        requires=("transformers>=4.56,<5",),
        fingerprints=("7a6f2da0db35",),  # 4.57.6
        reason="ChameleonModel.get_placeholder_mask (4.x) is Llava's check (a Python if on a data-dependent size: "
        "guard Ne(u0, 256*s99)) with the image token read from the vocabulary mapping: the same runtime "
        "assertion for that token.",
    ),
    PatchSpec(
        id="transformers.vision.llava_onevision_anyres",
        family="transformers",
        trigger="transformers.models.llava_onevision.modeling_llava_onevision",
        target="LlavaOnevisionModel.get_image_features",
        mode="rewrite",
        replacement="autopatch.areas.vision.vlm:onevision_image_features",
        requires=("transformers>=4.56",),
        fingerprints=("dca10acfd347", "2f99a87ba37e", "c7fcbf4e4274"),
        reason="LlavaOnevisionModel.get_image_features tiles as LLaVA-NeXT (tile grids from image_sizes.tolist(), "
        "tiles kept, split and unpadded image by image), then resamples each image whose grid holds more than "
        "anyres_max_N tiles' tokens (ratio > 1.1) bilinearly to a size computed from it: the export stops on "
        "'IntTrueDiv'. Rewritten from the source: the same grids, tiles, packing and resampling (F.interpolate's "
        "bilinear taps and weights) for all images at once, from the sizes as data.",
    ),
    PatchSpec(
        id="transformers.vision.llava_onevision_placeholder_mask",
        family="transformers",
        trigger="transformers.models.llava_onevision.modeling_llava_onevision",
        target="LlavaOnevisionModel.get_placeholder_mask",
        mode="route",
        replacement="autopatch.areas.vision.vlm:llava_next_video_placeholder_masks",
        requires=("transformers>=4.56,<5",),
        fingerprints=("9747035a4f6b",),  # LLaVA-NeXT-Video's source
        needs=("transformers.vision.llava_onevision_anyres",),
        reason="The same check in LlavaOnevisionModel.get_placeholder_mask (4.x), for images and for videos.",
    ),
    PatchSpec(
        id="transformers.vision.pixtral_patches",
        family="transformers",
        trigger="transformers.models.pixtral.modeling_pixtral",
        target="PixtralVisionModel.forward",
        mode="rewrite",
        replacement="autopatch.areas.vision.vlm:pixtral_patches_loop_free",
        requires=("transformers>=5.13",),
        fingerprints=("c8f7de76bb38",),
        reason="Pixtral's tower cuts each image's patches out of the padded batch in a Python loop over image_sizes, "
        "positions and masks them image by image: the export stops on 'u1*u3 + u5*u7 > 1' (a sum of per-image "
        "patch counts). Rewritten from the source: the batch stays whole, a mask of each image's patches selects "
        "them; the same patches, positions and per-image attention blocks.",
    ),
    PatchSpec(
        id="transformers.vision.pixtral_patches_flat_positions",
        family="transformers",
        trigger="transformers.models.pixtral.modeling_pixtral",
        target="PixtralVisionModel.forward",
        mode="rewrite",
        replacement="autopatch.areas.vision.vlm:pixtral_patches_loop_free_flat",
        requires=("transformers>=4.56,<5.13",),
        fingerprints=("192be29b3001", "14ac7ddd61ad"),  # 4.57.6, 5.12.1
        reason="The same in the PixtralVisionModel.forward of 4.x to 5.12, whose positions are "
        "position_ids_in_meshgrid's row * max_width + column.",
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_patch_merger",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{prefix}PatchMerger.forward",
            mode="route",
            replacement="autopatch.areas.vision.vlm:patch_merger",
            requires=MERGER_REQUIRES[model],
            fingerprints=("fc054ec47794",),
            reason=f"{prefix}PatchMerger splits the patches per image by Python ints from image_sizes and unfolds each "
            "image's grid in a loop. Under export one gather takes every image's 2x2 (spatial_merge_size) blocks in "
            "unfold's order.",
        )
        for model, prefix in dict.fromkeys((m.model, m.prefix) for m in MERGED_PATCH_MODELS)
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_merged_features{'_4x' if rewriter.endswith('_4x') else ''}",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{prefix}Model.get_image_features",
            mode="rewrite",
            replacement=f"autopatch.areas.vision.vlm:{rewriter}",
            requires=requires,
            fingerprints=fingerprints,
            reason=f"{prefix}Model.get_image_features splits the merged features per image with Python ints, which "
            "fixes the number of images. Rewritten from the source: one element holding every image's features "
            "(the caller concatenates the split: the same tensor).",
        )
        for model, prefix, fingerprints, rewriter, requires in MERGED_PATCH_MODELS
    ),
    PatchSpec(
        id="transformers.vision.mistral3_placeholder_mask",
        family="transformers",
        trigger="transformers.models.mistral3.modeling_mistral3",
        target="Mistral3Model.get_placeholder_mask",
        mode="route",
        replacement="autopatch.areas.vision.vlm:llava_placeholder_mask",
        requires=("transformers>=4.56,<5",),
        fingerprints=("5d873236af34",),  # Llava's 4.x source
        reason="Mistral3Model.get_placeholder_mask (4.x) is Llava's: its Python if on a data-dependent count "
        "becomes a torch._check_tensor_all (a runtime assertion).",
    ),
    PatchSpec(
        id="transformers.vision.granite_docling_features",
        family="transformers",
        trigger="transformers.models.granite_docling.modeling_granite_docling",
        target="GraniteDoclingModel.get_image_features",
        mode="rewrite",
        replacement="autopatch.areas.vision.vlm:granite_docling_features_one_element",
        requires=("transformers>=5.13",),
        fingerprints=("1ca1b9003546",),  # 5.23.0
        reason="GraniteDoclingModel.get_image_features splits the tiles' features (and each deepstack layer's) per "
        "sample with `.tolist()` sizes, which fixes the batch; forward concatenates them straight back. Rewritten "
        "from the source: one element holding every sample's features, which concatenates to the same tensor.",
    ),
    PatchSpec(
        id="transformers.vision.emu3_image_tokens",
        family="transformers",
        trigger="transformers.models.emu3.modeling_emu3",
        target="Emu3Model.get_image_features",
        mode="route",
        replacement="autopatch.areas.vision.vlm:emu3_image_tokens_masked",
        requires=("transformers>=5.13",),
        fingerprints=("45381afe21f4",),  # 5.23.0 (4.57's exports without it)
        reason="Emu3Model.get_image_features crops each image's VQ codes to int(size / factor) rows and columns in "
        "a loop over the images: a float per image stops the export ('data-dependent expression zuf0'). The same "
        "BPE tokens and end-of-line columns for every image at once, selected by a mask of each image's kept "
        "rows and columns.",
    ),
    PatchSpec(
        id="transformers.vision.siglip2_positions",
        family="transformers",
        trigger="transformers.models.siglip2.modeling_siglip2",
        target="Siglip2VisionEmbeddings.resize_positional_embeddings",
        mode="route",
        replacement="autopatch.areas.vision.naflex:siglip2_positions_resampled",
        requires=("transformers>=5.13",),
        fingerprints=("7e95299805a5",),  # 5.12.1 and 5.23.0; proven with LFM2-VL on 5.23
        reason="SigLIP 2's variable-resolution tower resamples its learned position grid to each image's patch grid "
        "in a loop over the images (F.interpolate, antialiased, at sizes read with .tolist()), which fixes the "
        "number of images. The same resampling for every patch at once: separable antialias weights computed "
        "from the sizes as data, one weighted sum per patch (eager's one-column quirk kept).",
    ),
    PatchSpec(
        id="transformers.vision.lfm2_vl_features",
        family="transformers",
        trigger="transformers.models.lfm2_vl.modeling_lfm2_vl",
        target="Lfm2VlModel.get_image_features",
        mode="route",
        replacement="autopatch.areas.vision.naflex:lfm2_vl_features_gathered",
        requires=("transformers>=5.13",),
        fingerprints=("4a769bbdc118",),  # 5.23.0
        needs=("transformers.vision.siglip2_positions",),
        reason="Lfm2VlModel.get_image_features cuts each image's patches out of the padding and folds its "
        "factor x factor blocks into channels (the projector's pixel unshuffle) image by image. Each merged token "
        "gathers its block's patches instead, in the unshuffle's channel order; the projector then acts token by "
        "token, as upstream.",
    ),
    PatchSpec(
        id="transformers.vision.siglip2_positions_4x",
        family="transformers",
        trigger="transformers.models.siglip2.modeling_siglip2",
        target="Siglip2VisionEmbeddings.resize_positional_embeddings",
        mode="route",
        replacement="autopatch.areas.vision.naflex:siglip2_positions_resampled",
        requires=("transformers>=4.56,<5",),
        fingerprints=("a79b734f3c3e",),  # 4.57.6: 5.x's loop without its size checks, sizes read as tensors
        reason="4.x SigLIP 2's resampling of its position grid, the same loop over the images as 5.x's (sizes "
        "taken as tensors, not with .tolist()): the prefill of 4.x LFM2-VL stopped on its interpolation "
        "('Could not guard on data-dependent expression u0 > 0'). The same replacement.",
    ),
    PatchSpec(
        id="transformers.vision.lfm2_vl_features_4x",
        family="transformers",
        trigger="transformers.models.lfm2_vl.modeling_lfm2_vl",
        target="Lfm2VlModel.get_image_features",
        mode="route",
        replacement="autopatch.areas.vision.naflex:lfm2_vl_features_gathered_4x",
        requires=("transformers>=4.56,<5",),
        fingerprints=("6275640471a6",),  # 4.57.6
        needs=("transformers.vision.siglip2_positions_4x",),
        reason="4.x Lfm2VlModel.get_image_features folds each image's patch blocks image by image, as 5.x's, and "
        "returns the list of features: the same gather, its features as one element of that list.",
    ),
    PatchSpec(
        id="transformers.vision.ovis2_indicators",
        family="transformers",
        trigger="transformers.models.ovis2.modeling_ovis2",
        target="Ovis2Model.forward",
        mode="rewrite",
        replacement="autopatch.areas.vision.vlm:ovis2_indicators_by_where",
        # 4.57's Ovis2 fails in eager on the catalogue's inputs (its image-token count), and 5.3's export stops
        # before this branch (its placeholder check's bounds): proven on 5.12 and 5.23
        requires=("transformers>=5.12",),
        fingerprints=("e5e187ed8dac", "b0441330a6a8"),  # 5.12.1, 5.23.0
        reason="Ovis2Model.forward writes each visual indicator token's embedding under `if mask.any():`, a branch "
        "on the data ('Could not guard on data-dependent expression'). Rewritten from the source: torch.where "
        "writes the same values where the mask holds and leaves the rest, for any mask.",
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_features",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_image_features",
            mode="rewrite",
            replacement="autopatch.areas.vision.vlm:gemma4_features_one_element",
            # 5.12's Gemma 4 returns the pooled features whole (no split): nothing to do there
            requires=("transformers>=5.13",),
            fingerprints=(fingerprint,),  # 5.23.0
            reason=f"{owner}.get_image_features splits the pooled features per image with `.tolist()` of each "
            "image's non-padding patch count, which fixes the number of images; forward concatenates them "
            "straight back. Rewritten from the source: one element holding every image's features, the same "
            "tensor once concatenated (forward still checks it against the image tokens).",
        )
        for model, owner, fingerprint in (("gemma4", "Gemma4Model", "2f7a6bcde286"),
                                          ("gemma4_unified", "Gemma4UnifiedModel", "51295b45751e"))
    ),
    PatchSpec(
        id="transformers.vision.udop_combine_embeddings",
        family="transformers",
        trigger="transformers.models.udop.modeling_udop",
        target="combine_image_text_embeddings",
        mode="route",
        replacement="autopatch.areas.vision.documents:udop_combine_embeddings",
        requires=("transformers>=4.56",),
        fingerprints=("29b0d554b8ba", "341f9119c1d4", "3b6640359978"),  # 4.57.6, 5.12.1, 5.23.0
        reason="UDOP appends to the text each sample's image patches that no token's box covers, selected sample "
        "by sample into Python lists and padded back to the patch count: the batch is fixed and the count is a "
        "value torch cannot trace ('data is not allocated yet'). One sort puts each sample's uncovered "
        "patches first, in order, and the places past its count get upstream's zero padding: the same rows.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('transformers.vision.llava_image_features',),
        'Llava-style VLMs: `list(image_features)` specializes the image batch; the features stay one '
        'tensor.',
    ),
    (
        ('transformers.vision.llava_image_features_5_12',),
        "The same on 5.3-5.12, whose `get_image_features` is neither 4.x's nor 5.23's: rewritten from its "
        'own source (two fingerprints: 5.3, and 5.5-5.12).',
    ),
    (
        (
            'transformers.vision.llava_placeholder_mask', 'transformers.vision.gemma3_placeholder_mask',
            'transformers.vision.vipllava_placeholder_mask', 'transformers.vision.paligemma_placeholder_mask',
            'transformers.vision.aya_vision_placeholder_mask', 'transformers.vision.internvl_placeholder_mask',
            'transformers.vision.got_ocr2_placeholder_mask', 'transformers.vision.cohere2_vision_placeholder_mask',
            'transformers.vision.fuyu_placeholder_mask', 'transformers.vision.aria_placeholder_mask',
            'transformers.vision.florence2_placeholder_mask', 'transformers.vision.deepseek_vl_placeholder_mask',
            'transformers.vision.janus_placeholder_mask', 'transformers.vision.lfm2_vl_placeholder_mask',
            'transformers.vision.llama4_placeholder_mask', 'transformers.vision.video_llava_placeholder_mask',
            'transformers.vision.chameleon_placeholder_mask',
        ),
        "4.x VLMs sharing Llava's `get_placeholder_mask` (one fingerprint; DeepSeek-VL's family, LFM2-VL and Llama 4 "
        "others, the same check; Video-LLaVA's checks its videos too, as LLaVA-NeXT-Video's; Chameleon's reads its "
        'image token from its vocabulary mapping): a Python `if` on the number of image tokens, a data-dependent '
        'size; a runtime check instead.',
    ),
    (
        (
            'transformers.vision.llava_placeholder_mask_5_11', 'transformers.vision.gemma3_placeholder_mask_5_11',
            'transformers.vision.vipllava_placeholder_mask_5_11', 'transformers.vision.paligemma_placeholder_mask_5_11',
            'transformers.vision.aya_vision_placeholder_mask_5_11',
            'transformers.vision.internvl_placeholder_mask_5_11', 'transformers.vision.got_ocr2_placeholder_mask_5_11',
            'transformers.vision.cohere2_vision_placeholder_mask_5_11',
            'transformers.vision.fuyu_placeholder_mask_5_11',
        ),
        'The same VLMs on 5.0-5.11 share another `get_placeholder_mask` (one fingerprint), which checks '
        '`inputs_embeds[mask].numel()` against the features: torch solves the image batch from the size '
        'of that selection in floating point and stops on the rounded bound (`tgt_bound ... not a subset '
        "of src_bound`). Rewritten from the source to 5.12's check on the token count (still asserted at "
        'run time). Tested on 5.3.0.',
    ),
    (
        (
            'transformers.vision.llava_placeholder_message', 'transformers.vision.gemma3_placeholder_message',
            'transformers.vision.vipllava_placeholder_message', 'transformers.vision.paligemma_placeholder_message',
            'transformers.vision.aya_vision_placeholder_message', 'transformers.vision.internvl_placeholder_message',
            'transformers.vision.got_ocr2_placeholder_message',
            'transformers.vision.cohere2_vision_placeholder_message', 'transformers.vision.fuyu_placeholder_message',
            'transformers.vision.aria_placeholder_message', 'transformers.vision.deepseek_vl_placeholder_message',
            'transformers.vision.deepseek_vl_hybrid_placeholder_message',
            'transformers.vision.florence2_placeholder_message', 'transformers.vision.qianfan_ocr_placeholder_message',
            'transformers.vision.llama4_placeholder_message', 'transformers.vision.video_llava_placeholder_message',
            'transformers.vision.janus_placeholder_message', 'transformers.vision.chameleon_placeholder_message',
            'transformers.vision.ovis2_placeholder_message', 'transformers.vision.t5gemma2_placeholder_message',
        ),
        '`strict=True` on 5.12 and later: these VLMs (Llava\'s family, Aria, DeepSeek-VL, Florence-2, Qianfan-OCR, '
        'Janus, Ovis2; Llama 4, Video-LLaVA and Chameleon with sources of their own; T5Gemma 2\'s encoder in its '
        '`get_image_placeholder_mask`) have a `get_placeholder_mask` whose check formats the feature count into '
        'its message before the check runs; Dynamo fixes the image batch to do so ("specialized it to be a '
        'constant"). Rewritten from the source: each such message is a lambda, formatted only when the check fails '
        'in eager code.',
    ),
    (
        ('transformers.vision.idefics2_image_features', 'transformers.vision.idefics3_image_features'),
        '5.x Idefics2/Idefics3 split their features with `.tolist()` of per-sample image counts and view '
        'the pixel mask as `batch_size * num_images`: the image batch and the images per sample become '
        'constants. Rewritten from the source (wrappers kept): one flattened features tensor, and a '
        'flatten of the mask. (5.x SmolVLM returns its per-sample features list in its output: no program '
        'keeps that list with a dynamic batch, so it is not patched.)',
    ),
    (
        (
            'transformers.vision.idefics2_patch_positions', 'transformers.vision.idefics3_patch_positions',
            'transformers.vision.smolvlm_patch_positions', 'transformers.vision.idefics2_image_features_4x',
            'transformers.vision.idefics3_image_features_4x', 'transformers.vision.smolvlm_image_features_4x',
            'transformers.vision.idefics2_full_patch_mask', 'transformers.vision.smolvlm_merger_check',
        ),
        '4.x Idefics2/Idefics3/SmolVLM (and 5.3-5.12 Idefics2/Idefics3, whose `get_image_features` is '
        "4.57's: `_image_features_4x` only, their positions are loop-free already): the vision embeddings "
        'loop over images with `torch.arange(<patches kept>)` (loop-free positions instead; the program '
        'checks each mask keeps a top-left rectangle, as processors make them), the pixel mask is viewed '
        'as `batch_size * num_images` (flatten), Idefics2 tests `torch.any(~mask)` to drop a full mask '
        '(the 4D mask instead: same attention), SmolVLM tests `any()` of its image flags and raises on a '
        'tensor test (tensor expressions and a runtime check, as 5.x).',
    ),
    (
        ('transformers.vision.fuyu_image_features',),
        '4.x Fuyu embeds its images in a Python loop over the batch, which specializes the image count; '
        'all images at once instead.',
    ),
    (
        ('transformers.vision.llava_next_anyres', 'transformers.vision.llava_next_video_anyres',
         'transformers.vision.llava_next_placeholder_mask', 'transformers.vision.llava_next_video_placeholder_mask'),
        "LLaVA-NeXT (and -Video) choose each image's tile grid from `image_sizes.tolist()` in Python and "
        "keep, split and unpad the tiles image by image: the export stops on `IntTrueDiv(56, u0) < "
        "IntTrueDiv(112, u1)`. Rewritten from the source: the same grid choice (in float64, as Python), "
        "tiles and packing for all images at once, from the sizes as data. On 4.x their placeholder checks "
        "become runtime assertions too, as Llava's.",
    ),
    (
        ('transformers.vision.llava_onevision_anyres', 'transformers.vision.llava_onevision_placeholder_mask'),
        "LLaVA-OneVision tiles as LLaVA-NeXT, then shrinks a large image's grid bilinearly to a size read "
        "from the data (`ratio > 1.1`): the same tiling and packing, and F.interpolate's taps and weights "
        "for every image at once; on 4.x its placeholder check as LLaVA-NeXT-Video's.",
    ),
    (
        ('transformers.vision.pixtral_patches', 'transformers.vision.pixtral_patches_flat_positions',
         'transformers.vision.*_patch_merger', 'transformers.vision.*_merged_features*',
         'transformers.vision.mistral3_placeholder_mask'),
        "Mistral 3, LightOnOCR and Mistral Large 4 (Pixtral's tower): the tower cuts each image's patches "
        "out of the padded batch in a Python loop over `image_sizes`, the projector merges 2x2 blocks and "
        "the features are split image by image: the export stopped on `u1*u3 + u5*u7 > 1`. A mask of each "
        "image's patches selects them from the whole batch (same patches, positions, attention blocks), one "
        "gather merges every block, the features stay one tensor; 4.x Mistral 3's placeholder check is "
        "Llava's. The program refuses a batch of one single-patch image (transformers' attention tests "
        "`patches > 1` before its mask).",
    ),
    (
        ('transformers.vision.emu3_image_tokens',),
        "Emu3 (5.13+) cropped each image's VQ codes to its own size (`int(size / factor)`, a float per image) in "
        "a loop over the images, which stopped the export: one mask of each image's kept rows and columns, the "
        "end-of-line column always, selects the same tokens in the same order for all images at once.",
    ),
    (
        ('transformers.vision.siglip2_positions', 'transformers.vision.lfm2_vl_features',
         'transformers.vision.siglip2_positions_4x', 'transformers.vision.lfm2_vl_features_4x'),
        "LFM2-VL (5.13+) on SigLIP 2's variable-resolution tower: the tower resampled its position grid to each "
        "image's patch grid (antialiased `F.interpolate` at sizes read from the data) and the model folded each "
        "image's `2 x 2` patch blocks into channels, both in loops over the images that fixed their number. "
        "Every patch computes its separable antialias weights from the sizes (eager's one-column quirk kept) and "
        "every merged token gathers its block, for all images at once (4.x LFM2-VL too: `_4x` rows).",
    ),
    (
        ('transformers.vision.ovis2_indicators',),
        "Ovis2 (5.12+) writes its visual indicator tokens' embeddings under `if mask.any():`, a branch on the data "
        "that stopped the export: `torch.where` writes the same values, for any mask.",
    ),
    (
        ('transformers.vision.gemma4_features', 'transformers.vision.gemma4_unified_features'),
        "Gemma 4 and Gemma 4 Unified (5.13+) split their pooled image features per image with `.tolist()` of "
        "each image's non-padding patch count, which fixed the number of images in the program; forward "
        "concatenates them straight back: one element holding every image's features instead.",
    ),
    (
        ('transformers.vision.granite_docling_features',),
        "Granite-Docling splits its image features per sample (each deepstack layer's too) with `.tolist()` "
        "sizes that forward concatenates straight back, fixing the batch: one element holding every sample's "
        "features instead, the same tensor once concatenated.",
    ),
    (
        ('transformers.vision.udop_combine_embeddings',),
        "UDOP appended each sample's uncovered image patches to its text through per-sample Python lists (the "
        "batch fixed, the count untraceable): one sort moves them first, zeros after, the same rows.",
    ),
)
