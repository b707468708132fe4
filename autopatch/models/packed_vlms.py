"""Tiny Qwen2-VL-family VLMs, whose images are packed into one patch sequence, and their prefill inputs: one
definition for the tests and any tool that builds them.

    NAMES_5    Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V and Qwen3.5 as transformers 5.13+ configures them, and eight
               models built from their sources: Qwen3-VL-MoE, Qwen3.5-MoE, Cohere's Compass, GLM-4V-MoE, GLM-OCR,
               GLM-4.6V and Cosmos3-Omni (GLM-4V's and Qwen3-VL's towers themselves), and EXAONE 4.5 (Qwen2.5-VL's
               tower with grouped key/value heads, a text model without a 3-axis rope index); PaddleOCR-VL,
               Video-LLaMA-3 (SigLIP towers packed the same way, one frame per patch; Video-LLaMA-3 takes a merge
               size per image), LFM3-VL (convolution and attention layers in its tower), ERNIE 4.5 VL MoE
               (Qwen2-VL's tower without a temporal patch, a resampler of its own, text and vision experts),
               Cosmos3-Edge (a SigLIP 2 tower packed the same way, its learned positions resampled per image) and
               Inkling 2 (pixels as one block per language-model token, its grid counted in tokens)
    NAMES_4    the three Qwen models, Qwen3-VL-MoE, GLM-4V and GLM-4V-MoE as 4.57 configures them (``<model>_4x``:
               the text settings and mrope elsewhere; GLM's videos between video-start and video-end tokens)

An image is a grid (frames, rows, columns) of 4x4-pixel patches, 2x2 of them merged into one language-model token.
Each sample holds one image after a first text token and a vision-start token; shorter samples are left-padded.
The traced and run sets differ in every size the packing reads: the number of images, their grids (frames, rows,
columns), the batch and the text length.
"""

import torch
import transformers
from torch.export import Dim

IMAGE, VIDEO, VISION_START = 120, 121, 122
VIDEO_START, VIDEO_END = 123, 124  # 4.x GLM-4V's rope index finds a video's frames between them
MERGE = 2  # spatial_merge_size: 2x2 patches make one language-model token
PATCH_DIM = 3 * 2 * 4 * 4  # channels * temporal_patch_size * patch_size**2: one flattened patch

NAMES_5 = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe", "cohere_compass",
           "glm4v_moe", "glm_ocr", "glm46v", "cosmos3_omni", "exaone4_5", "paddleocr_vl", "video_llama_3",
           "lfm3_vl", "ernie4_5_vl_moe", "cosmos3_edge", "inkling2")
NAMES_4 = tuple(f"{name}_4x" for name in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe"))

TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256}
TOKENS = {"image_token_id": IMAGE, "video_token_id": VIDEO, "vision_start_token_id": VISION_START}
# 4-pixel patches spanning 2 frames (the real towers' temporal patch), merged 2x2: small images still give several
# language-model tokens.
TOWER = {"depth": 2, "num_heads": 4, "patch_size": 4, "spatial_merge_size": MERGE, "temporal_patch_size": 2,
         "in_channels": 3}
# Multimodal RoPE: the head's 8 rotary pairs split over time, rows and columns (2, 2, 4).
MROPE = {"rope_type": "default", "mrope_section": [2, 2, 4], "rope_theta": 10000.0}
# The towers' own sizes: Qwen2-VL's tower is sized by embed_dim, the others by hidden_size into out_hidden_size.
QWEN2_TOWER = {**TOWER, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2}
OTHER_TOWER = {**TOWER, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64}
# Qwen2.5-VL: 2x2-token windows (a 4x8 image has two per frame), layer 1 attending fully, so both paths are taken.
QWEN2_5_TOWER = {**OTHER_TOWER, "window_size": 16, "fullatt_block_indexes": [1], "tokens_per_second": 2}
# Qwen3-VL: a 4x4 learned position grid resampled per image, one deepstack layer.
QWEN3_TOWER = {**OTHER_TOWER, "num_position_embeddings": 16, "deepstack_visual_indexes": [0]}
# Qwen3.5's text model: a linear-attention and a full-attention layer, half the head dims rotating.
QWEN3_5_TEXT = {**TEXT, "head_dim": 16, "layer_types": ["linear_attention", "full_attention"],
                "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
                "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                "rope_parameters": {**MROPE, "mrope_section": [2, 1, 1], "mrope_interleaved": True,
                                    "partial_rotary_factor": 0.5}}
