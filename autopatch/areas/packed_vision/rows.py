"""The rows of this area. Vision-language models that pack every image's patches into one sequence (Qwen2-VL and its
kin, on 5.23 and in 4.57's sources).
"""

from __future__ import annotations

from ...spec import PatchSpec, table_row

#: 5.23 VLMs that pack all images' patches into one sequence (Qwen2-VL's tower), each exported by a test. Their
#: vision attention and get_placeholder_mask share one source (fingerprints in the rows); each model module binds
#: vision_utils.get_vision_position_ids by name. Columns: model, vision attention class and its forward's
#: fingerprint, model class, get_image_features (fingerprint, rewriter), get_rope_index (fingerprint, replacement).
PackedModel = table_row("PackedModel", ("model", "attention", "attention_fingerprint", "owner",
                                        "features_fingerprint", "features_rewriter", "rope_fingerprint", "rope_index"))
PACKED_VISION_MODELS = (
    PackedModel("qwen2_vl", "VisionAttention", "b918fa098915", "Qwen2VLModel",
                "54bb4440fb12", "packed_image_features", "31c7fed95e71", "qwen2_vl_rope_index"),
    PackedModel("qwen2_5_vl", "Qwen2_5_VLVisionAttention", "b918fa098915", "Qwen2_5_VLModel",
                "54bb4440fb12", "packed_image_features", "a52a842c5d34", "qwen2_5_vl_rope_index"),
    PackedModel("qwen3_vl", "Qwen3VLVisionAttention", "b918fa098915", "Qwen3VLModel",
                "cf364b3e5fa9", "packed_deepstack_image_features", "b3d7f47d79df", "qwen3_vl_rope_index"),
    # GLM-4V: Qwen2-VL's feature split, Qwen3-VL's rope index (the same code under its own docstring).
    PackedModel("glm4v", "Glm4vVisionAttention", "b918fa098915", "Glm4vModel",
                "54bb4440fb12", "packed_image_features", "2791d473e5f4", "qwen3_vl_rope_index"),
    # Qwen3.5: Qwen3-VL's tower without deepstack (Qwen2-VL's feature split) and rope index; its text model's
    # linear-attention layers need transformers.qwen3_5.gated_delta_scan too.
    PackedModel("qwen3_5", "Qwen3_5VisionAttention", "b918fa098915", "Qwen3_5Model",
                "54bb4440fb12", "packed_image_features", "b3d7f47d79df", "qwen3_vl_rope_index"),
    # Qwen4-Exp: Qwen3.5's tower, feature split, placeholder check and rope index (the same sources, fingerprints
    # alike); its text model's linear-attention layers need transformers.qwen4_exp.gated_delta_scan too.
    PackedModel("qwen4_exp", "Qwen4ExpVisionAttention", "b918fa098915", "Qwen4ExpModel",
                "54bb4440fb12", "packed_image_features", "b3d7f47d79df", "qwen3_vl_rope_index"),
    # Qwen3-VL's and Qwen3.5's sources under other names: the MoE variants and Cohere's Compass (Qwen3-VL's).
    PackedModel("qwen3_vl_moe", "Qwen3VLMoeVisionAttention", "b918fa098915", "Qwen3VLMoeModel",
                "cf364b3e5fa9", "packed_deepstack_image_features", "b3d7f47d79df", "qwen3_vl_rope_index"),
    PackedModel("qwen3_5_moe", "Qwen3_5MoeVisionAttention", "b918fa098915", "Qwen3_5MoeModel",
                "54bb4440fb12", "packed_image_features", "b3d7f47d79df", "qwen3_vl_rope_index"),
    PackedModel("cohere_compass", "CohereCompassVisionAttention", "b918fa098915", "CohereCompassModel",
                "cf364b3e5fa9", "packed_deepstack_image_features", "b3d7f47d79df", "qwen3_vl_rope_index"),
    # GLM-4V's under other names: GLM-4V-MoE (its rope index under its own docstring), GLM-OCR (the attention with
    # query and key norms added before the rotary embedding: the rewritten statements are the same).
    PackedModel("glm4v_moe", "Glm4vMoeVisionAttention", "b918fa098915", "Glm4vMoeModel",
                "54bb4440fb12", "packed_image_features", "cda3a21e4b44", "qwen3_vl_rope_index"),
    PackedModel("glm_ocr", "GlmOcrVisionAttention", "71b4a9b79b30", "GlmOcrModel",
                "54bb4440fb12", "packed_image_features", "2bc00e54b291", "qwen3_vl_rope_index"),
    # Models whose tower is another model's (BORROWED_TOWERS): their own rows are the features and the rope index.
    PackedModel("glm46v", None, None, "Glm46VModel",
                "54bb4440fb12", "packed_image_features", "cc061dcad51d", "qwen3_vl_rope_index"),
    PackedModel("cosmos3_omni", None, None, "Cosmos3OmniModel",
                "cf364b3e5fa9", "packed_deepstack_image_features", "b3d7f47d79df", "qwen3_vl_rope_index"),
    # EXAONE 4.5: Qwen2.5-VL's tower (its windows too) with grouped key/value heads in the attention (the rewritten
    # statements are the same); its text model (EXAONE 4's) numbers positions with arange: no rope index.
    PackedModel("exaone4_5", "Exaone4_5_VisionAttention", "75ec8318ec04", "Exaone4_5_Model",
                "54bb4440fb12", "packed_image_features", None, None),
    # Muse Spark and Muse Glimmer: Qwen2.5-VL's windows and Qwen3-VL's position-grid interpolation in a tower of
    # their own (the attention's rewritten statements are the same), features adapted and projected before the
    # split; their text models number positions with arange (no rope index).
    PackedModel("muse_spark", "MuseSparkVisionAttention", "80c4aad9584f", "MuseSparkModel",
                "6af295225994", "adapted_image_features", None, None),
    PackedModel("muse_glimmer", "MuseGlimmerVisionAttention", "80c4aad9584f", "MuseGlimmerModel",
                "6af295225994", "adapted_image_features", None, None),
    # Kimi-K2.5: the same attention source as the Muse towers', Qwen3-VL's position-grid resampling (bicubic),
    # a temporal table indexed per patch (its own row below), no windows; its text model numbers positions with
    # arange.
    PackedModel("kimi_k25", "Kimi_K25VisionAttention", "80c4aad9584f", "Kimi_K25Model",
                "3cd7a5f5af4f", "kernel_merged_image_features", None, None),
    # Qwen2.5-Omni's thinker: Qwen2.5-VL's tower (windows too) with separate q/k/v projections (the rewritten
    # statements are the same); its rope index walks audio, video and images 4.x's way (ROPE_OWNERS).
    PackedModel("qwen2_5_omni", "Qwen2_5OmniVisionAttention", "c6f09b9d03f9", "Qwen2_5OmniThinkerModel",
                "54bb4440fb12", "packed_image_features", "d60c8a19a7a2", "qwen2_5_omni_rope_index"),
    # Qwen3-Omni-MoE's thinker: Qwen3-VL's tower (attention and position-grid resampling), its deepstack features
    # split in place; a float rope index of its own, Qwen2.5-Omni's positions for text and images.
    PackedModel("qwen3_omni_moe", "Qwen3OmniMoeVisionAttention", "b918fa098915", "Qwen3OmniMoeThinkerModel",
                "0f187107ed1f", "packed_deepstack_outputs_image_features", "1e71a2cc0e69", "qwen3_omni_rope_index"),
    # PaddleOCR-VL: a SigLIP tower of its own packed the Qwen2-VL way (vision_utils' positions and position-grid
    # resampling, the attention in its loop form), its projector merging each image's blocks (own row below);
    # Qwen2-VL's rope index (the same source).
    PackedModel("paddleocr_vl", "PaddleOCRVisionAttention", "6bc4e6ecf80c", "PaddleOCRVLModel",
                "b309275be49b", "paddleocr_image_features", "31c7fed95e71", "qwen2_vl_rope_index"),
    # Video-LLaMA-3: PaddleOCR-VL's attention source in a SigLIP tower with a merge size per image (its own
    # downsampling after the tower, own row below); its Qwen2 text model numbers positions with arange.
    PackedModel("video_llama_3", "VideoLlama3VisionAttention", "6bc4e6ecf80c", "VideoLlama3Model",
                "ab01c4769579", "video_llama_3_image_features", None, None),
    # GLM-5-Next: GLM-OCR's tower attention and Qwen2-VL's feature split; its text model numbers positions with
    # arange.
    PackedModel("glm5_next", "Glm5NextVisionAttention", "71b4a9b79b30", "Glm5NextModel",
                "54bb4440fb12", "packed_image_features", None, None),
    # dots.ocr 3: GLM-OCR's tower attention, Qwen2-VL's feature split by the tensor's own split method; its text
    # model numbers positions with arange.
    PackedModel("dots3_note", "Dots3NoteVisionAttention", "71b4a9b79b30", "Dots3NoteModel",
                "a653e41203a3", "dots3_note_image_features", None, None),
    # LFM3-VL: a tower of gated depthwise convolutions over each frame's grid (own rows below) and attention layers
    # (the loop form, the caller's mask passed to each chunk); its text model numbers positions with arange.
    # Inkling 2: PaddleOCR-VL's attention source (the loop form) in a tower of its own (a class token before each
    # image, positions from vision_utils' interpolation; own row below), dots.ocr 3's placeholder check; its text
    # model numbers positions with arange.
    PackedModel("inkling2", "Inkling2VisionAttention", "6bc4e6ecf80c", "Inkling2Model",
                "f8a2d18df2ad", "inkling2_image_features", None, None),
    # ERNIE 4.5 VL MoE: Qwen2-VL's tower attention and rope index (videos' frames merged in pairs), its own
    # resampler between the tower and the split (own row below).
    PackedModel("ernie4_5_vl_moe", "Ernie4_5_VLMoeVisionAttention", "b918fa098915", "Ernie4_5_VLMoeModel",
                "9634cab8e9dc", "ernie4_5_vl_image_features", "69ad49d157f4", "ernie4_5_vl_rope_index"),
    PackedModel("lfm3_vl", "Lfm3VlVisionAttention", "ec0556705d2f", "Lfm3VlModel",
                "57d08292cba4", "lfm3_vl_image_features", None, None),
)

