"""Tiny vision-language models whose get_placeholder_mask is Llava's (4.x; 5.0-5.11 another shared one), and their
prefill inputs: one definition for the tests and the benchmark catalogue.

    NAMES          Llava's family by name: ``build(name)``, ``prefill(name, ...)``
    llava          Llava itself (``build_llava``; its inputs are ``prefill("llava", ...)``), kept out of NAMES: its
                   own rows are proven apart from the family's shared mask
    gemma3         Gemma 3's VLM, whose image token is past its text vocabulary's randomly drawn ids
    IDEFICS        Idefics2, Idefics3 and SmolVLM: several images per sample
    sam            SAM: an image with point prompts (no language model)

One image per sample, IMAGE_TOKEN placeholders (IMAGE_TOKENS of them) after the first text token (PaliGemma: the
image first). Every vision tower is sized so an image gives exactly IMAGE_TOKENS features.
"""

import torch
import transformers

IMAGE_TOKEN, IMAGE_TOKENS = 127, 4
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, max_position_embeddings=256)
TOWER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=16)
COHERE2 = dict(TEXT, sliding_window=4, layer_types=["sliding_attention", "full_attention"])


def _configs():
    t = transformers
    return {
        "vipllava": lambda: t.VipLlavaConfig(
            vision_config=t.CLIPVisionConfig(**TOWER, patch_size=8, projection_dim=32),
            text_config=t.LlamaConfig(**TEXT), image_token_index=IMAGE_TOKEN, vision_feature_layers=[-2, -1],
            image_seq_length=IMAGE_TOKENS),
        "paligemma": lambda: t.PaliGemmaConfig(
            vision_config=t.SiglipVisionConfig(**TOWER, patch_size=8), text_config=t.GemmaConfig(**TEXT, head_dim=16),
            image_token_index=IMAGE_TOKEN, vocab_size=128, projection_dim=64, hidden_size=64),
        "aya_vision": lambda: t.AyaVisionConfig(
            vision_config=t.SiglipVisionConfig(**TOWER, patch_size=4), text_config=t.Cohere2Config(**COHERE2),
            image_token_index=IMAGE_TOKEN, downsample_factor=2),
        "internvl": lambda: t.InternVLConfig(
            vision_config=t.InternVLVisionConfig(**TOWER, patch_size=4), text_config=t.Qwen2Config(**TEXT),
            image_token_id=IMAGE_TOKEN, image_seq_length=IMAGE_TOKENS, downsample_ratio=0.5,
            vision_feature_layer=-1),  # other layers go through a vision_model attribute 4.57 does not have
        "got_ocr2": lambda: t.GotOcr2Config(
            vision_config=t.GotOcr2VisionConfig(hidden_size=32, output_channels=16, num_hidden_layers=2,
                                                num_attention_heads=4, image_size=32, patch_size=4, window_size=4,
                                                global_attn_indexes=[1], mlp_dim=64),
            text_config=t.Qwen2Config(**TEXT), image_token_index=IMAGE_TOKEN, image_seq_length=IMAGE_TOKENS),
        "cohere2_vision": lambda: t.Cohere2VisionConfig(
            vision_config=t.SiglipVisionConfig(**TOWER, patch_size=4), text_config=t.Cohere2Config(**COHERE2),
            image_token_id=IMAGE_TOKEN, downsample_factor=2, alignment_intermediate_size=64),
        "fuyu": lambda: t.FuyuConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, max_position_embeddings=256, patch_size=4,
                                     num_channels=3, image_token_id=IMAGE_TOKEN),
    }


MODEL_CLASS = {"vipllava": "VipLlavaForConditionalGeneration", "paligemma": "PaliGemmaForConditionalGeneration",
               "aya_vision": "AyaVisionForConditionalGeneration", "internvl": "InternVLForConditionalGeneration",
               "got_ocr2": "GotOcr2ForConditionalGeneration", "cohere2_vision": "Cohere2VisionForConditionalGeneration",
               "fuyu": "FuyuForCausalLM"}
NAMES = tuple(MODEL_CLASS)