# GLM-4V's text RoPE: half the head dims rotate (its class default), over time, rows and columns (2, 1, 1).
GLM_ROPE = {**MROPE, "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.5}
# The MoE variants' experts: 4, 2 per token, in every layer.
EXPERTS = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
# 4.57's GLM-4V: its placeholder ids, and the video-start and end tokens its rope index reads.
GLM_TOKENS_4X = {"image_token_id": IMAGE, "video_token_id": VIDEO, "image_start_token_id": VISION_START,
                 "video_start_token_id": VIDEO_START, "video_end_token_id": VIDEO_END}
# GLM-4V-MoE's experts: the class's first layer dense, then 4 routed experts (2 per token) and a shared one.
GLM_EXPERTS = {"n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1}


def _config(name):
    t = transformers
    if name == "qwen2_vl_4x":  # 4.57: the text settings at the top level, mrope in rope_scaling
        return t.Qwen2VLConfig(vision_config=QWEN2_TOWER, **TEXT, **TOKENS,
                               rope_scaling={"type": "mrope", "mrope_section": MROPE["mrope_section"]})
    if name == "qwen2_5_vl_4x":
        return t.Qwen2_5_VLConfig(
            vision_config=QWEN2_5_TOWER,
            text_config={**TEXT, "rope_scaling": {"type": "mrope", "mrope_section": MROPE["mrope_section"]}},
            **TOKENS)
    if name == "qwen3_vl_4x":
        return t.Qwen3VLConfig(
            vision_config=QWEN3_TOWER,
            text_config={**TEXT, "head_dim": 16, "rope_scaling": {"rope_type": "default", "mrope_interleaved": True,
                                                                 "mrope_section": MROPE["mrope_section"]}},
            **TOKENS)
    if name == "qwen3_vl_moe_4x":
        return t.Qwen3VLMoeConfig(
            vision_config=QWEN3_TOWER,
            text_config={**TEXT, **EXPERTS, "head_dim": 16,
                         "rope_scaling": {"rope_type": "default", "mrope_interleaved": True,
                                          "mrope_section": MROPE["mrope_section"]}},
            **TOKENS)
    if name in ("glm4v_4x", "glm4v_moe_4x"):  # half the head dims rotate (GLM-4V's checkpoints; GLM-4V-MoE's
        # class default), over time, rows and columns (2, 1, 1)
        rope = {"type": "default", "mrope_section": GLM_ROPE["mrope_section"]}
        if name == "glm4v_4x":
            return t.Glm4vConfig(vision_config={**OTHER_TOWER, "image_size": 16},
                                 text_config={**TEXT, "partial_rotary_factor": 0.5, "rope_scaling": rope},
                                 **GLM_TOKENS_4X)
        return t.Glm4vMoeConfig(vision_config={**OTHER_TOWER, "image_size": 16},
                                text_config={**TEXT, **GLM_EXPERTS, "rope_scaling": rope}, **GLM_TOKENS_4X)
    if name == "qwen2_vl":
        return t.Qwen2VLConfig(vision_config=QWEN2_TOWER, text_config={**TEXT, "rope_parameters": MROPE}, **TOKENS,
                               bos_token_id=0, eos_token_id=1, pad_token_id=0)
    if name == "glm4v":  # a 4x4 learned position table resampled per image; half the head dims rotate
        return t.Glm4vConfig(
            vision_config={**OTHER_TOWER, "image_size": 16}, text_config={**TEXT, "rope_parameters": GLM_ROPE},
            image_token_id=IMAGE, video_token_id=VIDEO, image_start_token_id=VISION_START)
    if name == "qwen3_5":  # a 4x4 learned position grid; text: a linear-attention and a full-attention layer
        return t.Qwen3_5Config(
            vision_config={**OTHER_TOWER, "num_position_embeddings": 16}, text_config=QWEN3_5_TEXT,
            image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START)
    if name == "glm4v_moe":  # GLM-4V's; the class's first layer dense, then 4 routed experts and a shared one
        return t.Glm4vMoeConfig(
            vision_config={**OTHER_TOWER, "image_size": 16},
            text_config={**TEXT, "rope_parameters": GLM_ROPE, **GLM_EXPERTS},
            image_token_id=IMAGE, video_token_id=VIDEO, image_start_token_id=VISION_START)
    if name == "glm_ocr":  # GLM-4V's tower with query and key norms; every head dim rotates (its class default)
        return t.GlmOcrConfig(
            vision_config={**OTHER_TOWER, "image_size": 16}, text_config={**TEXT, "rope_parameters": MROPE},
            image_token_id=IMAGE, video_token_id=VIDEO, image_start_token_id=VISION_START)
    if name == "glm46v":  # GLM-4V's tower and text model
        return t.Glm46VConfig(
            vision_config={**OTHER_TOWER, "image_size": 16}, text_config={**TEXT, "rope_parameters": GLM_ROPE},
            image_token_id=IMAGE, video_token_id=VIDEO, image_start_token_id=VISION_START)
    if name == "cosmos3_omni":  # Qwen3-VL's tower and text model
        return t.Cosmos3OmniConfig(
            vision_config=QWEN3_TOWER,
            text_config={**TEXT, "head_dim": 16, "rope_parameters": {**MROPE, "mrope_interleaved": True}}, **TOKENS)
    if name == "qwen3_5_moe":  # Qwen3.5's, with 4 experts (2 per token) and a shared one in each layer
        return t.Qwen3_5MoeConfig(
            vision_config={**OTHER_TOWER, "num_position_embeddings": 16},
            text_config={**QWEN3_5_TEXT, **EXPERTS, "shared_expert_intermediate_size": 32},
            image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START)
    if name == "qwen3_vl_moe":
        return t.Qwen3VLMoeConfig(
            vision_config=QWEN3_TOWER,
            text_config={**TEXT, **EXPERTS, "head_dim": 16, "rope_parameters": {**MROPE, "mrope_interleaved": True}},
            **TOKENS)
    if name == "cohere_compass":  # Qwen3-VL's tower; a Cohere text model, its RoPE given per layer type
        return t.CohereCompassConfig(
            vision_config=QWEN3_TOWER,
            text_config={**TEXT, "layer_types": ["full_attention"] * 2, "rope_parameters": {"full_attention": MROPE},
                         "bos_token_id": 0, "eos_token_id": 1},
            **TOKENS)
    if name == "exaone4_5":  # Qwen2.5-VL's tower with 2 key/value heads; EXAONE 4's text model (1-D positions,
        # one layer of each kind of its class's pattern: three sliding-window layers, then a full one)
        return t.Exaone4_5_Config(
            vision_config={**QWEN2_5_TOWER, "num_key_value_heads": 2},
            text_config={**TEXT, "model_type": "exaone4", "head_dim": 16,
                         "layer_types": ["sliding_attention", "full_attention"]},
            image_token_id=IMAGE, video_token_id=VIDEO)
    if name == "paddleocr_vl":  # a 4x4 learned position grid resampled per image; no temporal patch
        return t.PaddleOCRVLConfig(
            vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "patch_size": 4, "image_size": 16, "spatial_merge_size": MERGE},
            text_config={**TEXT, "head_dim": 16, "rope_parameters": {**MROPE, "mrope_section": [2, 3, 3]}},
            image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START)
    if name == "video_llama_3":  # a SigLIP tower with a merge size per image; a Qwen2 text model (1-D positions)
        return t.VideoLlama3Config(
            vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "patch_size": 4},
            text_config={**TEXT, "model_type": "qwen2"}, image_token_id=IMAGE, video_token_id=VIDEO)
    if name == "lfm3_vl":  # the tower's class pattern: two convolutions, an attention layer, one more convolution;
        # the text model's three kinds of layer, one each (its class's pattern: two convolutions, a full-attention
        # layer, a convolution, a sliding-window layer, ...)
        return t.Lfm3VlConfig(
            vision_config={**OTHER_TOWER, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2},
            text_config={**TEXT, "num_hidden_layers": 3, "head_dim": 16, "pad_token_id": 0, "bos_token_id": 1,
                         "eos_token_id": 1, "layer_types": ["conv", "full_attention", "sliding_attention"]},
            projector_hidden_size=64,
            image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START)
    if name == "ernie4_5_vl_moe":  # a tower without a temporal patch; the text classes' dense first layer, then
        # 4 text and 4 vision experts (2 per token) and a shared one; M-RoPE in its own order (height, width, time)
        # in the shares of its default [22, 22, 20]
        return t.Ernie4_5_VLMoeConfig(
            vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 4, "patch_size": 4,
                           "spatial_merge_size": MERGE, "in_channels": 3},
            text_config={**TEXT, "moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": [32, 32],
                         "moe_num_shared_experts": 1,
                         "rope_parameters": {"rope_type": "default", "mrope_section": [3, 3, 2],
                                             "rope_theta": 500000.0}},
            image_token_id=IMAGE, video_token_id=VIDEO, image_start_token_id=VISION_START, image_end_token_id=125,
            video_start_token_id=VIDEO_START, video_end_token_id=VIDEO_END)
    if name == "cosmos3_edge":  # a 4x4 learned position grid resampled per image (images of 4 to 8 patches a
        # side: kept and enlarged), no temporal patch; M-RoPE in the shares of its default [24, 20, 20]
        return t.Cosmos3EdgeConfig(
            vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "patch_size": 4, "num_patches": 16, "spatial_merge_size": MERGE},
            text_config={**TEXT, "head_dim": 16, "rope_parameters": {"rope_type": "default", "rope_theta": 1e8,
                                                                    "mrope_section": [3, 3, 2]}},
            projector_hidden_size=64, image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START,
            vision_end_token_id=125)
    if name == "inkling2":  # a 4x4 learned position grid; its text classes' two kinds of layer (a sliding-window
        # hybrid one, then a full one: the first and last of their five-and-one pattern) with 4 experts, 2 per token
        return t.Inkling2Config(
            vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "patch_size": 4, "spatial_merge_size": MERGE, "posemb_grid_size": 4,
                           "projection_hidden_dim": 64, "text_hidden_size": 64},
            text_config={**TEXT, "num_hidden_layers": 2, "head_dim": 16, "moe_intermediate_size": 32,
                         "n_routed_experts": 4, "num_experts_per_tok": 2, "eos_token_id": 1,
                         "layer_types": ["hybrid_sliding", "hybrid"]},
            image_token_id=IMAGE)
    if name == "qwen2_5_vl":
        return t.Qwen2_5_VLConfig(vision_config=QWEN2_5_TOWER, text_config={**TEXT, "rope_parameters": MROPE},
                                  **TOKENS)
    if name == "qwen3_vl":
        return t.Qwen3VLConfig(
            vision_config=QWEN3_TOWER,
            text_config={**TEXT, "head_dim": 16, "rope_parameters": {**MROPE, "mrope_interleaved": True}}, **TOKENS)
    raise KeyError(name)