#: The vision attention sources in a loop form of the shared one (it also lists each frame's attention map), by
#: the fingerprint in PACKED_VISION_MODELS -> their rewriter; every other source's: packed_attention_one_call.
#: PaddleOCR-VL's and Video-LLaMA-3's (one source), LFM3-VL's (the caller's mask passed to each chunk).
ATTENTION_REWRITERS = {"6bc4e6ecf80c": "packed_attention_loop_one_call",
                       "ec0556705d2f": "masked_attention_loop_one_call"}

#: Rows for code of a model's own that reads the grid image by image: beside their table rows for the models of
#: PACKED_VISION_MODELS, all the rows of a model packed the same way whose tower shares none of their code
#: (HunYuan-VL). Columns: model, row name (``transformers.vision.<model>_<name>``), target, mode, replacement (a
#: function of packed.py, or ``module:function`` of another module of this area), its fingerprint, reason.
OwnRow = table_row("OwnRow", ("model", "name", "target", "mode", "replacement", "fingerprint", "reason"))
OWN_ROWS = (
    OwnRow("paddleocr_vl", "merger_packed", "PaddleOCRProjector.forward", "route", "paddleocr_projector_packed",
           "0678f21e18ed", "PaddleOCRProjector.forward splits the tower's patches per image with .tolist() sizes and "
           "concatenates each image's merge blocks in a loop, which fixes the number of images and their sizes. "
           "The same blocks at once: every merged token gathers its patches from the packed sequence."),
    OwnRow("video_llama_3", "merger_packed", "VideoLlama3VisionModel.pixel_unshuffle", "route",
           "video_llama_3_unshuffle_packed", "5c171e3a66f5", "VideoLlama3VisionModel.pixel_unshuffle splits the "
           "tower's patches per image with .tolist() sizes and shrinks each image by its merge size (bilinear) in a "
           "loop. At that exact factor a merged token is the mean of its block's middle patches: all at once."),
    OwnRow("lfm3_vl", "tower_grid", "Lfm3VlVisionModel.forward", "rewrite", "lfm3_vl_tower_grid_tensor",
           "340f30b3a68e", "Lfm3VlVisionModel.forward reads grid_thw.tolist() for its convolution layers, which "
           "fixes the number of images and their sizes. Rewritten from the source: the layers get the grid "
           "tensor (transformers.vision.lfm3_vl_conv_packed reads it as data)."),
    OwnRow("lfm3_vl", "conv_packed", "Lfm3VlVisionShortConv.forward", "route", "lfm3_vl_conv_packed",
           "fb02abf6859b", "Lfm3VlVisionShortConv.forward rasters each image's frames to their grid and convolves "
           "them depthwise in a loop over the images. The same convolution at once: every patch sums its k x k "
           "neighbours in its frame, found by their place in the packed sequence (zero outside, as the padding)."),
    OwnRow("ernie4_5_vl_moe", "resampler_packed", "Ernie4_5_VLMoeVariableResolutionResamplerModel._temporal_slicing",
           "route", "ernie4_5_vl:temporal_pairs", "f746a66d89ab", "Ernie4_5_VLMoeVariableResolutionResampler"
           "Model._temporal_slicing lists each image's frame pairs in a Python loop over the grid's rows "
           "(range over a tensor's value), which fixes the number of images and reads their frame counts. The same "
           "pairs for every merged token at once: each finds its image and frame pair by its place in the sequence."),
    OwnRow("inkling2", "placeholder_count", "Inkling2Model.get_placeholder_mask", "rewrite",
           "placeholder_count_check", "4badf90758ac", "Inkling2Model.get_placeholder_mask counts the placeholders' "
           "embedding values by selecting them (a data-dependent size) and checks that count against the features', "
           "which Inkling 2 reads from its input: torch's range check fails (tgt_bound not a subset of src_bound). "
           "Rewritten from the source: the same count, placeholder tokens times the width; the message a lambda "
           "(strict=True fixes the image count while formatting it)."),
    # Inkling (its multimodal model, model type inkling_mm_model): one patch volume per image token, no packing, but
    # Inkling 2's placeholder check (the same source), whose count stops its prefill the same way.
    OwnRow("inkling", "placeholder_count", "InklingModel.get_placeholder_mask", "rewrite", "placeholder_count_check",
           "4badf90758ac", "InklingModel.get_placeholder_mask counts the placeholders' embedding values by selecting "
           "them (a data-dependent size) and checks that count against the features', which Inkling reads from its "
           "input (one patch volume per token): torch's range check fails (tgt_bound not a subset of src_bound). "
           "Rewritten from the source: the same count, placeholder tokens times the width; the message a lambda."),
    # Cosmos3-Edge: a SigLIP 2 tower of its own packed the Qwen2-VL way (learned positions resampled per image,
    # no rotary positions), Qwen2-VL's feature split through its projector, Qwen3-VL's rope index (the same rules:
    # a video's frames split into one-frame grids). Each row is needed (tests/test_transformers_packed_vision.py).
    OwnRow("cosmos3_edge", "positions_packed", "Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings", "route",
           "cosmos3_edge:positions_packed", "48e62472ca4a", "Cosmos3EdgeVisionEmbeddings.resize_positional_"
           "embeddings resamples the learned position grid to each image's size with an antialiased bilinear "
           "F.interpolate in a loop over grid_thw.tolist() (the size is data: guard u1 > 0). The same filter's "
           "weights along rows and columns for every patch at once, equal up to float rounding (2e-6 measured)."),
    OwnRow("cosmos3_edge", "attention_packed", "Cosmos3EdgeVisionAttention.forward", "rewrite",
           "cosmos3_edge:attention_one_call", "65390333e350", "Cosmos3EdgeVisionAttention.forward (eager and sdpa) "
           "splits q/k/v per frame with lengths.tolist() and attends chunk by chunk. Rewritten from the source: "
           "one attention call with a block-diagonal mask built from cu_seqlens, the same result."),
    OwnRow("cosmos3_edge", "image_features_packed", "Cosmos3EdgeModel.get_image_features", "rewrite",
           "projector_image_features", "061ed8fbaf14", "Cosmos3EdgeModel.get_image_features splits the merged "
           "features per image with .tolist() sizes, which fixes the number of images; its caller concatenates "
           "them at once. Rewritten from the source: one element with every image's features."),
    OwnRow("cosmos3_edge", "rope_index", "Cosmos3EdgeModel.get_rope_index", "route", "qwen3_vl_rope_index",
           "2f8e0191e981", "Cosmos3EdgeModel.get_rope_index groups each sample's tokens with itertools.groupby over "
           "mm_token_type_ids.tolist() and walks the groups in Python (guard Eq(u0, 0)); Qwen3-VL's rules (a "
           "video's frames as one-frame grids). The same 3-axis positions and deltas for every token at once."),
    # HunYuan-VL: a tower of its own (learned positions resampled per image, no rotary positions: no
    # get_vision_position_ids to route) merging each image with a convolution and newline tokens; Qwen2-VL's
    # attention chunks and feature split in sources of its own; a rope index of its own. Each row is needed: without
    # any one the export fails (tests/test_transformers_packed_vision.py).
    OwnRow("hunyuan_vl", "attention_packed", "HunYuanVLVisionAttention.forward", "rewrite",
           "kwargs_mask_attention_one_call", "094d8e33b49a", "HunYuanVLVisionAttention.forward (eager and sdpa) "
           "splits q/k/v per image with lengths.tolist() and attends chunk by chunk (guard Eq(u0, 0)). Rewritten from "
           "the source: one attention call with a block-diagonal mask built from cu_seqlens, the same result."),
    OwnRow("hunyuan_vl", "patch_embed_packed", "HunYuanVLVisionPatchEmbed.forward", "route",
           "hunyuan_vl:patch_embed_packed", "4ee305faf496", "HunYuanVLVisionPatchEmbed.forward resamples the learned "
           "position grid per image with F.interpolate in a loop over the grid's rows, which fixes the number of "
           "images (Constraints violated: image_grid_thw's size fixed to 2). The same taps and weights (vision_utils', "
           "the config's mode) for every patch at once, equal up to float rounding (1e-6 measured)."),
    OwnRow("hunyuan_vl", "tower_grid", "HunYuanVLVisionTransformer.forward", "rewrite",
           "hunyuan_vl:tower_merger_grid_tensor", "0846a2fb03ec", "HunYuanVLVisionTransformer.forward splits the "
           "layers' output per image with .tolist() sizes and merges each image in a loop over grid_thw.tolist(), "
           "which fixes the number of images (Constraints violated). Rewritten from the source: the merger gets every "
           "patch and the grid tensor (transformers.vision.hunyuan_vl_merger_packed merges them at once)."),
    OwnRow("hunyuan_vl", "merger_packed", "HunYuanVLVisionPatchMerger.forward", "route",
           "hunyuan_vl:merger_packed", "bedcab57f3a9", "HunYuanVLVisionPatchMerger.forward convolves one image's "
           "patches reshaped to its (h, w) grid, adding a newline token per row: given the grid tensor by the tower's "
           "row, the reshape fails (TypeError: tuple of ints, got FakeTensor). The same for every image at once: "
           "each merged token gathers the patches its convolution reads (a (h, w) takes the original)."),
    OwnRow("hunyuan_vl", "image_features_packed", "HunYuanVLModel.get_image_features", "rewrite",
           "hunyuan_vl_image_features", "12776842b298", "HunYuanVLModel.get_image_features splits the merged "
           "features per image with .tolist() sizes, which fixes the number of images (Constraints violated); its "
           "caller concatenates them at once. Rewritten from the source: one element with every image's features."),
    OwnRow("hunyuan_vl", "placeholder_check", "HunYuanVLModel.get_placeholder_mask", "rewrite",
           "hunyuan_vl:placeholder_check", "fbd93f63acb5", "HunYuanVLModel.get_placeholder_mask compares a "
           "data-dependent size with the features' in a Python if (guard Ne(u0, ...)). Rewritten from the source: "
           "the same condition as torch._check_tensor_all, a runtime assertion."),
    OwnRow("hunyuan_vl", "rope_index", "HunYuanVLModel.get_rope_index", "route", "hunyuan_vl:rope_index",
           "2f913ce0af66", "HunYuanVLModel.get_rope_index groups each sample's tokens with itertools.groupby over "
           "mm_token_type_ids.tolist() and walks the image spans in Python (guard Eq(u0, 0)). The same positions "
           "(column, row, image ordinal on the last three axes) and deltas for every token at once."),
    # Nemotron-H-Omni: the RADIO tower (its own module, built by AutoModel from the vision config; no other model
    # uses it) packs the images' patches and reads the grid per image in three places; the model's own image
    # features pixel-shuffle each image in a loop. Each row is needed (tests/test_transformers_packed_vision.py).
    OwnRow("radio", "embed_packed", "RadioPatchEmbeddings._embed_packed_patches", "route",
           "nemotron_h_omni:radio_embed_packed", "3e63ead07665", "RadioPatchEmbeddings._embed_packed_patches "
           "resamples the learned position grid per image with F.interpolate in a loop over image_grid_hw.tolist(), "
           "comparing the sizes in Python (guard u1 < Max(u1, u2)). The same taps, weights and sums (F.interpolate's, "
           "measured bit for bit on the CPU) for every patch at once; one scatter places the class and register "
           "tokens."),
    OwnRow("radio", "attention_packed", "RadioAttention.forward", "rewrite", "nemotron_h_omni:radio_attention_one_call",
           "3ec574fd8360", "RadioAttention.forward (eager and sdpa) splits q/k/v per image with lengths.tolist() and "
           "attends image by image. Rewritten from the source: one attention call with a block-diagonal mask built "
           "from cu_seqlens, the same result."),
    OwnRow("radio", "packed_every_count", "RadioModel._forward_packed", "rewrite",
           "nemotron_h_omni:radio_packed_every_count", "c4c651229960", "RadioModel._forward_packed passes cu_seqlens "
           "only when len(sequence_lengths) > 1, which fixes the number of images, and takes the features out by a "
           "mask whose count is data. Rewritten from the source: cu_seqlens always (one image's block-diagonal mask "
           "masks nothing), the features' count stated equal to the patches'."),
    OwnRow("nemotron_h_omni", "image_features_packed", "NemotronH_Omni_Reasoning_V3.get_image_features", "route",
           "nemotron_h_omni:nemotron_h_omni_image_features", "bfd15543fa79", "NemotronH_Omni_Reasoning_V3."
           "get_image_features splits the tower's features per image with .tolist() sizes and pixel-shuffles each "
           "image in a loop, which fixes the number of images and their sizes. The same merged tokens at once: each "
           "gathers its 2 x 2 block of patches; one element with every image's features."),
    # MiniCPM-V 4.7: a NaViT-style SigLIP tower of its own (every image's patches in one strip, target_sizes their
    # (rows, columns)), its merger folding each image's blocks, a canvas rope index of its own (minicpmv.py).
    OwnRow("minicpmv4_7", "nearest_positions", "get_vision_nearest_position_ids", "route",
           "minicpmv:nearest_position_ids", "69c3c3136fab", "vision_utils.get_vision_nearest_position_ids loops "
           "over target_sizes.tolist() to bucket each image's rows and columns onto the learned position grid "
           "(int() of a data-dependent value). The same buckets for every patch at once, found by its image."),
    OwnRow("minicpmv4_7", "attention_packed", "MiniCPMV4_7VisionAttention.forward", "rewrite",
           "minicpmv:attention_one_call", "0ad253d6b6b5", "MiniCPMV4_7VisionAttention.forward (eager and sdpa) "
           "splits q/k/v per image with lengths.tolist() and attends chunk by chunk. Rewritten from the source: one "
           "attention call with a block-diagonal mask built from cu_seqlens, the same result."),
    OwnRow("minicpmv4_7", "windows_packed", "get_vision_window_index", "route", "packed_window_index",
           "420d88ca4b33", "The tower's window-attention merger lists each image's 2 x 2 windows with "
           "vision_utils.get_vision_window_index, a loop over grid_thw.tolist() (Qwen2.5-VL's windows, merge and "
           "patch size 1). packed_window_index's same order and bounds at once."),
    OwnRow("minicpmv4_7", "window_rows", "MiniCPMV4_7ViTWindowAttentionMerger.forward", "rewrite",
           "minicpmv:window_rows_stated", "03f9f9caa366", "MiniCPMV4_7ViTWindowAttentionMerger.forward reorders "
           "the patches by the window index, whose length the program reads from the grid (data): the attention "
           "after it stops on that size (guard u1 > 1). Rewritten from the source: the index is stated as long as "
           "the patches (the windows list every patch once)."),
    OwnRow("minicpmv4_7", "merger_packed", "MiniCPMV4_7Merger.forward", "route", "minicpmv:merger_packed",
           "a188fef17190", "MiniCPMV4_7Merger.forward cuts each image's patches out of the packed sequence and "
           "folds its 2 x 2 blocks in a loop over the images, viewed at sizes read from target_sizes (data). The "
           "same blocks at once: every merged token gathers its patches; one element, which the caller "
           "concatenates to the same tensor."),
    OwnRow("minicpmv4_7", "rope_index", "MiniCPMV4_7Model.get_rope_index", "route", "minicpmv:rope_index",
           "f96c27a04412", "MiniCPMV4_7Model.get_rope_index walks each sample's tokens in Python (input_ids.tolist(), "
           "itertools.groupby) to lay its images out on a canvas. For images without detail slices, the same "
           "positions and deltas for every token at once (slices and a few other layouts refused at run time, "
           "videos keep the original)."),
)