def build(name):
    config = _configs()[name]()
    torch.manual_seed(0)
    return getattr(transformers, MODEL_CLASS[name])(config).eval()


def build_llava():
    """Llava: CLIP's tower (16 px images, 8 px patches: 4 features once CLS is dropped) on a Llama."""
    config = transformers.LlavaConfig(
        vision_config=transformers.CLIPVisionConfig(**TOWER, patch_size=8, projection_dim=32),
        text_config=transformers.LlamaConfig(**TEXT), image_token_index=IMAGE_TOKEN, image_seq_length=IMAGE_TOKENS)
    torch.manual_seed(0)
    return transformers.LlavaForConditionalGeneration(config).eval()


def prefill(name, batch, text_len, seed=0):
    """One image per sample for ``name`` (of NAMES, or "llava"): a first text token, the image's placeholders, then
    the rest of the text (PaliGemma: the image first)."""
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(0, IMAGE_TOKEN - 7, (batch, text_len), generator=g)
    image = torch.full((batch, IMAGE_TOKENS), IMAGE_TOKEN)
    ids = torch.cat([image, text] if name == "paligemma" else [text[:, :1], image, text[:, 1:]], dim=1)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if name == "fuyu":  # no vision tower: flattened 4x4x3 patches go through one Linear
        inputs["image_patches"] = torch.randn(batch, IMAGE_TOKENS, 48, generator=g)
    else:
        size = 32 if name == "got_ocr2" else 16
        inputs["pixel_values"] = torch.randn(batch, 3, size, size, generator=g)
    return inputs


# --- Idefics2, Idefics3, SmolVLM: several images per sample, pixel_values [batch, images, 3, 32, 32] -------------

IDEFICS = ("idefics2", "idefics3", "smolvlm")
IDEFICS_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, image_size=32,
                      patch_size=8)
IDEFICS_TOKENS = 4  # per image: Idefics2's 4 perceiver latents; Idefics3/SmolVLM's 16 patches shuffled by 2


def build_idefics(name):
    t = transformers
    if name == "idefics2":
        from transformers.models.idefics2.configuration_idefics2 import Idefics2VisionConfig

        config = t.Idefics2Config(
            vision_config=Idefics2VisionConfig(**IDEFICS_VISION).to_dict(),
            text_config=t.MistralConfig(**TEXT).to_dict(),
            perceiver_config=dict(hidden_size=64, resampler_n_latents=IDEFICS_TOKENS, resampler_depth=1,
                                  resampler_n_heads=4, resampler_head_dim=16, num_key_value_heads=2),
            image_token_id=IMAGE_TOKEN)
        model_class = t.Idefics2ForConditionalGeneration
    else:
        if name == "idefics3":
            from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig as Vision
        else:
            from transformers.models.smolvlm.configuration_smolvlm import SmolVLMVisionConfig as Vision
        config_class = t.Idefics3Config if name == "idefics3" else t.SmolVLMConfig
        config = config_class(vision_config=Vision(**IDEFICS_VISION).to_dict(),
                              text_config=t.LlamaConfig(**TEXT).to_dict(), image_token_id=IMAGE_TOKEN, scale_factor=2,
                              pad_token_id=0)
        model_class = t.Idefics3ForConditionalGeneration if name == "idefics3" else t.SmolVLMForConditionalGeneration
    torch.manual_seed(0)
    return model_class(config).eval()


def idefics_prefill(batch, text_len, images, seed=0):
    """``images`` per sample, their placeholders after the first text token; a full pixel mask per image."""
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(0, IMAGE_TOKEN - 7, (batch, text_len), generator=g)
    ids = torch.cat([text[:, :1], torch.full((batch, IDEFICS_TOKENS * images), IMAGE_TOKEN), text[:, 1:]], dim=1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "pixel_values": torch.randn(batch, images, 3, 32, 32, generator=g),
            "pixel_attention_mask": torch.ones(batch, images, 32, 32, dtype=torch.bool)}