MODEL_CLASS = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
               "qwen3_vl": "Qwen3VLForConditionalGeneration", "glm4v": "Glm4vForConditionalGeneration",
               "qwen3_5": "Qwen3_5ForConditionalGeneration", "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
               "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
               "cohere_compass": "CohereCompassForConditionalGeneration",
               "glm4v_moe": "Glm4vMoeForConditionalGeneration", "glm_ocr": "GlmOcrForConditionalGeneration",
               "glm46v": "Glm46VForConditionalGeneration", "cosmos3_omni": "Cosmos3OmniForConditionalGeneration",
               "exaone4_5": "Exaone4_5_ForConditionalGeneration",
               "paddleocr_vl": "PaddleOCRVLForConditionalGeneration",
               "video_llama_3": "VideoLlama3ForConditionalGeneration", "lfm3_vl": "Lfm3VlForConditionalGeneration",
               "ernie4_5_vl_moe": "Ernie4_5_VLMoeForConditionalGeneration",
               "cosmos3_edge": "Cosmos3EdgeForConditionalGeneration",
               "inkling2": "Inkling2ForConditionalGeneration"}


def build(name="qwen2_vl"):
    """The model ``name`` (of NAMES_5 or NAMES_4), random weights seeded the same way each time."""
    config = _config(name)
    torch.manual_seed(0)
    return getattr(transformers, MODEL_CLASS[name.removesuffix("_4x")])(config).eval()