#: model -> the class defining its get_rope_index, where that is not the model class (a base it inherits from).
ROPE_OWNERS = {"qwen2_5_omni": "Qwen2_5OmniPreTrainedModelForConditionalGeneration",
               "qwen3_omni_moe": "Qwen3OmniMoePreTrainedModelForConditionalGeneration"}

#: Of PACKED_VISION_MODELS, the towers that run windows and positions per patch (spatial merge 1) and merge blocks
#: of patches afterwards by a gather (pixel shuffle): (model, tower class). One source each (fingerprints in rows).
PIXEL_SHUFFLE_TOWERS = (("muse_spark", "MuseSparkVisionModel"), ("muse_glimmer", "MuseGlimmerVisionModel"))

#: Of OWN_ROWS, model -> the module (a model type) of its vision tower, whose own rows it needs with its own and
#: which no model of the table uses: Nemotron-H-Omni's RADIO tower.
OWN_ROW_TOWERS = {"nemotron_h_omni": "radio"}

#: model -> the model whose module holds its vision tower (built by AutoModel from its vision config): that model's
#: patch-position and attention rows do the tower's part.
BORROWED_TOWERS = {"glm46v": "glm4v", "cosmos3_omni": "qwen3_vl"}

#: What every packed-vision row requires: the 5.23 sources (vision_utils and the shared attention).
PACKED_VISION_REQUIRES = ("transformers>=5.13", "torch>=2.9")

