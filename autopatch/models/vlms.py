"""Tiny vision-language models whose get_placeholder_mask is Llava's (4.x; 5.0-5.11 another shared one), and their
prefill inputs: one definition for the tests and the benchmark catalogue.

One image per sample, IMAGE_TOKEN placeholders (IMAGES_TOKENS of them) after the first text token (PaliGemma: the
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


def prefill(name, batch, text_len, seed=0):
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