def prefill(grids, text_len, seed, merges=None):
    """One image per sample (grid (frames, rows, columns) in patches) after a first text token and the
    vision-start token (4.x finds images by it), then the text; shorter samples are left-padded (attention
    mask 0). ``mm_token_type_ids`` marks the image tokens (5.x reads the token kinds from it). ``merges``: each
    image's merge size, given as ``image_merge_sizes`` (MERGE for every image, not given, by default)."""
    g = torch.Generator().manual_seed(seed)
    ids, kinds, pixels = [], [], []
    for (frames, rows, columns), merge in zip(grids, merges or [MERGE] * len(grids)):
        tokens = frames * rows * columns // merge**2
        text = torch.randint(2, 100, (text_len,), generator=g)
        ids.append(torch.cat([text[:1], torch.tensor([VISION_START]), torch.full((tokens,), IMAGE), text[1:]]))
        kinds.append(torch.cat([torch.zeros(2), torch.ones(tokens), torch.zeros(text_len - 1)]).int())
        pixels.append(torch.randn(frames * rows * columns, PATCH_DIM, generator=g))
    longest = max(len(i) for i in ids)

    def left_pad(rows_, fill_dtype):
        return torch.stack([torch.cat([torch.zeros(longest - len(r), dtype=fill_dtype), r.to(fill_dtype)])
                            for r in rows_])

    return {"input_ids": left_pad(ids, torch.long), "attention_mask": left_pad([torch.ones(len(i)) for i in ids],
                                                                                torch.long),
            "mm_token_type_ids": left_pad(kinds, torch.int), "pixel_values": torch.cat(pixels),
            "image_grid_thw": torch.tensor(grids), **({"image_merge_sizes": torch.tensor(merges)} if merges else {})}