#: Of those, the models whose strict export fixes the image size while formatting get_placeholder_mask's message
#: (measured: Qwen2.5-VL's strict program takes other images without the row, so it has none), with the
#: fingerprint of that method (GLM-4V's differs only in its video mask, which reads the image token).
PLACEHOLDER_CHECK_STRICT = {"qwen2_vl": "e96fc4bdcbe2", "qwen3_vl": "e96fc4bdcbe2", "glm4v": "be2b76473392",
                            "qwen3_5": "e96fc4bdcbe2", "qwen3_vl_moe": "e96fc4bdcbe2", "qwen3_5_moe": "e96fc4bdcbe2",
                            "cohere_compass": "e96fc4bdcbe2", "glm4v_moe": "be2b76473392", "glm_ocr": "be2b76473392",
                            "glm46v": "be2b76473392", "cosmos3_omni": "e96fc4bdcbe2", "qwen3_omni_moe": "192f5f0ed4a3",
                            "lfm3_vl": "e96fc4bdcbe2", "glm5_next": "45a611c1fdc8", "dots3_note": "4badf90758ac",
                            "qwen4_exp": "e96fc4bdcbe2", "cosmos3_edge": "e96fc4bdcbe2"}

#: Of those, the models outside PACKED_VISION_MODELS (their rows in OWN_ROWS) -> the class of get_placeholder_mask.
PLACEHOLDER_OWNERS = {"cosmos3_edge": "Cosmos3EdgeModel"}

#: Of those, the get_placeholder_mask sources whose message is not Qwen2-VL's (by fingerprint) -> their rewriter;
#: every other one's: packed_placeholder_check. dots.ocr 3's one check for every modality.
PLACEHOLDER_REWRITERS = {"4badf90758ac": "multimodal_placeholder_check"}

#: Of those, the models whose text model has no 3-axis rope index (positions by arange): no rope row.
NO_ROPE_INDEX = tuple(row.model for row in PACKED_VISION_MODELS if row.rope_index is None)

#: Of those, the models with Qwen2.5-VL's windowed tower attention (vision_utils' window index, bound by name).
WINDOWED_MODELS = ("qwen2_5_vl", "exaone4_5", "muse_spark", "muse_glimmer", "qwen2_5_omni")

#: Of those, the models whose tower resamples a learned position grid with vision_utils' interpolation (Qwen3-VL's
#: tower; Qwen3.5's is Qwen3-VL's without deepstack; GLM-4V's tower resamples its own way).
INTERPOLATION_MODELS = ("qwen3_vl", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe", "cohere_compass", "muse_spark",
                        "muse_glimmer", "kimi_k25", "qwen3_omni_moe", "paddleocr_vl", "qwen4_exp", "inkling2")

PACKED_VISION_REQUIRES_4X = ("transformers>=4.56,<5", "torch>=2.9")

#: The same models in 4.57's sources (the ``*_4x`` rows): each module has its own copies, mostly of one source.
#: Columns: model, vision tower class, vision attention class, model class, the fingerprints of the tower's
#: rot_pos_emb, the attention's forward, get_image_features, get_placeholder_mask, get_rope_index, and the
#: replacements of rot_pos_emb and get_rope_index.
PackedModel4x = table_row("PackedModel4x", ("model", "tower", "attention", "owner", "fingerprints", "rot_pos_emb",
                                            "rope_index"))
PACKED_VISION_MODELS_4X = (
    PackedModel4x("qwen2_vl", "Qwen2VisionTransformerPretrainedModel", "VisionAttention", "Qwen2VLModel",
                  ("7290f8a51f13", "e272c1758c19", "03ab8c6986fe", "b6431acf2fe5", "a52f6da348cc"),
                  "rot_pos_emb_4x", "qwen2_vl_rope_index_4x"),
    PackedModel4x("qwen2_5_vl", "Qwen2_5_VisionTransformerPretrainedModel", "Qwen2_5_VLVisionAttention",
                  "Qwen2_5_VLModel",
                  ("7290f8a51f13", "e272c1758c19", "03ab8c6986fe", "b6431acf2fe5", "4df9dd73ae33"),
                  "rot_pos_emb_4x", "qwen2_5_vl_rope_index_4x"),
    PackedModel4x("qwen3_vl", "Qwen3VLVisionModel", "Qwen3VLVisionAttention", "Qwen3VLModel",
                  ("bde0eb1ec127", "e272c1758c19", "9e199b02c42f", "b6431acf2fe5", "fba6bcaef532"),
                  "rot_pos_emb_4x", "qwen3_vl_rope_index_4x"),
    # Qwen3-VL-MoE: Qwen3-VL's sources under its own names (its rope index's docstring names the MoE model).
    PackedModel4x("qwen3_vl_moe", "Qwen3VLMoeVisionModel", "Qwen3VLMoeVisionAttention", "Qwen3VLMoeModel",
                  ("bde0eb1ec127", "e272c1758c19", "9e199b02c42f", "b6431acf2fe5", "241857ba014f"),
                  "rot_pos_emb_4x", "qwen3_vl_rope_index_4x"),
    # GLM-4V (GLM-4V-MoE's sources are the same): Qwen2-VL's attention and feature split; rot_pos_emb also returns
    # the positions, the placeholder check has GLM's video mask, the rope index walks GLM's video-start and end
    # tokens.
    PackedModel4x("glm4v", "Glm4vVisionModel", "Glm4vVisionAttention", "Glm4vModel",
                  ("b467b24e6309", "e272c1758c19", "03ab8c6986fe", "966eb1b943a6", "743eaac5cb1a"),
                  "glm4v_rot_pos_emb_4x", "glm4v_rope_index_4x"),
    PackedModel4x("glm4v_moe", "Glm4vMoeVisionModel", "Glm4vMoeVisionAttention", "Glm4vMoeModel",
                  ("b467b24e6309", "e272c1758c19", "03ab8c6986fe", "966eb1b943a6", "743eaac5cb1a"),
                  "glm4v_rot_pos_emb_4x", "glm4v_rope_index_4x"),
)