def paligemma_padded_prefill(batch, text_len, seed):
    """PaliGemma's prefill with its first row left-padded by one token (the others start with a text token).
    Unpadded, its eager forward skips the all-ones mask and, Gemma's text config being bidirectional, attends both
    ways over the text, which no traced program does (upstream; README, known limits)."""
    inputs = prefill("paligemma", batch, text_len, seed)
    first = torch.randint(1, IMAGE_TOKEN - 7, (batch, 1), generator=torch.Generator().manual_seed(seed))
    first[0] = 0  # pad_token_id
    mask = torch.ones_like(first)
    mask[0] = 0
    return {**inputs, "input_ids": torch.cat([first, inputs["input_ids"]], 1),
            "attention_mask": torch.cat([mask, inputs["attention_mask"]], 1)}


# --- Gemma 3's VLM: SigLIP tower, 4 image tokens per image (16 px images, 4 px patches pooled to 2x2) ---------------

# Its own token ids at the top of a 300-token vocabulary (begin/end of image, image), above the text's random ids.
GEMMA3_IMAGE_TOKEN, GEMMA3_BOI, GEMMA3_EOI, GEMMA3_VOCAB = 299, 297, 298, 300
GEMMA3_TEXT_IDS = 290  # random text ids are drawn below this: never one of the special tokens


def build_gemma3():
    """A sliding layer (window 4, which the prefills are past) and a full one, as Gemma 3 alternates them."""
    vision = transformers.SiglipVisionConfig(**TOWER, patch_size=4)
    text = transformers.Gemma3TextConfig(vocab_size=GEMMA3_VOCAB, hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=16, sliding_window=4,
                                         layer_types=["sliding_attention", "full_attention"])
    config = transformers.Gemma3Config(vision_config=vision, text_config=text, mm_tokens_per_image=IMAGE_TOKENS,
                                       image_token_index=GEMMA3_IMAGE_TOKEN, boi_token_index=GEMMA3_BOI,
                                       eoi_token_index=GEMMA3_EOI)
    torch.manual_seed(0)
    return transformers.Gemma3ForConditionalGeneration(config).eval()


def gemma3_prefill(batch, text_len, seed):
    """One image per sample after the first text token, as ``prefill``."""
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(0, GEMMA3_TEXT_IDS, (batch, text_len), generator=g)
    ids = torch.cat([text[:, :1], torch.full((batch, IMAGE_TOKENS), GEMMA3_IMAGE_TOKEN), text[:, 1:]], dim=1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "pixel_values": torch.randn(batch, 3, 16, 16, generator=g)}


# --- SAM: a 64 px image (4x4 patches of 16), point prompts, two mask-decoder layers ---------------------------------

SAM_IMAGE = 64


def build_sam():
    """Window attention of 2 patches on layer 0 and global attention on layer 1: both of the tower's paths."""
    from transformers.models.sam import configuration_sam as c

    vision = c.SamVisionConfig(hidden_size=32, output_channels=32, num_hidden_layers=2, num_attention_heads=4,
                               image_size=SAM_IMAGE, patch_size=16, window_size=2, global_attn_indexes=[1],
                               num_pos_feats=16, mlp_dim=64)
    prompt = c.SamPromptEncoderConfig(hidden_size=32, image_size=SAM_IMAGE, patch_size=16, mask_input_channels=4)
    decoder = c.SamMaskDecoderConfig(hidden_size=32, mlp_dim=64, num_hidden_layers=2, num_attention_heads=4,
                                     iou_head_hidden_dim=32)
    torch.manual_seed(0)
    return transformers.SamModel(c.SamConfig(vision_config=vision.to_dict(), prompt_encoder_config=prompt.to_dict(),
                                             mask_decoder_config=decoder.to_dict())).eval()


def sam_inputs(batch, points, seed):
    """One prompt of ``points`` points per image, each labelled foreground or background at random."""
    g = torch.Generator().manual_seed(seed)
    return {"pixel_values": torch.randn(batch, 3, SAM_IMAGE, SAM_IMAGE, generator=g),
            "input_points": torch.rand(batch, 1, points, 2, generator=g) * SAM_IMAGE,
            "input_labels": torch.randint(0, 2, (batch, 1, points), generator=g)}