#: The models that find images by their tokens, without mm_token_type_ids: 4.57's, and those without a rope index
#: (EXAONE 4.5, Video-LLaMA-3, LFM3-VL).
WITHOUT_TOKEN_TYPES = (*NAMES_4, "exaone4_5", "video_llama_3", "lfm3_vl", "inkling2")

#: The models that take a merge size per image (image_merge_sizes): each set's, the traced one first. Video-LLaMA-3's
#: processor merges images 1x1 (videos 2x2); the first run set merges one image 2x2 too.
MERGE_SIZES = {"video_llama_3": ((1, 1), (1, 2, 1), (1,))}


#: The models whose tower embeds one frame per patch (no temporal patch), pixels ``[patches, 3, 4, 4]``; ERNIE 4.5
#: VL's and Cosmos3-Edge's flattened, ``[patches, 48]``.
ONE_FRAME_PATCHES = ("paddleocr_vl", "video_llama_3")
FLAT_ONE_FRAME_PATCHES = ("ernie4_5_vl_moe", "cosmos3_edge")

#: The models whose processor also gives ``moe_mm_token_type_ids``, the tokens its vision experts take: the image's
#: and its start token (ERNIE 4.5 VL).
MOE_TOKEN_TYPES = ("ernie4_5_vl_moe",)

#: The models whose images have one frame, as their processors make them (4.57's ``_4x`` too): GLM-4V's tower
#: resamples its position grid by each frame's index (a two-frame image is misread in eager too); ERNIE 4.5 VL's
#: resampler pairs frames (a two-frame image gives half the tokens); Inkling 2 takes images.
ONE_FRAME_IMAGES = ("glm4v", "glm4v_moe", "glm_ocr", "glm46v", "ernie4_5_vl_moe", "inkling2")