#: The 4.57 towers' own rows beside PACKED_CORE_4X (``transformers.vision.<model>_<name>_4x``): model, name,
#: target, mode, replacement (packed.py), its fingerprint, reason.
OwnRow4x = table_row("OwnRow4x", ("model", "name", "target", "mode", "replacement", "fingerprint", "reason"))
_POSITION_GRID_4X = ("Resamples the learned position grid per image in a loop that reads the sizes and collects the "
                     "taps and weights with .tolist(). The same four taps and weights for every patch at once.")
_GLM_LENGTHS_4X = ("Hands its position embeddings each frame's patch count as .tolist(), which fixes the number of "
                   "images. Rewritten from the source: the tensor (transformers.vision.{model}_position_embedding_4x "
                   "reads it as data).")
_GLM_EMBEDDING_4X = ("Repeats each frame's target size over its patches in a loop over the frames' lengths. "
                     "Rewritten from the source: each patch finds its frame by searchsorted over the cumulative "
                     "lengths and reads the same row of image_shapes.")
OWN_ROWS_4X = (
    OwnRow4x("qwen2_5_vl", "windows_packed", "Qwen2_5_VisionTransformerPretrainedModel.get_window_index", "route",
             "qwen2_5_vl_window_index_4x", "d26b9bc4b7ae",
             "Lists each image's attention windows in a loop over the grid, with the window bounds as a Python list "
             "of .tolist() values. The same order and bounds at once (as the 5.x row), the bounds as a tensor."),
    OwnRow4x("qwen3_vl", "position_grid", "Qwen3VLVisionModel.fast_pos_embed_interpolate", "route",
             "qwen3_vl_position_grid_4x", "90702c2a169f", _POSITION_GRID_4X),
    OwnRow4x("qwen3_vl_moe", "position_grid", "Qwen3VLMoeVisionModel.fast_pos_embed_interpolate", "route",
             "qwen3_vl_position_grid_4x", "90702c2a169f", _POSITION_GRID_4X),
    *(
        row
        for model, prefix in (("glm4v", "Glm4v"), ("glm4v_moe", "Glm4vMoe"))
        for row in (
            OwnRow4x(model, "tower_lengths", f"{prefix}VisionModel.forward", "rewrite", "glm4v_tower_lengths_4x",
                     "4ade9a52f5d8", _GLM_LENGTHS_4X.format(model=model)),
            OwnRow4x(model, "position_embedding", f"{prefix}VisionEmbeddings.forward", "rewrite",
                     "glm4v_position_embedding_4x", "578ccc3a7a33", _GLM_EMBEDDING_4X),
        )
    ),
)

#: The rows one packed model's prefill needs together (image positions, attention, features, text positions), 5.23's
#: and 4.57's; Qwen3.5's text model also needs its gated delta scan.
PACKED_CORE = ("patch_positions_packed", "attention_packed", "image_features_packed", "rope_index")
PACKED_CORE_4X = ("rot_pos_emb_4x", "attention_packed_4x", "image_features_packed_4x", "placeholder_check_4x",
                  "rope_index_4x")


_TOWER_ROWS = ("patch_positions_packed", "attention_packed")

#: Of PACKED_VISION_MODELS, those whose text model has linear-attention layers: they need its
#: transformers.<model>.gated_delta_scan too.
GATED_DELTA_TEXT = ("qwen3_5", "qwen3_5_moe", "qwen4_exp")

#: Other rows a model's text model needs for its prefill to export: Qwen4-Exp's sparse-attention indexer, MiniCPM-V
#: 4.7's Qwen3.5 text model's gated delta scan, ERNIE 4.5 VL's text and vision experts.
TEXT_NEEDS = {"qwen4_exp": ("transformers.masks.qwen4_exp_block_selection",),
              "minicpmv4_7": ("transformers.qwen3_5.gated_delta_scan",),
              "ernie4_5_vl_moe": ("transformers.moe.ernie4_5_vl_modality_experts",)}


#: The models of PACKED_VISION_MODELS: their rows need the table's (PACKED_CORE); the other models' are all in
#: OWN_ROWS.
_TABLE_MODELS = frozenset(row.model for row in PACKED_VISION_MODELS)


def _companions(model: str, own: str, core=PACKED_CORE) -> tuple[str, ...]:
    text_model = ((f"transformers.{model}.gated_delta_scan",) if model in GATED_DELTA_TEXT else ()) + TEXT_NEEDS.get(
        model, ())
    core = core if model in _TABLE_MODELS else ()
    tower = BORROWED_TOWERS.get(model, model)
    group = {model, *(a for a, b in OWN_ROW_TOWERS.items() if b == model), *(b for a, b in OWN_ROW_TOWERS.items()
                                                                              if a == model)}
    model_rows = tuple((row.model, row.name) for row in OWN_ROWS if row.model in group)
    own_id = f"transformers.vision.{model}_{own}"
    return tuple(identifier for identifier in (
        *(f"transformers.vision.{tower if name in _TOWER_ROWS else model}_{name}" for name in core),
        *(f"transformers.vision.{owner}_{name}" for owner, name in model_rows))
        if identifier != own_id and not (identifier.endswith("_rope_index") and model in NO_ROPE_INDEX)) + text_model


def _own_4x(model: str, own: str) -> tuple[str, ...]:
    """The other rows of OWN_ROWS_4X that ``model``'s 4.57 prefill needs with its own ``own``."""
    return tuple(f"transformers.vision.{model}_{row.name}_4x" for row in OWN_ROWS_4X
                 if row.model == model and row.name != own)


ROWS = (
    # 5.23 VLMs that pack every image's patches into one sequence (Qwen2-VL and its kin): their towers' rows, then
    # the models' own.
    *(
        spec
        for model, attention, attention_fingerprint, *_ in PACKED_VISION_MODELS
        for spec in (
            PatchSpec(
                id=f"transformers.vision.{model}_patch_positions_packed",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target="get_vision_position_ids",  # the module's own binding of transformers.vision_utils'
                mode="route",
                replacement="autopatch.areas.packed_vision.packed:packed_position_ids",
                requires=PACKED_VISION_REQUIRES,
                fingerprints=("0d795946698a",),
                needs=_companions(model, "patch_positions_packed"),
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
                replacement="autopatch.areas.packed_vision.packed:"
                + ATTENTION_REWRITERS.get(attention_fingerprint, "packed_attention_one_call"),
                requires=PACKED_VISION_REQUIRES,
                fingerprints=(attention_fingerprint,),
                needs=_companions(model, "attention_packed"),
                reason=f"{attention}.forward (eager and sdpa) splits q/k/v per frame with lengths.tolist() and "
                "attends chunk by chunk (guard Eq(u0, 0)). Rewritten from the source: one attention call with a "
                "block-diagonal mask built from cu_seqlens, the same result.",
            ),
        )
        if model not in BORROWED_TOWERS
    ),
    *(
        spec
        for (model, _, _, owner, features_fingerprint, features_rewriter, rope_fingerprint,
             rope_index) in PACKED_VISION_MODELS
        for spec in (
            PatchSpec(
                id=f"transformers.vision.{model}_image_features_packed",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target=f"{owner}.get_image_features",
                mode="rewrite",
                replacement=f"autopatch.areas.packed_vision.packed:{features_rewriter}",
                requires=PACKED_VISION_REQUIRES,
                fingerprints=(features_fingerprint,),
                needs=_companions(model, "image_features_packed"),
                reason=f"{owner}.get_image_features splits the merged features per image with .tolist() sizes, "
                "which fixes the number of images; its caller concatenates them at once. Rewritten from the "
                "source: one element with every image's features"
                + (" (and per deepstack layer)." if "deepstack" in features_rewriter else "."),
            ),
            *((PatchSpec(
                id=f"transformers.vision.{model}_rope_index",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target=f"{ROPE_OWNERS.get(model, owner)}.get_rope_index",
                mode="route",
                replacement=f"autopatch.areas.packed_vision.packed:{rope_index}",
                requires=PACKED_VISION_REQUIRES,
                fingerprints=(rope_fingerprint,),
                needs=_companions(model, "rope_index"),
                reason=(f"{owner}.get_rope_index groups each sample's tokens with itertools.groupby over "
                        "mm_token_type_ids.tolist() and walks the groups in Python (guard Eq(u0, 0)). The same 3-axis "
                        "positions and deltas for every token at once, from cumulative sums over the batch."
                        if model not in ROPE_OWNERS else
                        f"{ROPE_OWNERS[model]}.get_rope_index walks each sample's tokens in Python, finding each "
                        "image with input_ids.tolist() (guard Eq(u0, 0)). For text and images, the same 3-axis "
                        "positions and deltas for every token at once; audio and video prompts keep the original."),
            ),) if rope_index else ()),
        )
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{row.model}_{row.name}",
            family="transformers",
            trigger=f"transformers.models.{row.model}.modeling_{row.model}",
            target=row.target,
            mode=row.mode,
            replacement="autopatch.areas.packed_vision."
            + (row.replacement if ":" in row.replacement else f"packed:{row.replacement}"),
            requires=PACKED_VISION_REQUIRES,
            fingerprints=(row.fingerprint,),
            needs=_companions(row.model, row.name),
            reason=row.reason,
        )
        for row in OWN_ROWS
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_placeholder_check_packed",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}.get_placeholder_mask",
            mode="rewrite",
            replacement="autopatch.areas.packed_vision.packed:"
            + PLACEHOLDER_REWRITERS.get(PLACEHOLDER_CHECK_STRICT[model], "packed_placeholder_check"),
            requires=PACKED_VISION_REQUIRES,
            fingerprints=(PLACEHOLDER_CHECK_STRICT[model],),
            reason=f"strict=True: {owner}.get_placeholder_mask formats the feature count into its check's "
            "message before the check runs; Dynamo fixes the image size to do so, without reporting it, and "
            "the program refuses other sizes. Rewritten from the source: the message is a lambda.",
        )
        for model, owner in (*((row.model, row.owner) for row in PACKED_VISION_MODELS), *PLACEHOLDER_OWNERS.items())
        if model in PLACEHOLDER_CHECK_STRICT
    ),
    # 4.57's Qwen2-VL, Qwen2.5-VL, Qwen3-VL and models of their sources: the same problems in 4.x sources (the rope
    # index by 4.x's rules).
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_{name}_4x",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=target,
            mode=mode,
            replacement=f"autopatch.areas.packed_vision.packed:{replacement}",
            requires=PACKED_VISION_REQUIRES_4X,
            fingerprints=(fingerprint,),
            needs=_companions(model, f"{name}_4x", PACKED_CORE_4X) + _own_4x(model, name),
            reason=reason,
        )
        for model, tower, attention, owner, fingerprints, rot_pos_emb, rope_index in PACKED_VISION_MODELS_4X
        for name, target, mode, replacement, fingerprint, reason in (
            ("rot_pos_emb", f"{tower}.rot_pos_emb", "route", rot_pos_emb, fingerprints[0],
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
            ("rope_index", f"{owner}.get_rope_index", "route", rope_index, fingerprints[4],
             ("Walks each sample's vision-start tokens with .tolist() and .item() (guard Eq(u0, 0)). "
              if not model.startswith("glm") else
              "Groups each sample's tokens with itertools.groupby over .tolist() (video frames between video-start "
              "and video-end tokens) and walks the groups with .item() (guard Eq(u0, 0)). ")
             + "The same 3-axis positions and deltas for every token at once, by 4.x's rules."),
        )
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{row.model}_{row.name}_4x",
            family="transformers",
            trigger=f"transformers.models.{row.model}.modeling_{row.model}",
            target=row.target,
            mode=row.mode,
            replacement=f"autopatch.areas.packed_vision.packed:{row.replacement}",
            requires=PACKED_VISION_REQUIRES_4X,
            fingerprints=(row.fingerprint,),
            needs=_companions(row.model, f"{row.name}_4x", PACKED_CORE_4X) + _own_4x(row.model, row.name),
            reason=row.reason,
        )
        for row in OWN_ROWS_4X
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_windows_packed",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target="get_vision_window_index",  # the module's binding of vision_utils'
            mode="route",
            replacement="autopatch.areas.packed_vision.packed:packed_window_index",
            requires=PACKED_VISION_REQUIRES,
            fingerprints=("420d88ca4b33",),
            reason="Qwen2.5-VL's windowed attention lists each image's windows in a loop over grid_thw.tolist(), "
            "which fixes the number of images. The same token order and window bounds at once: every token gets "
            "its window's number and place, one sort orders them.",
        )
        for model in WINDOWED_MODELS
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.{model}_interpolation_packed",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target="get_vision_interpolation_indices_and_weights",  # the module's binding of vision_utils'
            mode="rewrite",
            replacement="autopatch.areas.packed_vision.packed:packed_interpolation_starts",
            requires=PACKED_VISION_REQUIRES,
            fingerprints=("826f09883daa",),
            reason="The learned position grid's resampling is loop-free, but pads counts.cumsum(0)[:-1], a tensor "
            "one shorter than the number of images: torch fixes that number doing so (guard Eq(images - 1, 1)). "
            "Rewritten from the source: the same exclusive cumulative sum as cumsum - counts.",
        )
        for model in INTERPOLATION_MODELS
    ),
    *(
        spec
        for model, tower in PIXEL_SHUFFLE_TOWERS
        for spec in (
            PatchSpec(
                id=f"transformers.vision.{model}_pixel_shuffle_packed",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target="get_vision_pixel_shuffle_index",
                mode="route",
                replacement="autopatch.areas.packed_vision.packed:packed_pixel_shuffle_index",
                requires=PACKED_VISION_REQUIRES,
                fingerprints=("e7e80d68b10a",),  # 5.23.0
                needs=_companions(model, "pixel_shuffle_packed") + (f"transformers.vision.{model}_window_rows",),
                reason="Lists each image's merge x merge blocks of patches in a loop over grid_thw.tolist(), which "
                "fixes the number of images. The same index at once: every patch computes its slot, one scatter.",
            ),
            PatchSpec(
                id=f"transformers.vision.{model}_window_rows",
                family="transformers",
                trigger=f"transformers.models.{model}.modeling_{model}",
                target=f"{tower}.forward",
                mode="rewrite",
                replacement="autopatch.areas.packed_vision.packed:window_rows_stated",
                requires=PACKED_VISION_REQUIRES,
                fingerprints=("a54455a80877",),  # 5.23.0
                needs=_companions(model, "window_rows") + (f"transformers.vision.{model}_pixel_shuffle_packed",),
                reason=f"{tower}.forward reorders its patches by the window index, whose length the program reads "
                "from the grid (data), so every later size is unknown and the attention's `q_length > 1` stops "
                "the export. Rewritten from the source: the index is stated as long as the patches (eager needs "
                "it: it reorders every patch).",
            ),
        )
    ),
    *(
        PatchSpec(
            id=f"transformers.vision.kimi_k25_{name}_packed",
            family="transformers",
            trigger="transformers.models.kimi_k25.modeling_kimi_k25",
            target=target,
            mode="route",
            replacement=f"autopatch.areas.packed_vision.packed:{replacement}",
            requires=PACKED_VISION_REQUIRES,
            fingerprints=(fingerprint,),  # 5.23.0
            needs=_companions("kimi_k25", f"{name}_packed") + tuple(
                f"transformers.vision.kimi_k25_{other}_packed" for other in ("frame_index", "temporal_merge")
                if other != name),
            reason=reason,
        )
        for name, target, replacement, fingerprint, reason in (
            ("frame_index", "get_vision_frame_index", "packed_frame_index", "5a1389d9703b",
             "Kimi-K2.5's tower indexes its temporal table per patch in a loop over grid_thw.tolist(), which fixes "
             "the number of images. The same index at once: each patch's frame (+ 1 in a clip of several)."),
            ("temporal_merge", "get_vision_temporal_merge_index", "packed_temporal_merge_index", "fa4cf229eed8",
             "Kimi-K2.5's tower lists, image by image in a loop over grid_thw.tolist(), the patches each merged "
             "token pools. The same index at once; the clips' common frame count is read from the data."),
        )
    ),
    PatchSpec(
        id="transformers.vision.hyperclovax_vision_v2_features",
        family="transformers",
        trigger="transformers.models.hyperclovax_vision_v2.modeling_hyperclovax_vision_v2",
        target="HyperCLOVAXVisionV2Model.get_image_features",
        mode="rewrite",
        replacement="autopatch.areas.packed_vision.packed:hyperclovax_features_one_element",
        requires=("transformers>=5.13",),
        fingerprints=("1f873c87cdbf",),  # 5.23.0
        reason="HyperCLOVAX-Vision V2's get_image_features splits the merged features per image with `.tolist()` "
        "sizes (Qwen2-VL's split, through self.vision_model), which fixes the number of images; the caller "
        "concatenates them back. Rewritten from the source: one element holding every image's features.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        (
            'transformers.vision.qwen2_vl_*_packed', 'transformers.vision.qwen2_5_vl_*_packed',
            'transformers.vision.qwen3_vl_*_packed', 'transformers.vision.glm4v_*_packed',
            'transformers.vision.qwen3_5_*_packed', 'transformers.vision.qwen3_vl_moe_*_packed',
            'transformers.vision.qwen3_5_moe_*_packed', 'transformers.vision.cohere_compass_*_packed',
            'transformers.vision.glm4v_moe_*_packed', 'transformers.vision.glm_ocr_*_packed',
            'transformers.vision.glm46v_*_packed', 'transformers.vision.cosmos3_omni_*_packed',
            'transformers.vision.qwen2_vl_rope_index', 'transformers.vision.qwen2_5_vl_rope_index',
            'transformers.vision.qwen3_vl_rope_index', 'transformers.vision.glm4v_rope_index',
            'transformers.vision.qwen3_5_rope_index', 'transformers.vision.qwen3_vl_moe_rope_index',
            'transformers.vision.qwen3_5_moe_rope_index', 'transformers.vision.cohere_compass_rope_index',
            'transformers.vision.glm4v_moe_rope_index', 'transformers.vision.glm_ocr_rope_index',
            'transformers.vision.glm46v_rope_index', 'transformers.vision.cosmos3_omni_rope_index',
            'transformers.vision.qwen2_vl_*_4x', 'transformers.vision.qwen2_5_vl_*_4x',
            'transformers.vision.qwen3_vl_*_4x', 'transformers.vision.qwen3_vl_moe_*_4x',
            'transformers.vision.glm4v_*_4x', 'transformers.vision.glm4v_moe_*_4x', 'transformers.vision.glm5_next_*',
            'transformers.vision.dots3_note_*',
        ),
        "5.23 Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V and Qwen3.5 (both with Qwen2-VL's feature split and "
        "Qwen3-VL's rope index; Qwen3.5's text model also needs `transformers.qwen3_5.gated_delta_scan`), and "
        "eight models made of their sources (Qwen3-VL-MoE and Cohere's Compass: Qwen3-VL's; Qwen3.5-MoE: "
        "Qwen3.5's, with `transformers.qwen3_5_moe.gated_delta_scan`; GLM-4V-MoE and GLM-OCR: GLM-4V's, "
        "GLM-OCR's attention with query and key norms added; GLM-4.6V and Cosmos3-Omni build GLM-4V's and "
        "Qwen3-VL's towers themselves, whose rows serve them: theirs are the features and the rope index; "
        "GLM-5-Next: GLM-OCR's tower attention and Qwen2-VL's split, its text numbering positions with arange; "
        "dots.ocr 3: the same, its split by the tensor's own `split` method, one placeholder check for every "
        "modality), "
        'whose images are packed into one patch sequence: upstream reads `image_grid_thw` and '
        '`mm_token_type_ids` in Python (rotary positions per image: `_patch_positions_packed`; attention '
        'chunk by chunk per frame: `_attention_packed`; the features split per image: '
        "`_image_features_packed`; the language model's 3-axis positions grouped with "
        "`itertools.groupby`: `_rope_index`; Qwen2.5-VL's attention windows per image: `_windows_packed`; "
        "Qwen3-VL's position-grid resampling pads a tensor sized by the image count: "
        '`_interpolation_packed`), so the number of images, their sizes and the text are fixed. The same '
        'values by tensor arithmetic over all patches and tokens (one attention call with a '
        'block-diagonal mask). The number of images, their grids, the batch and the text length stay '
        'dynamic; give `pixel_values` a `4 * Dim(...)` size (four patches merge into one token). Strict '
        'export of all but Qwen2.5-VL also needs `_placeholder_check_packed`: Dynamo fixes the '
        "image size while formatting a check's message, and does not say so. On 4.57 each of the "
        "three, Qwen3-VL-MoE (Qwen3-VL's sources), GLM-4V and GLM-4V-MoE (one source) has `_4x` rows for the "
        'same problems in its own sources (rotary positions and a frequency '
        'table as long as the largest grid side, the per-frame attention, the feature split, a Python `if` '
        'on the placeholder count, and the rope index, '
        "computed by 4.x's rules: Qwen2.5-VL counts whole seconds per grid, GLM-4V finds a video's frames "
        "between its video-start and end tokens), plus Qwen2.5-VL's window "
        "list (`_windows_packed_4x`), Qwen3-VL's position-grid resampling in a loop over the images "
        "(`_position_grid_4x`), and GLM-4V's frame lengths handed to its position embeddings as a list "
        "(`_tower_lengths_4x`), each frame's size repeated in a loop there (`_position_embedding_4x`); "
        "GLM-4V-MoE's experts also need `transformers.moe.glm4v_moe`.",
    ),
    (
        ('transformers.vision.paddleocr_vl_*', 'transformers.vision.video_llama_3_*', 'transformers.vision.lfm3_vl_*'),
        "PaddleOCR-VL, Video-LLaMA-3 and LFM3-VL (5.23): towers of their own packed the Qwen2-VL way, taking the "
        "rows above (positions; PaddleOCR-VL's position-grid resampling; its rope index, Qwen2-VL's source; the "
        "feature split, Video-LLaMA-3's by a merge size per image; LFM3-VL's strict export, the placeholder "
        "message), with their attention in a loop form that also lists each frame's map (`_attention_packed`: one "
        "call with the block-diagonal mask; the maps, read only when attentions are asked for under eager "
        "attention, come as one map of the whole sequence). Each reads the grid image by image in code of its "
        "own: PaddleOCR-VL's projector concatenates each merge block's patches (`_merger_packed`: every merged "
        "token gathers them at once); Video-LLaMA-3 shrinks each image by its merge size with bilinear "
        "interpolation (`_merger_packed`: at that exact factor, the mean of the block's middle patches); LFM3-VL's "
        "tower hands its depthwise convolutions `grid_thw.tolist()` (`_tower_grid`: the tensor) and they raster "
        "each frame (`_conv_packed`: every patch sums its neighbours in the packed sequence). Their text models "
        "(but PaddleOCR-VL's) number positions with arange: no rope index row. Give Video-LLaMA-3's "
        "`pixel_values` a `Dim` of their own (an image merged 1x1, its processor's default, has any number of "
        "patches) and LFM3-VL's text at least 7 tokens (its convolution cache's length: a shorter prompt pads it).",
    ),
    (
        ('transformers.vision.exaone4_5_*_packed',),
        "EXAONE 4.5 (5.23): Qwen2.5-VL's tower, grouped key/value heads in its attention, and Qwen2-VL's feature "
        "split: the same four rows as Qwen2.5-VL's tower and features (positions, attention, windows, features); "
        "its text model numbers positions with arange, so there is no rope index row (its sliding-window layers use "
        "`transformers.cache.sliding_update`).",
    ),
    (
        ('transformers.vision.ernie4_5_vl_moe_*',),
        "ERNIE 4.5 VL MoE (5.23): Qwen2-VL's tower attention and positions, its rope index with a video's frames "
        "merged in pairs, the feature split through `self.vision_tower`: the rows above. Between the tower and the "
        "split, its resampler lists each image's frame pairs in a Python loop over the grid (`_resampler_packed`: "
        "each merged token finds its image and frame pair at once). Its text model's experts also need "
        "`transformers.moe.ernie4_5_vl_modality_experts`; give it `moe_mm_token_type_ids` as its processor does.",
    ),
    (
        ('transformers.vision.muse_spark_*', 'transformers.vision.muse_glimmer_*'),
        "Muse Spark and Muse Glimmer (5.23): Qwen2.5-VL's windows and Qwen3-VL's position-grid resampling in a "
        "tower of their own, run per patch (no merge before the windows), then `2 x 2` blocks of patches "
        "gathered by an index built image by image (`_pixel_shuffle_packed`: the same index by one scatter). "
        "Their windows, positions, attention, resampling and feature split take the rows above (the features "
        "are adapted and projected before the split); the tower reorders its patches by the window index, "
        "whose length the program reads from the grid, so `_window_rows` states it as long as the patches. Their "
        "text models number positions with arange: no rope index row.",
    ),
    (
        ('transformers.vision.kimi_k25_*',),
        "Kimi-K2.5 (5.23): the Muse towers' attention source and Qwen3-VL's position-grid resampling (bicubic "
        "there), taking the rows above (positions, attention, resampling, its feature split by the merge "
        "kernel's area); two loops over `grid_thw.tolist()` of its own, rewritten loop-free: each patch's row "
        "of the temporal table (`_frame_index_packed`) and the patches each merged token pools "
        "(`_temporal_merge_packed`: upstream needs every clip to have the same frame count, read from the data "
        "and checked). Its text model numbers positions with arange: no rope index row.",
    ),
    (
        ('transformers.vision.qwen2_5_omni_*', 'transformers.vision.qwen3_omni_moe_*'),
        "The Omni thinkers (5.23): Qwen2.5-Omni's is Qwen2.5-VL's tower with separate q/k/v projections and "
        "Qwen2-VL's feature split, Qwen3-Omni-MoE's Qwen3-VL's tower (its deepstack features split in place; its "
        "strict export needs the placeholder-message row): the same rows. Their rope indices walk text, images, "
        "video and audio 4.x's way in Python (`_rope_index`: for text and images, every token at once, an image's "
        "frames `position_id_per_seconds` apart, the deltas over the kept tokens, Qwen3-Omni's in float with "
        "dropped tokens at 0; prompts with audio or video keep the original, which still stops the export).",
    ),
    (
        ('transformers.vision.inkling2_*', 'transformers.vision.inkling_placeholder_count'),
        "Inkling 2 (5.23): PaddleOCR-VL's attention source (`_attention_packed`) in a tower of its own that puts a "
        "class token before each image, with vision_utils' positions and position-grid interpolation "
        "(`_patch_positions_packed`, `_interpolation_packed`) and the feature split in place "
        "(`_image_features_packed`). Its placeholder check selects the placeholders' embedding values to count "
        "them, a data-dependent size torch cannot equate with the features' (`_placeholder_count`: the same count, "
        "tokens times the width; the message a lambda for strict export). Its text model numbers positions with "
        "arange: no rope index row. Inkling's multimodal model (one patch volume per image token, not packed) has "
        "the same placeholder check (`transformers.vision.inkling_placeholder_count`).",
    ),
    (
        ('transformers.vision.cosmos3_edge_*',),
        "Cosmos3-Edge (5.23): a SigLIP 2 tower of its own packed the Qwen2-VL way. Its learned position grid is "
        "resampled to each image's size with an antialiased bilinear `F.interpolate` in a loop over the grid "
        "(`_positions_packed`: the filter's row and column weights for every patch at once, equal up to float "
        "rounding); its attention attends frame by frame (`_attention_packed`: one call with the block-diagonal "
        "mask); the feature split goes through its projector (`_image_features_packed`); its rope index is "
        "Qwen3-VL's (`_rope_index`); strict export also needs `_placeholder_check_packed`.",
    ),
    (
        ('transformers.vision.hunyuan_vl_*',),
        "HunYuan-VL (5.23): a tower of its own packed the Qwen2-VL way, reading the grid image by image in seven "
        "places, each rewritten loop-free: the attention's chunks (`_attention_packed`: one call with the "
        "block-diagonal mask, the tower's `attention_mask=None` taken out of `**kwargs`), the learned positions "
        "resampled per image with `F.interpolate` (`_patch_embed_packed`: vision_utils' bilinear taps for every "
        "patch, equal up to float rounding), the tower's per-image merge loop (`_tower_grid`: the merger gets the "
        "grid tensor; `_merger_packed`: every image's convolution, newline, begin and end tokens at once), the "
        "feature split (`_image_features_packed`), a Python `if` on the placeholder count (`_placeholder_check`) "
        "and its rope index's walk over the image spans (`_rope_index`: column, row and image ordinal on the last "
        "three axes, for every token at once).",
    ),
    (
        ('transformers.vision.radio_*', 'transformers.vision.nemotron_h_omni_*'),
        "Nemotron-H-Omni (5.23): its RADIO tower packs every image's patches into one sequence and reads "
        "`image_grid_hw` image by image: the learned position grid resampled per image with `F.interpolate` to a "
        "square as large as the longer side, then cut (`radio_embed_packed`: F.interpolate's taps, weights and "
        "fused sums for every patch at once, bit for bit on the CPU, and one scatter placing each image's class and "
        "register tokens), `cu_seqlens` passed only for more than one image (`radio_packed_every_count`: always), "
        "the attention's per-image chunks (`radio_attention_packed`: one call with the block-diagonal mask); the "
        "model's features split per image and pixel-shuffled in a loop (`nemotron_h_omni_image_features_packed`: "
        "every merged token gathers its 2 x 2 block, one element).",
    ),
    (
        ('transformers.vision.minicpmv4_7_*',),
        "MiniCPM-V 4.7 (5.23): a NaViT-style SigLIP tower of its own (every image's patches in one strip, "
        "`target_sizes` their grids), reading the grid image by image in six places, each rewritten loop-free: "
        "vision_utils' nearest-bucket positions (`_nearest_positions`), the attention's chunks (`_attention_packed`: "
        "one call with the block-diagonal mask), its window merger's windows (`_windows_packed`: Qwen2.5-VL's row) "
        "and the reorder by them (`_window_rows`: the index stated as long as the patches), the merger's 2 x 2 "
        "folds (`_merger_packed`: every block gathered at once) and its canvas rope index (`_rope_index`: every "
        "token at once for images without detail slices; slices are refused at run time, videos keep the "
        "original).",
    ),
    (
        ('transformers.vision.qwen4_exp_*',),
        "Qwen4-Exp (5.23): Qwen3.5's tower, feature split and rope index under its own names (the same sources, "
        "fingerprints alike): the same rows (positions, attention, position-grid resampling, features, rope index). "
        "Its text model also needs `transformers.qwen4_exp.gated_delta_scan` (linear-attention layers) and "
        "`transformers.masks.qwen4_exp_block_selection` (its indexer).",
    ),
    (
        ('transformers.vision.hyperclovax_vision_v2_features',),
        "HyperCLOVAX-Vision V2 splits its merged image features per image with Qwen2-VL's `.tolist()` sizes (read "
        "through `self.vision_model`), fixing the image count; its caller concatenates them straight back: one "
        "element holding every image's features instead, the same tensor once concatenated.",
    ),
)