#: The models that take one block of ``merge x merge`` patches per language-model token, channels last, and their
#: grid counted in tokens (Inkling 2): pixels ``[tokens, 8, 8, 3]``.
TOKEN_BLOCKS = ("inkling2",)


def for_model(name, inputs):
    """``inputs`` as the model ``name`` takes them (mm_token_type_ids only where forward reads it; a patch's first
    frame where the tower has no temporal patch)."""
    inputs = {k: v for k, v in inputs.items() if not (name in WITHOUT_TOKEN_TYPES and k == "mm_token_type_ids")}
    pixels = inputs["pixel_values"]
    shapes = not isinstance(pixels, torch.Tensor)  # the dynamic shapes
    if name in ONE_FRAME_PATCHES and not shapes:
        inputs["pixel_values"] = pixels.reshape(pixels.shape[0], 2, 3, 4, 4)[:, 0].contiguous()
    if name in FLAT_ONE_FRAME_PATCHES and not shapes:
        inputs["pixel_values"] = pixels.reshape(pixels.shape[0], 2, PATCH_DIM // 2)[:, 0].contiguous()
    if name in TOKEN_BLOCKS:
        if shapes:
            inputs["pixel_values"] = {0: Dim("merged")}
        else:
            side = MERGE * 4  # a block of merge x merge 4-pixel patches
            inputs["pixel_values"] = pixels.reshape(-1, 2, PATCH_DIM // 2)[:, 0].reshape(-1, side, side, 3)
            grid = inputs["image_grid_thw"]
            inputs["image_grid_thw"] = torch.cat([grid[:, :1], grid[:, 1:] // MERGE], dim=1)
    if name in MOE_TOKEN_TYPES:
        kinds = inputs["mm_token_type_ids"]
        inputs["moe_mm_token_type_ids"] = kinds if shapes else kinds.long() | (inputs["input_ids"] == VISION_START)
    return inputs


def traced(name):
    """The set a test traces with: two images of unequal grids."""
    return for_model(name, prefill([(1, 4, 4), (1, 4, 8)], text_len=5, seed=0, merges=_merges(name, 0)))


def others(name):
    """The sets a program is run at: other numbers of images, grids (a two-frame image, unequal rows), batches
    and text lengths. GLM-4V's have one frame per image, as its processor makes them (its tower's position
    resampling reads the grid of each frame's index, so a two-frame image is misread in eager too), as ERNIE 4.5
    VL's (ONE_FRAME_IMAGES)."""
    one_frame = name.removesuffix("_4x") in ONE_FRAME_IMAGES
    first = [(1, 4, 4), (1, 6, 4), (1, 8, 4)] if one_frame else [(1, 4, 4), (2, 4, 6), (1, 8, 4)]
    return [for_model(name, prefill(first, text_len=7, seed=1, merges=_merges(name, 1))),
            for_model(name, prefill([(1, 6, 6)], 3, seed=2, merges=_merges(name, 2)))]


def _merges(name, index):
    """The merge sizes of ``name``'s ``index``-th set (0: traced), None where it takes none."""
    return MERGE_SIZES[name][index] if name in MERGE_SIZES else None


#: Models whose text needs more than 4 tokens: LFM3's convolution cache holds 7 steps (conv_L_cache), a shorter
#: prompt pads it (a branch).
SEQ_MIN = {"lfm3_vl": 7}


def dynamic_shapes(name):
    """Everything the packing reads dynamic: batch, text length, merged patches and images. The text is at least 4
    long: Qwen3.5's prompt shorter than its convolution kernel (4) pads the linear-attention cache's state, a
    branch."""
    batch, seq, images = Dim("batch"), Dim("seq", min=SEQ_MIN.get(name, 4)), Dim("images")
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq},
              "mm_token_type_ids": {0: batch, 1: seq}, "pixel_values": {0: MERGE**2 * Dim("merged")},
              "image_grid_thw": {0: images}}
    if name in MERGE_SIZES:  # an image merged 1x1 may have any number of patches
        shapes.update(pixel_values={0: Dim("patches")}, image_merge_sizes={0: images})
    return for_model(name, shapes)
