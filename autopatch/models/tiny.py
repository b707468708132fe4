"""A tiny model for every architecture transformers ships (issue 16's sweep): built offline from the config class's
own defaults, shrunk, random weights, nothing downloaded.

    python -m autopatch.models.tiny --check [--kinds causal vlm ...] [--only llama gemma3 ...] [--timeout 180]

builds each architecture in a forked child, runs eager on input set 0 of each of its steps and prints one line per
architecture and a count per kind.

Shrink rules (``shrink``): sizes only.  Whatever chooses a code path keeps the default config's value:
``sliding_window``, ``layer_types`` and every other per-layer pattern, ``max_position_embeddings``, rope parameters,
the attention implementation, ``use_sliding_window``, flags and strings.

* Sizes are set by attribute name (``SIZES``): hidden 64, 4 heads of 16, 2 kv heads (1 stays 1: multi-query; as
  many as the heads stay as many: multi-head), feed-forward 128 (32 for an expert's), at most 4 experts and 2 per
  token, MLA ranks and rope/nope/value head dims, state-space state and head sizes.  A dimension the model derives
  from others (``rotary_dim`` of GPT-J and CodeGen, a mamba head's size) keeps its ratio to what it derives from.
* Layers: the real model's first ``own_depth`` layers (at least 2), so that every per-layer pattern keeps every kind
  of layer it has (Gemma 3's five sliding and one full layer need 6); lists with one entry per layer are cut to
  them, entries that are sizes shrunk one by one; lists of layer indices (a hybrid's attention layers) keep the
  indices below the new depth, the depth grown until the first of them is in.
* Vocabulary: strictly above every special token id of the whole config tree (``*_token_id``, ``*_token_index``,
  lists of them).  It stays ``max(128, highest id + 1)`` while that is small (``KEEP_VOCAB``); above that the ids
  past 128 are moved, in order, to 128, 129, ... (the same old id gets the same new id in every sub-config), since
  the config is the only place the model reads them from.
* Sub-configs (``text_config``, ``vision_config``, ``audio_config``, ``encoder``, ``decoder``, any attribute that
  is a config) are shrunk first, then the config is rebuilt from its own constructor arguments so that what its
  constructor derives (MLA's ``qk_head_dim``, Zamba2's mamba heads, Jamba's block pattern) follows the new sizes.
* Vision towers keep their patch size; the image is 4 patches a side (16 patches), so that after a 2x2 merge or a
  pooling there still are tokens; a token count the model reads from the config (``mm_tokens_per_image``,
  ``image_seq_length``) is scaled by as much as the patch count was.

Inputs (``inputs``) come from ``builders`` (prefill, decode from the model's own eager prefill, seq2seq,
left padding).  A vision-language model gets one image per sample (2, 3 and 4 samples, texts of 5, 7 and 9
tokens) in the layout its forward's parameters name, as its processor would give it: flattened patches and
``image_grid_thw`` (Qwen2-VL and kin), anyres tiles and ``image_sizes`` counted by the model's own
``image_size_to_num_patches`` (LLaVA-NeXT), tiles with ``aspect_ratio_ids`` and a cross-attention mask (Mllama),
patch sequences with ``spatial_shapes`` (SigLIP 2 towers), numbered ``flattened_patches`` (Pix2Struct), an images
axis with ``pixel_attention_mask`` (Idefics 2/3); where several layouts fit the names, the model's own
``get_image_features`` picks the first it takes, and its output says how many placeholders each image needs, so
that no processor file is needed.  Layouts no parameter name tells apart (MiniCPM-V's patch strips, Fuyu's patch
rows) are in one table, ``IMAGE_LAYOUTS``; what a default config leaves incomplete (None sizes, a missing rope
theta or layer pattern) is in ``OVERRIDES``, each entry saying why.  The shrink keeps what these layouts read
consistent: LLaVA-NeXT's grid pinpoints scale with the tower's image size, M-RoPE sections fit the tiny head, a
projector's feature layers stay within the tiny tower.

This module imports torch and transformers lazily.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import sys

from . import builders

def first_line(exc: BaseException) -> str:
    """An error in one line: its type and the first line of its message, at most 300 characters."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}"[:300]


KINDS = ("causal", "seq2seq", "vlm", "speech", "encoder")

MAPPINGS = {
    "causal": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",),
    "seq2seq": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",),
    "vlm": ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES"),
    "speech": ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",),
    # one representative head per encoder architecture: the masked LM, else sequence classification
    "encoder": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
}

PARAMS_BUDGET = 30_000_000

HIDDEN, HEADS, HEAD_DIM, KV_HEADS, FFN, EXPERT_FFN = 64, 4, 16, 2, 128, 32
VOCAB = 128
# Largest vocabulary kept as it is to hold the special ids (65536 x 64 = 4M parameters per embedding matrix).
KEEP_VOCAB = 65536
PATCHES_PER_SIDE = 4
# A robot policy's cameras (PI0's checkpoints take up to three: a base view and two wrists)
CAMERAS = 2
PATCH_RATIO = "_tiny_patch_ratio"  # left on a shrunk vision config for its parent's token counts, then removed
FULL_HIDDEN = "_tiny_full_hidden"  # likewise its default hidden size, for its parent's widths derived from it
MARKS = (PATCH_RATIO, FULL_HIDDEN)


@dataclasses.dataclass(frozen=True)
class Arch:
    model_type: str
    kind: str
    class_name: str
    mapping: str


class BuildError(RuntimeError):
    """An architecture that cannot be built or driven, with a one-line reason."""


# ---------------------------------------------------------------------------------------------------------------
# which architectures
# ---------------------------------------------------------------------------------------------------------------


def _mapping(name: str) -> dict:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, name, None) or {}


def architectures(kinds=KINDS) -> list:
    """Every (model type, kind) of transformers' auto mappings; encoders only for model types of no other kind."""
    found: dict = {}
    for kind in KINDS:
        if kind == "encoder":
            continue
        for mapping in MAPPINGS[kind]:
            for model_type, classes in _mapping(mapping).items():
                found.setdefault((kind, model_type), Arch(model_type, kind, _first(classes), mapping))
    taken = {model_type for _, model_type in found}
    for mapping in MAPPINGS["encoder"]:
        for model_type, classes in _mapping(mapping).items():
            if model_type not in taken:
                found.setdefault(("encoder", model_type), Arch(model_type, "encoder", _first(classes), mapping))
    return sorted((arch for arch in found.values() if arch.kind in kinds),
                  key=lambda arch: (KINDS.index(arch.kind), arch.model_type))


def architecture(model_type: str, kind: str):
    """The architecture of ``model_type`` with a ``kind`` head in this transformers, or None."""
    return next((arch for arch in architectures((kind,)) if arch.model_type == model_type), None)


def _first(classes) -> str:
    return classes[0] if isinstance(classes, (list, tuple)) else classes


# ---------------------------------------------------------------------------------------------------------------
# shrinking a config
# ---------------------------------------------------------------------------------------------------------------

# Attribute name -> tiny value (sizes only).  Set only where the config holds an int (not a bool, not None).
SIZES = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "embed_dim", "embedding_size", "dim", "d_embed",
                     "word_embed_proj_dim", "projection_dim", "text_embed_dim", "vision_embed_dim",
                     "hidden_dim", "output_channels", "vision_hidden_size", "text_hidden_size",
                     "audio_hidden_size", "encoder_hidden_size", "decoder_hidden_size", "mm_hidden_size",
                     "proj_dim", "projector_hidden_size", "d_latent", "emb_dim", "hidden_size_global",
                     "embedding_dim", "out_hidden_size", "vision_output_dim",
                     # adapters that must equal their tower's or the text's hidden size (dots.ocr 3 validates
                     # it), an expert stack's own width (Muse Spark), a VQ model's generation embedding (Janus),
                     # a Perceiver's latent width
                     "adapter_in_dim", "adapter_out_dim", "adapter_input_size", "moe_hidden_size",
                     "image_token_embed_dim", "d_latents", "backbone_hidden_size",
                     # Gemma 4 Unified's patch embedder (its width, and its projection's)
                     "mm_embed_dim", "output_proj_dims",
                     # Dia's decoder cross-attends to its encoder's states, of the encoder's width
                     "cross_hidden_size",
                     # PP-FormulaNet's convolution after its encoder takes the encoder's output_channels
                     "post_conv_in_channels"),
                    HIDDEN),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
                     "decoder_attention_heads", "attention_heads", "num_attention_heads_decoder",
                     "encoder_num_attention_heads", "decoder_num_attention_heads", "speech_encoder_attention_heads",
                     "t2u_encoder_attention_heads", "t2u_decoder_attention_heads", "linear_num_heads",
                     "num_self_attention_heads", "num_cross_attention_heads", "cross_num_attention_heads"), HEADS),
    **dict.fromkeys(("head_dim", "d_kv", "kv_channels", "d_head", "attention_head_dim", "global_head_dim",
                     "mamba_headdim", "linear_key_head_dim", "linear_value_head_dim", "linear_head_dim", "v_head_dim",
                     "hidden_size_per_layer_input", "cross_head_dim"), HEAD_DIM),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner",
                     "mlp_dim", "d_inner", "ffn_hidden_size", "dense_intermediate_size",
                     "projector_intermediate_size", "text_intermediate_size", "vision_intermediate_size"), FFN),
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
                     "shared_intermediate_size", "moe_ffn_hidden_size", "expert_dim", "expert_ffn_hidden_size",
                     "shared_experts_intermediate_size"), EXPERT_FFN),
    "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "index_head_dim": 16, "index_n_heads": 4,
    **dict.fromkeys(("state_size", "ssm_state_size", "mamba_d_state", "d_state"), 8),
    **dict.fromkeys(("time_step_rank", "mamba_dt_rank", "dt_rank"), 8),
    "mamba_n_heads": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "max_source_positions": 32,  # an audio encoder's input length (Whisper takes exactly twice as many frames)
    # Convolution stacks whose width doubles stage by stage from a base (VQ-VAEs, VibeVoice's and Encodec's audio
    # tokenizers: 32 x 2^6 = 2048 channels at the bottom): a small base; 32 where GroupNorm's 32 groups divide it
    "num_filters": 4, "base_channels": 32, "latent_channels": 32,
    "num_embeddings": 256,  # a VQ codebook (16384 x the embedding, and the image generation head's vocabulary)
    "num_latents": 16,  # Perceiver's latent array: its length is a size, as a sequence of tokens
    # CANINE's local attention chunk (128 of its 2048 characters): several chunks, the last one partial, at the
    # catalogue's lengths, as at its real ones
    "local_transformer_stride": 8,
}
# Sizes that only ever shrink: a default already below the tiny value (Emu3's 4 latent channels) stays.
AT_MOST = ("max_source_positions", "num_filters", "base_channels", "latent_channels", "num_embeddings", "num_latents",
           "local_transformer_stride")
# Per-stage widths of a convolution pyramid (Muse Spark's audio tower: 256, 512, 1024, 2048): the same ratios, the
# widest HIDDEN.  Per-stage block counts (``depths``): at most 2 each, a shifted-window pair's worth.
STAGE_WIDTHS = ("hidden_sizes", "downsample_channels")  # (DeepSeek-OCR 2: SAM neck to the encoder width)
STAGE_DEPTHS = ("depths",)
KV_HEAD_NAMES = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num",
                 "encoder_num_key_value_heads", "decoder_num_key_value_heads", "cross_num_key_value_heads")
HEAD_NAMES = ("num_attention_heads", "n_head", "n_heads", "num_heads")
LAYER_NAMES = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers", "num_encoder_layers",
               "encoder_layers", "decoder_layers", "text_num_hidden_layers", "vision_num_hidden_layers",
               "encoder_num_hidden_layers", "decoder_num_hidden_layers", "speech_encoder_layers",
               "num_self_attends_per_block", "depth")
EXPERT_NAMES = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts",
                "zero_expert_num")
TOPK_NAMES = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "router_topk", "moe_k", "top_k_experts")
GROUP_NAMES = ("n_group", "topk_group", "n_groups", "mamba_n_groups", "num_groups", "num_expert_group")
# An int that says how many of the first layers are of one kind (dense before MoE): a per-layer pattern.
LEADING_LAYER_COUNTS = ("first_k_dense_replace", "num_dense_layers", "first_dense_layers", "moe_layer_start_index")
# Sizes some default configs leave None although their model reads them as ints (Nemotron's kv heads, Hunyuan's
# head_dim, DeepSeek-V2's experts per token): given the tiny value.  Other None sizes mean "off" (q_lora_rank).
NONE_MEANS_UNSET = KV_HEAD_NAMES + TOPK_NAMES + ("head_dim",)
# Expert sizes a default config leaves None although its model builds the mixture in every layer (DiffusionGemma's
# router reads num_experts): given tiny values, unless a flag of the config turns the mixture off (Gemma 4's
# enable_moe_block=False leaves them None and builds no experts).
NONE_EXPERT_SIZES = {"num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4,
                     "moe_intermediate_size": EXPERT_FFN}
MOE_FLAGS = ("enable_moe_block", "use_moe", "enable_moe")
# Flags whose default path needs CUDA kernels (Jamba's on 4.x refuses the CPU): the one path a CPU has.
CPU_PATHS = {"use_mamba_kernels": False}
SPECIAL_SUFFIXES = ("token_id", "token_index", "token_ids", "token_idx")
# Token counts the model reads from the config, scaled with the tower's patch count.
IMAGE_TOKEN_COUNTS = ("mm_tokens_per_image", "image_seq_length", "num_image_tokens", "image_token_len")


def _is_config(value) -> bool:
    from transformers import PretrainedConfig

    return isinstance(value, PretrainedConfig)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _stored(config) -> dict:
    """The config's stored attributes (``vars``): reading them does not go through transformers 5's per-layer
    attribute checks, which refuse a global read of an attribute that differs between layers."""
    return vars(config)


def sub_configs(config) -> list:
    return [(name, value) for name, value in list(_stored(config).items()) if _is_config(value)]


def _tree(config):
    yield config
    for _, child in sub_configs(config):
        yield from _tree(child)


def special_ids(config) -> set:
    """Every special token id held anywhere in the config tree."""
    ids = set()
    for node in _tree(config):
        for name, value in _stored(node).items():
            if not name.endswith(SPECIAL_SUFFIXES):
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            ids.update(v for v in values if _is_int(v) and v >= 0)
    return ids


def shrink(config):
    """``config`` shrunk in place (see the module docstring) and returned."""
    import transformers

    for name, klass in OVERRIDES.get(getattr(config, "model_type", ""), {}).get("_sub_configs", {}).items():
        if getattr(config, name, None) is None:  # before the tree is walked, so that it is shrunk with the rest
            setattr(config, name, getattr(transformers, klass)())
    for node in _tree(config):  # special ids a default config lacks, given before the vocabulary is planned
        for name, value in OVERRIDES.get(getattr(node, "model_type", ""), {}).get("_ids", {}).items():
            if _stored(node).get(name) is None:
                _set(node, name, value)
    remap = _vocab_plan(config)
    _shrink_node(config, remap)
    _vocabulary_map(config)
    for node in _tree(config):
        for mark in MARKS:
            _stored(node).pop(mark, None)
    return config


# Models that turn their VQ model's image codes into text tokens by a vocabulary map a default config leaves None
# (each checkpoint's tokenizer gives it): model type -> (name of code i, name of the end-of-line token or None).
VOCABULARY_MAPS = {
    "chameleon": (lambda i: "IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(i)) + "Z", None),
    "emu3": (lambda i: f"<|visual token{i:06d}|>", "<|extra_200|>"),
}


def _vocabulary_map(config) -> None:
    """A tiny vocabulary map: every code of the (shrunk) VQ codebook a text token past the vocabulary, then the
    ``<image>`` placeholder (and Emu3's end-of-line token), the vocabulary grown to hold them."""
    names = VOCABULARY_MAPS.get(getattr(config, "model_type", ""))
    vq = _stored(config).get("vq_config")
    if names is None or _stored(config).get("vocabulary_map") is not None or not _is_config(vq):
        return
    codes = _stored(vq).get("num_embeddings") or _stored(vq).get("codebook_size")
    text = _stored(config).get("text_config") if _is_config(_stored(config).get("text_config")) else config
    base = text.vocab_size
    found = {names[0](i): base + i for i in range(codes)}
    found["<image>"] = base + codes
    if names[1]:
        found[names[1]] = base + codes + 1
    _set(config, "vocabulary_map", found)
    _set(config, "image_token_id", found["<image>"])
    _set(text, "vocab_size", base + len(found))


def _vocab_plan(config) -> dict:
    """{"vocab": tiny vocab size, "ids": {old id: new id}} for the whole tree (ids move only when keeping them would
    make the vocabulary big)."""
    ids = special_ids(config)
    top = max(ids, default=0) + 1
    if top <= KEEP_VOCAB:
        return {"vocab": max(VOCAB, top), "ids": {}}
    moved = {old: VOCAB + rank for rank, old in enumerate(sorted(i for i in ids if i >= VOCAB))}
    return {"vocab": VOCAB + len(moved), "ids": moved}


def _shrink_node(config, remap: dict) -> None:
    for _, child in sub_configs(config):
        _shrink_node(child, remap)
    stored = _stored(config)
    per_layer = _take_per_layer_overrides(config)
    before = dict(stored)
    full_depth = builders.layer_count(config)
    depth = max(_tiny_depth(config), _override_depth(per_layer, full_depth or 0),
                OVERRIDES.get(getattr(config, "model_type", ""), {}).get("_depth", 0))
    shared = before.get("num_kv_shared_layers")
    if _is_int(shared) and 0 < shared and full_depth:
        # The last layers reuse the cache of the last earlier layer of their kind: the pattern twice, the second
        # copy sharing, so that every kind of layer has one to share from.
        unshared, depth = depth, min(full_depth, 2 * depth)
    _set_sizes(config, before, depth)
    if _is_int(shared) and 0 < shared and full_depth:
        _set(config, "num_kv_shared_layers", depth - unshared)
    _set_vocab(config, remap)
    for name, value in CPU_PATHS.items():
        if name in stored:
            _set(config, name, value)
    _keep_ratios(config, before)
    _shrink_vision(config, before)
    if full_depth and depth and depth < full_depth:
        _cut_per_layer(config, full_depth, depth)
    _rebuild(config, _tiny_overrides(per_layer, depth))
    _set_mrope(config)
    _clamp_feature_layers(config)
    layers = _stored(config).get("intermediate_layers_indices")
    if _is_int(_stored(config).get("vision_output_dim")) and isinstance(layers, (list, tuple)):
        # Mllama: the tower's output is its last layer and each kept intermediate one, concatenated
        _set(config, "vision_output_dim", HIDDEN * (1 + len(layers)))
    override = OVERRIDES.get(getattr(config, "model_type", ""), {})
    for name, value in override.items():
        if not name.startswith("_"):
            node, _, attr = name.rpartition(".")  # "attn_config.rope_theta": an attribute of a sub-config
            target = getattr(config, node) if node else config
            # a function: the new value from the shrunk one (Zamba's layer kinds, named per version)
            setattr(target, attr, value(getattr(target, attr)) if callable(value) else value)
    for name, value in override.get("_if_unset", {}).items():
        if getattr(config, name, None) is None:
            setattr(config, name, value)
    for name, value in override.get("_ids", {}).items():  # again: a rebuild drops what the constructor does not take
        if getattr(config, name, None) is None or name not in _stored(config):
            _set(config, name, remap["ids"].get(value, value))


def _tiny_depth(config) -> int:
    """The first layers that hold every kind of layer of every pattern: the config's lists (``own_depth``), its
    leading-dense counts and the first index of each list of layer indices."""
    depth = builders.own_depth(config)
    full = builders.layer_count(config) or 0
    stored = _stored(config)
    for name in LEADING_LAYER_COUNTS:
        value = stored.get(name)
        if _is_int(value) and 0 < value < full:
            depth = max(depth, value + 1)
    for name, value in stored.items():
        indices = _layer_indices(value, full)
        if indices:
            depth = max(depth, min(indices) + 1)
    return min(depth, builders.MAX_DEPTH)


def _layer_indices(value, full: int) -> list:
    """``value`` when it is a short list of distinct increasing layer indices (not a per-layer list)."""
    if not isinstance(value, (list, tuple)) or not value or len(value) >= full or full < 2:
        return []
    if not all(_is_int(v) and 0 <= v < full for v in value) or list(value) != sorted(set(value)):
        return []
    return list(value)


def _set(config, name, value) -> None:
    try:
        setattr(config, name, value)
    except Exception:  # a read-only property or a validator that wants the old value: the rebuild decides
        _stored(config)[name] = value


def _tiny_value(name: str, current, depth: int):
    """The tiny value of attribute ``name`` (``current`` is its default), or None to keep it."""
    if name in LAYER_NAMES:
        return max(2, depth) if current > max(2, depth) else max(current, depth)
    if name in KV_HEAD_NAMES:
        return current if current <= 1 else KV_HEADS
    if name in EXPERT_NAMES:
        return min(current, 4)
    if name in TOPK_NAMES:
        return min(current, 2)
    if name in GROUP_NAMES:
        return 1
    if name == "n_shared_experts":
        return min(current, 1)
    if name in SIZES:
        return min(current, SIZES[name]) if name in AT_MOST else SIZES[name]
    if name.endswith("_intermediate_size") or name.endswith("_ffn_dim"):
        return EXPERT_FFN if ("moe" in name or "expert" in name) else FFN
    return None


def _set_sizes(config, before: dict, depth: int) -> None:
    heads = next((before[n] for n in HEAD_NAMES if _is_int(before.get(n))), None)
    mixture_off = any(before.get(flag) is False for flag in MOE_FLAGS)
    for name, current in before.items():
        if current is None and name in NONE_MEANS_UNSET:
            _set(config, name, SIZES.get(name, KV_HEADS if name in KV_HEAD_NAMES else 2))
        elif current is None and name in NONE_EXPERT_SIZES and not mixture_off:
            _set(config, name, NONE_EXPERT_SIZES[name])
        elif _is_int(current) and current == 0 and name in SIZES:
            continue  # a size of 0 turns its part off (Gemma 4 assistant's per-layer inputs): off it stays
        elif _is_int(current):
            value = _tiny_value(name, current, depth)
            own_heads = before.get(name.replace("key_value_heads", "attention_heads"), heads)  # Moonshine's
            if name in KV_HEAD_NAMES and own_heads is not None and current == own_heads:
                value = HEADS  # multi-head attention stays multi-head
            if value is not None and value != current:
                _set(config, name, value)
        elif isinstance(current, (list, tuple)) and current and all(_is_int(v) for v in current):
            # a size given per layer (Gemma 3n's intermediate sizes): every entry tiny
            value = _tiny_value(name, max(current), depth)
            if name in STAGE_WIDTHS and max(current) > HIDDEN:
                _set(config, name, type(current)(max(1, v * HIDDEN // max(current)) for v in current))
            elif name in STAGE_DEPTHS:
                _set(config, name, type(current)(min(v, 2) for v in current))
            elif name == "axial_pos_embds_dim":  # Reformer: the axial position parts add up to the hidden size
                _set(config, name, type(current)(HIDDEN * v // sum(current) for v in current))
            elif value is not None and name not in LAYER_NAMES:
                _set(config, name, type(current)(value for _ in current))


def _set_vocab(config, remap: dict) -> None:
    stored = _stored(config)
    for name, value in list(stored.items()):
        vocab = "vocab_size" in name or name.endswith("_vocab")  # vocab_size_per_layer_input, a hash vocab
        if vocab and "type_vocab" not in name and _is_int(value) and value:  # (0: no such embedding)
            _set(config, name, remap["vocab"])
        elif name == "vocab_size" and value is None and not sub_configs(config):
            _set(config, name, remap["vocab"])  # ESM: no default vocabulary (each checkpoint names its own)
        elif name in IMAGE_TOKEN_NAMES and value is None and ("num_query_tokens" in stored
                                                               or config.model_type in NO_DEFAULT_IMAGE_TOKEN):
            # BLIP-2 and InstructBLIP: the checkpoint (not the default config) names the token the processor
            # repeats once per query token; the tiny one takes the vocabulary's last id
            _set(config, name, remap["vocab"] - 1)
        elif name.endswith(SPECIAL_SUFFIXES) and remap["ids"]:
            if _is_int(value):
                _set(config, name, remap["ids"].get(value, value))
            elif isinstance(value, (list, tuple)):
                _set(config, name, type(value)(remap["ids"].get(v, v) for v in value))


# Model types whose default config leaves the image placeholder id None (their checkpoints name it) although the
# model finds the images by it: given the vocabulary's last id, like BLIP-2's.
NO_DEFAULT_IMAGE_TOKEN = ("minicpmv4_7", "nemotron_h_omni")


def _keep_ratios(config, before: dict) -> None:
    """Dimensions derived from others keep their ratio to them."""
    stored = _stored(config)
    hidden = next((before[n] for n in ("hidden_size", "n_embd", "d_model") if _is_int(before.get(n))), None)
    heads = next((before[n] for n in HEAD_NAMES if _is_int(before.get(n))), None)
    rotary = before.get("rotary_dim")
    if _is_int(rotary) and hidden and heads:
        # GPT-J, CodeGen: rotary_dim of a head of hidden / heads
        old_head = before.get("head_dim") if _is_int(before.get("head_dim")) else hidden // heads
        _set(config, "rotary_dim", max(2, 2 * round(rotary * HEAD_DIM / old_head / 2)))
    # Mamba 2 and the hybrids: heads x head size = expand x hidden
    mamba2 = "n_groups" in stored and "state_size" in stored
    for expand_name, heads_name, size_name in (("expand", "num_heads", "head_dim"),
                                                ("mamba_expand", "mamba_n_heads", "mamba_d_head")):
        expand, n = stored.get(expand_name), stored.get(heads_name)
        if _is_int(expand) and _is_int(n) and size_name in stored and (expand_name != "expand" or mamba2):
            _set(config, size_name, expand * HIDDEN // n)
    base, multipliers = before.get("base_channels"), before.get("channel_multiplier")
    if _is_int(base) and isinstance(multipliers, (list, tuple)) and multipliers and hidden == base * multipliers[-1]:
        # Emu3's VQ attention runs at the bottom of the pyramid: its hidden size is the widest stage's channels
        _set(config, "hidden_size", stored["base_channels"] * multipliers[-1])
    groups = before.get("upsample_groups")
    if _is_int(groups) and groups == hidden and _is_int(stored.get("hidden_size")):
        _set(config, "upsample_groups", stored["hidden_size"])  # Mimi: a depthwise (one group per channel) upsample
    attention = before.get("attention_hidden_size")
    if _is_int(attention) and hidden and _is_int(stored.get("hidden_size")):
        # Zamba: the shared attention block reads the hidden state and the embeddings side by side (2 x hidden);
        # RWKV: its time mixing's width, whose states a cached step carries at the hidden size (1 x hidden)
        _set(config, "attention_hidden_size", attention * stored["hidden_size"] // hidden)
        if heads and before.get("attention_head_dim") == attention // heads:
            _set(config, "attention_head_dim", stored["attention_hidden_size"] // stored["num_attention_heads"])
    rope_dim = before.get("qk_rope_head_dim")
    if _is_int(rope_dim) and before.get("head_dim") == rope_dim and _is_int(stored.get("head_dim")):
        _set(config, "head_dim", stored["qk_rope_head_dim"])  # LongCat-Flash's rotary embedding sizes by head_dim
    if _is_int(stored.get("qk_head_dim")) and _is_int(stored.get("qk_nope_head_dim")):
        _set(config, "qk_head_dim", stored["qk_nope_head_dim"] + stored["qk_rope_head_dim"])  # MLA's query head
    if _is_int(stored.get("coordinate_size")) and _is_int(stored.get("shape_size")):
        # LayoutLMv3: four coordinate and two shape embeddings of a box, side by side, make the hidden size
        coordinate = HIDDEN // 6
        _set(config, "coordinate_size", coordinate)
        _set(config, "shape_size", (HIDDEN - 4 * coordinate) // 2)
    if _is_int(stored.get("mamba_d_ssm")) and _is_int(stored.get("mamba_expand")):
        _set(config, "mamba_d_ssm", stored["mamba_expand"] * HIDDEN)
    if _is_int(before.get("num_blocks")) and before.get("num_blocks") == before.get("num_hidden_layers"):
        _set(config, "num_blocks", stored["num_hidden_layers"])  # xLSTM: a copy of the depth, which builds the model
    if all(_is_int(stored.get(name)) for name in ("num_layers_per_stack", "H_cycles", "L_cycles")):
        # HRM: its two stacks (16 layers each) run in cycles, which stay real; its cache holds one slot per layer
        # call, and num_hidden_layers counts those slots: layers x H_cycles x (L_cycles + 1)
        _set(config, "num_layers_per_stack", 1)
        _set(config, "num_hidden_layers", stored["H_cycles"] * (stored["L_cycles"] + 1))
    factors = [stored.get(name) for name in ("qk_dim_factor", "v_dim_factor")]
    if all(isinstance(f, float) for f in factors) and _is_int(stored.get("hidden_size")):
        # xLSTM: the layers project to hidden x factor, its cache and config to that rounded up to a multiple of
        # 64 (equal at every real size): the smallest multiple of the tiny width where both are whole multiples
        width = next(w for w in range(HIDDEN, 64 * HIDDEN + 1, HIDDEN)
                     if all((w * f) % 64 == 0 for f in factors))
        for name in ("hidden_size", "embedding_dim"):
            if _is_int(stored.get(name)):
                _set(config, name, width)
    if _is_int(stored.get("intermediate_size")) and _is_int(stored.get("expand")) and "conv_kernel" in stored \
            and "n_groups" not in stored:
        _set(config, "intermediate_size", stored["expand"] * HIDDEN)  # Mamba 1: intermediate = expand x hidden


def _shrink_vision(config, before: dict) -> None:
    """A vision tower 4 patches a side; token counts read from the config scaled like the patch count."""
    stored = _stored(config)
    size, patch = before.get("image_size"), before.get("patch_size")
    if _is_int(size) and _is_int(patch) and patch > 0 and size > PATCHES_PER_SIDE * patch:
        _set(config, "image_size", PATCHES_PER_SIDE * patch)
        stored[PATCH_RATIO] = (PATCHES_PER_SIDE * patch / size) ** 2
    if _is_int(before.get("hidden_size")):
        stored[FULL_HIDDEN] = before["hidden_size"]
    for _, child in sub_configs(config):
        full, merge = _stored(child).get(FULL_HIDDEN), _merge_size(child)
        tiny_hidden = _stored(child).get("hidden_size")
        if full and merge > 1 and _is_int(tiny_hidden):
            # a merger's input width: the tower's hidden size times the patches it merges (Muse Spark's
            # out_hidden_size, 1536 x 2 x 2), set to HIDDEN by name and brought back to that product
            for name, value in before.items():
                if _is_int(value) and value == full * merge * merge and SIZES.get(name) == HIDDEN:
                    _set(config, name, tiny_hidden * merge * merge)
        ratio = _stored(child).get(PATCH_RATIO)
        if ratio:
            for name in IMAGE_TOKEN_COUNTS:
                value = stored.get(name)
                if _is_int(value) and value > 1:
                    _set(config, name, _square_at_least_one(value * ratio))
            pinpoints = stored.get("image_grid_pinpoints")
            if isinstance(pinpoints, (list, tuple)) and pinpoints:
                # LLaVA-NeXT's tiled resolutions are multiples of the tower's image size: shrunk like it
                side = math.sqrt(ratio)
                tiny_size = _image_size(child)
                unit = math.gcd(*(v for pair in pinpoints for v in pair))
                if unit and unit * side % tiny_size:
                    # multiples of another size than the default tower's (Granite 4 Vision: 336 for a 224 tower):
                    # multiples of the tiny tower's, as a checkpoint's are of its own tower's
                    side = tiny_size / unit
                _set(config, "image_grid_pinpoints", [[round(v * side) for v in pair] for pair in pinpoints])


def _merge_size(vision) -> int:
    """Patches a side a tower merges into one token (Qwen2-VL's spatial_merge_size, Muse Spark's merge_size)."""
    value = _stored(vision).get("spatial_merge_size") or _stored(vision).get("merge_size")
    return value if _is_int(value) else 1


FEATURE_LAYER_NAMES = ("vision_feature_layer", "vision_feature_layers")


def _clamp_feature_layers(config) -> None:
    """The vision tower's layers a multimodal config takes features from (-2, VipLLaVA's [-2, -5, -8, -11, 6]),
    brought within the tiny tower's hidden states; as many of them, so that the projector's width follows."""
    vision = _stored(config).get("vision_config")
    depth = builders.layer_count(vision) if _is_config(vision) else None
    if not depth:
        return

    def clamp(index):
        return max(index, -(depth + 1)) if index < 0 else min(index, depth)

    for name in FEATURE_LAYER_NAMES:
        value = _stored(config).get(name)
        if _is_int(value):
            _set(config, name, clamp(value))
        elif isinstance(value, (list, tuple)) and all(_is_int(v) for v in value):
            _set(config, name, type(value)(clamp(v) for v in value))


# Qwen2-VL's and GLM-4V's split of a rotary half between time, height and width ([16, 24, 24], [8, 12, 12]).
MROPE_SHARES = (2, 3, 3)


def _height_width_time(half: int) -> list:
    """ERNIE 4.5 VL's split, in its own order: height, width (equal: its rope stacks them pairwise), then time, in
    the shares of the [22, 22, 20] its modeling code defaults to (the default config leaves it unset)."""
    side = (half - half * 20 // 64) // 2
    return [side, side, half - 2 * side]


#: Models whose split is their own: model type -> the sections of a rotary half.
MROPE_SECTIONS_OF = {"ernie4_5_vl_moe": _height_width_time}


def _set_mrope(config) -> None:
    """Multimodal RoPE (a vision tower with a temporal patch size) splits each head's rotary half into sections
    whose default, in the modeling code, fits the full head only: sections for the tiny head, in the same shares."""
    text, vision = getattr(config, "text_config", None), _stored(config).get("vision_config")
    if not (_is_config(text) and _is_config(vision)):
        return
    rope = getattr(text, "rope_parameters", None)
    own = MROPE_SECTIONS_OF.get(getattr(config, "model_type", ""))
    if "temporal_patch_size" not in _stored(vision) and "vision_start_token_id" not in _stored(config) \
            and own is None:
        return  # (PaddleOCR-VL's tower has no temporal patch size; its vision-start token says M-RoPE all the same)
    if not isinstance(rope, dict) and "rope_scaling" in _stored(text):
        # transformers 4 keeps the sections in rope_scaling, which its default config leaves unset
        rope = _stored(text)["rope_scaling"] or {"rope_type": "default", "type": "default"}
        _set(text, "rope_scaling", rope)
    heads = getattr(text, "num_attention_heads", None)
    if not isinstance(rope, dict) or not _is_int(heads):
        return
    head = getattr(text, "head_dim", None) or text.hidden_size // heads
    factor = rope.get("partial_rotary_factor") or getattr(text, "partial_rotary_factor", None) or 1.0
    half = int(head * factor) // 2
    if own is not None:
        rope["mrope_section"] = own(half)
        return
    parts = [half * share // sum(MROPE_SHARES) for share in MROPE_SHARES[1:]]
    rope["mrope_section"] = [half - sum(parts), *parts]


def _square_at_least_one(count: float) -> int:
    """A square token count whose side divides the patches per side (a pooling kernel of whole patches)."""
    wanted = max(1, int(round(math.sqrt(count))))
    side = max(d for d in range(1, PATCHES_PER_SIDE + 1) if PATCHES_PER_SIDE % d == 0 and d <= wanted)
    return side * side


def _cut_per_layer(config, full_depth: int, depth: int) -> None:
    builders.cut_layer_lists(config, full_depth, depth)
    full = full_depth
    for name, value in list(_stored(config).items()):
        indices = _layer_indices(value, full)
        if indices and max(indices) >= depth:
            _set(config, name, type(value)(i for i in indices if i < depth))
    per_layer = _stored(config).get("per_layer_config") or _stored(config).get("_per_layer_config")
    if isinstance(per_layer, dict):  # transformers 5's heterogeneous layers: overrides of the first layers only
        kept = {k: v for k, v in per_layer.items() if not _is_int(k) or k < depth}
        _set(config, "per_layer_config", kept)


def _take_per_layer_overrides(config) -> dict:
    """transformers 5's heterogeneous configs keep per-layer values ({layer: {attribute: value}}) beside the
    global ones, and refuse a global read of them: taken off the config (given back shrunk by the rebuild)."""
    spec = _stored(config).pop("_heterogeneity_spec", None)
    return dict(getattr(spec, "per_layer_overrides", None) or {})


def _override_depth(per_layer: dict, full: int) -> int:
    """Layers enough to hold the first layer of each distinct per-layer override, and a layer without any."""
    firsts = {}
    for layer in sorted(k for k in per_layer if _is_int(k)):
        firsts.setdefault(repr(sorted(per_layer[layer].items())), layer)
    plain = next((i for i in range(full) if i not in per_layer), None)
    depth = max([i + 1 for i in firsts.values()] + ([plain + 1] if plain is not None else []), default=0)
    return min(depth, builders.MAX_DEPTH)


def _tiny_overrides(per_layer: dict, depth: int) -> dict:
    """The kept layers' overrides, their sizes tiny like the global ones."""
    found = {}
    for layer, values in per_layer.items():
        if _is_int(layer) and layer >= depth:
            continue
        found[layer] = {name: _tiny_override(name, value, depth) for name, value in values.items()}
        # as _set_sizes does for the global values: multi-head attention stays multi-head (dots.ocr 3's sliding
        # layers, 64 and 64, got 4 query heads and 2 key/value heads, which its latent attention, one key per query
        # head, does not follow where a mask is given: eager failed on a padded batch, and every export)
        heads = next((values[n] for n in HEAD_NAMES if _is_int(values.get(n))), None)
        for name in KV_HEAD_NAMES:
            if heads is not None and values.get(name) == heads:
                found[layer][name] = next(found[layer][n] for n in HEAD_NAMES if _is_int(values.get(n)))
    return found


def _tiny_override(name, value, depth):
    if _is_int(value):
        tiny = _tiny_value(name, value, depth)
        return value if tiny is None else tiny
    return value


def _init_names(config_class) -> list:
    """The names the config's constructor takes (a transformers 5 dataclass's fields, or 4.x's parameters)."""
    if dataclasses.is_dataclass(config_class):
        return [f.name for f in dataclasses.fields(config_class) if f.init]
    names = []
    for klass in config_class.__mro__:
        if "__init__" in vars(klass):
            names += [p.name for p in inspect.signature(klass.__init__).parameters.values()
                      if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]
    return names


def _rebuild(config, per_layer: dict) -> None:
    """The config rebuilt from its own constructor arguments (their shrunk values), so that what the constructor
    derives from them follows; kept as it is when the constructor refuses.  ``per_layer``: transformers 5's
    per-layer overrides of the kept layers, given back."""
    stored = _stored(config)
    # A constructor argument that the config's attribute_map aliases (Kimi-Linear's num_local_experts, Inkling's
    # vision num_hidden_layers) is stored under the name it maps to: read from there, or the rebuild would put the
    # default back (384 experts, 24 layers).
    aliases = getattr(type(config), "attribute_map", None) or {}
    kwargs = {}
    for name in dict.fromkeys(_init_names(type(config))):
        where = name if name in stored else aliases.get(name)
        if where in stored:
            kwargs[name] = stored[where]
    if per_layer:
        kwargs["per_layer_config"] = per_layer
    try:
        fresh = type(config)(**kwargs)
    except Exception:
        if per_layer:
            _set(config, "per_layer_config", per_layer)
        return
    # a constructor that only builds sub-configs from dicts or None (transformers 4's Qwen2-VL) drops the given
    # (already shrunk) ones: kept as they were
    marks = {k: v for k, v in stored.items() if k in MARKS or (_is_config(v) and k not in vars(fresh))}
    stored.clear()
    stored.update(vars(fresh))
    stored.update(marks)


# Per-model settings no general rule gives, and why.  Keys starting with "_" are not config attributes.
OVERRIDES: dict = {
    # Zamba shares one transformer block between its hybrid layers (its checkpoints': the 3rd, the 8th, then every
    # 6th): tying its weights needs two of them. Its first four layers, then a second hybrid one (5 layers, not the
    # 11 its period takes; the period picks no code path, each layer runs by its type). The kinds as the version
    # names them (4.x "mamba", 5.x "linear_attention").
    "zamba": {"_depth": 5, "layers_block_type": lambda kinds: [*kinds[:4], kinds[2]]},
    # 4.x Mega as a causal LM: its docs ask is_decoder=True and bidirectional=False (the default bidirectional EMA
    # takes no incremental state, so eager itself cannot run a decode step)
    "mega": {"bidirectional": False},
    # ESM's config names no padding or mask token (each checkpoint does; ESM-2's are 1 and 32) and the model
    # reads the padding id to build its mask
    "esm": {"pad_token_id": 1, "mask_token_id": 32},
    # DBRX's attention reads attn_config.rope_theta, which transformers 5's DbrxAttentionConfig no longer has (the
    # theta moved to the top config's rope_parameters): the same value given where the attention reads it; and it
    # clamps q, k, v to clip_qkv unconditionally, which the default leaves None (DBRX's checkpoints say 8)
    "dbrx": {"attn_config.rope_theta": 10000.0, "attn_config.clip_qkv": 8.0},
    # dots.llm1's default config leaves its MoE sizes None (the checkpoint sets 128 routed, 2 shared experts)
    "dots1": {"n_routed_experts": 4, "n_shared_experts": 1},
    # LFM2-MoE's default config has no layer_types (and, unlike LFM2's, derives none): LFM2-8B-A1B's first layers,
    # two short convolutions then full attention
    "lfm2_moe": {"_depth": 3, "layer_types": ["conv", "conv", "full_attention"]},
    # Qwen4-Exp's default layers include an indexed (QSA) attention whose indexer sizes the default config leaves
    # None: a tiny indexer (one kv head, as its validator requires; budget a multiple of the compress ratio)
    **dict.fromkeys(("qwen4_exp", "qwen4_exp_text"), {
        "indexer_n_heads": 4, "indexer_kv_heads": 1, "indexer_head_dim": HEAD_DIM, "indexer_budget": 8,
        "indexer_compress_ratio": 4}),
    # Cohere Compass's rotary embedding reads rope parameters per layer type, which the default config leaves
    # empty ({}): the default rope for its one layer type, M-RoPE sections for the tiny head (half of 16: 2+3+3;
    # the code's fallback [24, 20, 20] fits a 128 head only)
    "cohere_compass_text": {"rope_parameters": {"full_attention": {
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}}},
    # The Qwen omni thinkers' rope index reads vision_start_token_id, which their default configs lack (the
    # checkpoints' is 151652, as Qwen2-VL's): given before the vocabulary is planned, so it moves like the others
    **dict.fromkeys(("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"), {"_ids": {"vision_start_token_id": 151652}}),
    # Moonshine Streaming's decoder reads num_key_value_heads, which its default config does not define (its
    # encoder's: as many as the heads): multi-head like the encoder
    "moonshine_streaming": {"num_key_value_heads": HEADS},
    # Aria's projector maps a tower's patch count to a query count by a table for its two full resolutions
    # ({1225: 128, 4900: 256}): the tiny tower's 16 patches, queries scaled like the patch count (a square, 4)
    "aria": {"projector_patch_to_query_dict": {PATCHES_PER_SIDE ** 2: 4},
             "max_value_projector_patch_to_query_dict": 4},
    # Bamba's and Granite 4.0-H's default configs are all Mamba (their checkpoints put attention in some layers,
    # Bamba-9B's at 9, 18, 27), and transformers' cache cannot count the past of an all-Mamba model: a tiny one with
    # a Mamba layer then an attention layer
    "bamba": {"_depth": 2, "attn_layer_indices": [1]},
    "granitemoehybrid": {"_depth": 2, "layer_types": ["linear_attention", "full_attention"]},
    # Llama 4's vision adapter pixel-shuffles (ratio 0.5: 4 x the width) into an MLP of intermediate_size, which is
    # also the tower's MLP width (5632 = 4 x 1408 in the default); its projector dims then feed the text projector
    "llama4_vision_model": {"intermediate_size": 4 * HIDDEN, "projector_input_dim": HIDDEN,
                            "projector_output_dim": HIDDEN, "vision_output_dim": HIDDEN},
    # transformers 4.x default configs that cannot build their own model; the values are 5.x's defaults, given
    # only where the 4.x config leaves them unset (``_if_unset``; ``_sub_configs``: a config class's defaults):
    # Mllama's text rotary embedding reads rope_scaling["rope_type"] but its default rope_scaling is None;
    "mllama_text_model": {"_if_unset": {"rope_scaling": {"rope_type": "default"}}},
    # Phi-4-multimodal reads vision_config.image_token_id but its default vision_config is None
    "phi4_multimodal": {"_sub_configs": {"vision_config": "Phi4MultimodalVisionConfig"}},
    # Gemma 4's default config has no vision tower (vision_config None: the text-only checkpoints' shape), so its
    # image-text-to-text model has nothing to take the images with: the vision config class's defaults
    "gemma4": {"_sub_configs": {"vision_config": "Gemma4VisionConfig"}},
    "gemma4_unified": {"_sub_configs": {"vision_config": "Gemma4UnifiedVisionConfig"}},  # likewise
    # Pix2Struct's text config gets initializer_range from its parent's constructor, not its own, so rebuilding it
    # drops it (4.x; the model reads it to initialize): the default's 0.02 (5.x's text config takes it itself)
    "pix2struct_text_model": {"initializer_range": 0.02},
    # Hunyuan-MoE's default config has one expert, top-1 (Hunyuan-A13B: 64 experts, top 8): one expert is no
    # mixture, and takes paths no checkpoint does (transformers' grouped experts count tokens with histc(min=0,
    # max=0), which torch.onnx refuses): a tiny mixture instead
    "hunyuan_v1_moe": {"num_experts": 4, "moe_topk": 2},
    # Kimi-K2.5's projector normalizes the tower's output over projection_hidden_size, the tower's hidden size
    # (1152 in both defaults), kept on the top config where the tower's shrink does not reach it
    "kimi_k25": {"projection_hidden_size": HIDDEN},
    # LiLT's layout stream embeds a box's six coordinates in hidden / 6 each: a hidden size six divides
    "lilt": {"hidden_size": 48},
    # DeepSeek-OCR 2's default text config leaves mlp_layer_types None, which its decoder layers index: the
    # DeepSeek-V2 pattern its docstring gives (a dense first layer, then sparse ones), one layer of each kind
    "deepseek_ocr2_text": {"_depth": 2, "mlp_layer_types": ["dense", "sparse"]},
    # Step3p7's (Step 3.7 Flash) text model builds a sliding-window mask for every forward, which its default
    # config (every layer full attention, no window) cannot: its checkpoints' three sliding-window layers per full
    # one (full first), with their 512-token window (larger than the sweep's sequences, as in short prompts) and
    # their rope bases per layer type (5e6 for full attention, 1e4 for the windows)
    "step3p5": {"sliding_window": 512,
                "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"],
                "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 5000000.0},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    # Granite 4 Vision's default config leaves its Window Q-Former's downsample rate and its deepstack map (vision
    # layer -> text layer its features are added at) None, and sends its four spatial groups to text layers 12-21:
    # a window of 4 patches a side queried by 2 (the tiny tower's image is 4 patches a side), the last vision layer
    # into the first text layer, the spatial groups spread over the tiny text model's 2 layers
    "granite4_vision": {"downsample_rate": "2/4", "deepstack_layer_map": [(-1, 0)],
                        "spatial_target_layers": [0, 0, 1, 1]},
}


# Composite configs whose transformers 4 constructor refuses to run without sub-configs: the sub-configs
# transformers 5's defaults give them (class names, so that a decoder config the auto mapping lacks is found).
COMPOSITE_DEFAULTS = {
    "encoder-decoder": {"encoder": "BertConfig", "decoder": "BertConfig"},
    "vision-encoder-decoder": {"encoder": "ViTConfig", "decoder": "BertConfig"},
    "speech-encoder-decoder": {"encoder": "Wav2Vec2Config", "decoder": "BertConfig"},
    "musicgen": {"text_encoder": "T5Config", "audio_encoder": "EncodecConfig", "decoder": "MusicgenDecoderConfig"},
    "musicgen_melody": {"text_encoder": "T5Config", "audio_encoder": "EncodecConfig",
                        "decoder": "MusicgenMelodyDecoderConfig"},
}


# Default configs their own validator refuses (the class's defaults are a template, each checkpoint fills them):
# the constructor arguments the validator asks for, and why.
DEFAULT_ARGUMENTS = {
    # Gemma 4's assistant (drafter) takes a Gemma 4 text config without the per-layer inputs, MoE block or double-
    # wide MLP that gemma4_text's defaults have (its validator says each must be off); every layer then shares kvs
    "gemma4_assistant": {"text_config": {"model_type": "gemma4_text", "hidden_size_per_layer_input": 0,
                                         "vocab_size_per_layer_input": 0, "enable_moe_block": False,
                                         "use_double_wide_mlp": False}},
}


def default_config(model_type: str):
    import transformers
    from transformers import AutoConfig

    try:
        return AutoConfig.for_model(model_type, **DEFAULT_ARGUMENTS.get(model_type, {}))
    except ValueError:
        parts = COMPOSITE_DEFAULTS.get(model_type)
        if not parts:
            raise
    kwargs = {name: getattr(transformers, klass)() for name, klass in parts.items()}
    if model_type.endswith("encoder-decoder"):  # what from_encoder_decoder_configs sets on the decoder
        kwargs["decoder"].is_decoder = kwargs["decoder"].add_cross_attention = True
    return AutoConfig.for_model(model_type, **{name: part.to_dict() for name, part in kwargs.items()})


def tiny_config(model_type: str):
    return shrink(default_config(model_type))


# ---------------------------------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------------------------------


def _reason(exc: BaseException) -> str:
    """A one-line reason, naming the optional package when one is missing."""
    import re

    text = str(exc)
    found = re.search(r"requires the (\S+) library", text) or re.search(r"No module named '([^'.]+)", text)
    if found:
        return f"needs {found.group(1)}"
    missing = re.fullmatch(r"'(\w+Config)' object has no attribute '(\w+)'", text.strip())
    if isinstance(exc, AttributeError) and missing and not missing.group(2).endswith("_config"):
        # the model reads what the default config does not define (a missing sub-config is a wrong config class)
        return f"default config incomplete: {missing.group(1)} has no {missing.group(2)}"
    return first_line(exc)


def model_class(arch: Arch):
    import transformers

    try:
        return getattr(transformers, arch.class_name)
    except (AttributeError, ImportError) as exc:
        if isinstance(exc, ImportError):
            raise BuildError(_reason(exc)) from exc
        raise BuildError(f"{arch.class_name} is not in transformers {transformers.__version__}") from exc


def build(arch: Arch):
    import torch

    klass = model_class(arch)
    try:
        config = _config_for(klass, _tiny_config_of(klass, arch), arch.kind)
        torch.manual_seed(0)
        model = klass(config)
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(_reason(exc)) from exc
    model = model.to(torch.float32).eval()
    _no_zero_matrices(model)
    languages = getattr(model.config, "languages", None)
    if hasattr(model, "set_default_language") and languages:
        model.set_default_language(languages[0])  # X-MOD's adapters need one chosen (a processor would say)
    params = sum(p.numel() for p in model.parameters())
    if params > PARAMS_BUDGET:
        name, biggest = max(model.named_parameters(), key=lambda item: item[1].numel())
        raise BuildError(f"not tiny: {params / 1e6:.0f}M parameters ({name} {tuple(biggest.shape)})")
    return model


def _no_zero_matrices(model) -> None:
    """Trained weight matrices are never all zeros, but some inits leave one so (AFMoE zeroes its router's gate):
    every router score is then equal, and top-k picks among ties, which torch and onnxruntime break differently.
    Such a matrix gets random values at the config's ``initializer_range``, a checkpoint's regime: distinct
    scores. Vectors (biases, gates of one value per layer) keep their init."""
    import torch

    std = getattr(model.config, "initializer_range", None)
    std = std if isinstance(std, float) and std > 0 else 0.02
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2 and param.numel() and param.is_floating_point() and not param.any():
                param.normal_(0.0, std)


def _tiny_config_of(klass, arch: Arch):
    """The model type's tiny config. A VLM class whose model type names only its vision tower (transformers 4's
    Pixtral, mapped to LlavaForConditionalGeneration, whose checkpoints are Llava configs around that tower with
    settings of their own: feature layer, strategy, image sizes) is not built from a guess of them: a BuildError
    says why."""
    config = tiny_config(arch.model_type)
    wanted = getattr(klass, "config_class", None)
    if arch.kind == "vlm" and isinstance(wanted, type) and not any(isinstance(n, wanted) for n in _tree(config)) \
            and getattr(config, "vision_config", None) is None and "vision_config" in _init_names(wanted):
        raise BuildError(f"{arch.model_type}'s config is a vision tower's only ({type(config).__name__}); its "
                         f"checkpoints wrap it in a {wanted.__name__} of their own settings")
    return config


def _config_for(klass, config, kind: str):
    """The config the class takes: the model type's config, or the sub-config of the class's own config class (a
    multimodal model type's text-only causal LM takes its text config)."""
    wanted = getattr(klass, "config_class", None)
    if isinstance(wanted, type) and not isinstance(config, wanted):
        config = next((node for node in _tree(config) if isinstance(node, wanted)), config)
    if kind == "causal" and getattr(config, "is_decoder", None) is False \
            and not getattr(config, "is_encoder_decoder", False):
        config.is_decoder = True  # an encoder family's causal LM head (BertLMHeadModel) is its decoder use
    return config


def params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------------------------
# steps and inputs
# ---------------------------------------------------------------------------------------------------------------


def _forward_params(klass) -> set:
    try:
        return set(inspect.signature(klass.forward).parameters)
    except (TypeError, ValueError):
        return set()


def steps(arch: Arch) -> tuple:
    if arch.kind == "causal":
        try:
            taken = _forward_params(model_class(arch))
        except BuildError:
            return ("prefill", "decode")
        return ("prefill", "decode") if taken & {"past_key_values", "cache_params"} else ("prefill",)
    if arch.kind in ("seq2seq", "speech"):
        return ("forward", "decode")
    if arch.kind == "vlm":
        return ("prefill",)
    return ("forward",)


def inputs(model, arch: Arch, step: str, k: int, padded: bool = False) -> dict:
    if step not in steps(arch):
        raise BuildError(f"{arch.kind} has no step {step!r}")
    config = model.config
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    if arch.kind == "encoder":
        return _encoder_inputs(model, k)
    if arch.kind == "vlm":
        return _vlm_inputs(model, k, padded)
    if arch.kind == "speech" and encoder_decoder:
        return _speech_inputs(model, step, k)
    if arch.kind in ("seq2seq", "speech") and encoder_decoder:
        return _seq2seq_inputs(model, step, k)
    # decoders, and the seq2seq / speech mappings' decoder-only models (audio LLMs), driven on text
    return _decoder_inputs(model, "prefill" if step == "forward" else step, k, padded)


def _text_config(config):
    return getattr(config, "text_config", None) or getattr(config, "decoder", None) or config


class _Vocab:
    """What the builders read from a config: a vocab_size (composite configs keep theirs in a
    sub-config) and the pad id."""

    def __init__(self, config):
        self.vocab_size = vocab_size(config)
        self.pad_token_id = builders.pad_token_id_of(config)
        self.model_type = getattr(config, "model_type", "")
        self.code_streams = builders.code_streams(config)


def vocab_size(config) -> int:
    for owner in (config, _text_config(config)):
        value = getattr(owner, "vocab_size", None)
        if _is_int(value):
            return value
    return VOCAB


def _recurrent(model) -> bool:
    """A state-space model stepping through ``cache_params`` (Mamba): one token at a time, with a cache position."""
    taken = _forward_params(type(model))
    return "cache_params" in taken and "past_key_values" not in taken


def _mamba_mixers(model) -> bool:
    """Mamba-style mixers inside a hybrid (Jamba, Zamba, Bamba, Falcon-H1, GraniteMoeHybrid): with a cache they take
    a one-token path of their own, so their decode step is one token at a time, as generate() feeds it (a step of
    several tokens is another program, refused by the one-token one's structure and by autopatch at run time).
    Known by their state-space parameters (``A_log`` beside a ``conv1d``), whatever the class is named."""
    return any(type(module).__name__.endswith("MambaMixer")
               or (hasattr(module, "A_log") and hasattr(module, "conv1d")) for module in model.modules())


def _ema_steps(model) -> bool:
    """4.x Mega's moving-average layers: with a cache (unidirectional) they update their EMA state one token at a
    time and refuse more ("Incremental decoding only supports self sequence length of 1")."""
    return any(type(module).__name__.endswith("DampedEma") for module in model.modules())


def _rows(config, batch: int) -> int:
    """Token rows for ``batch`` samples: MusicGen's decoder takes one row per codebook of each sample (a decoder
    of code streams, Kyutai's, one row of every stream's codes: ``builders.code_streams``)."""
    codebooks = getattr(config, "num_codebooks", None)
    rows = _is_int(codebooks) and codebooks > 1 and builders.code_streams(config) is None
    return batch * codebooks if rows else batch


def _decoder_inputs(model, step: str, k: int, padded: bool) -> dict:
    config = model.config
    if step == "prefill":
        batch, seq = builders.PREFILL[k]
        batch = _rows(config, batch)
        pads = builders.left_pads(batch, seq, k) if padded else None
        return _scrub(builders.prefill_inputs(model, _Vocab(config), batch, seq, seed=k + 1, pads=pads), config)
    recurrent = _recurrent(model)
    one_token = recurrent or _mamba_mixers(model) or _ema_steps(model)
    sizes = builders.RECURRENT_DECODE if one_token else (builders.PADDED_DECODE if padded else builders.DECODE)
    batch, past, seq = sizes[k]
    batch = _rows(config, batch)
    pads = builders.left_pads(batch, past, k) if padded else None
    found = builders.decode_inputs(model, _config_for_decode(config), batch, past, seq, seed=k + 1,
                                     cache_position=recurrent, pads=pads)
    return _scrub(found, config)


def _config_for_decode(config):
    """builders.decode_inputs reads the vocab from the config and gives it to a hybrid cache's constructor: the
    real config, with a vocab_size where a composite config keeps it in its text config."""
    if _is_int(getattr(config, "vocab_size", None)):
        return config
    try:
        config.vocab_size = vocab_size(config)
    except Exception:
        pass
    return config


def _scrub(found: dict, config) -> dict:
    """Random text never holds an image/audio placeholder or another special id past the first three."""
    specials = sorted(i for i in special_ids(config) if i >= 3)
    if not specials:
        return found
    for name in ("input_ids", "decoder_input_ids"):
        ids = found.get(name)
        if ids is not None:
            for special in specials:
                ids[ids == special] = 3 if special != 3 else 4
    return found


def _seq2seq_inputs(model, step: str, k: int) -> dict:
    vocab = _Vocab(model.config)
    if step == "forward":
        return _scrub(builders.seq2seq_forward_inputs(model, vocab, *builders.SEQ2SEQ_FORWARD[k], seed=k + 1),
                      model.config)
    return _scrub(builders.seq2seq_decode_inputs(model, vocab, *builders.SEQ2SEQ_DECODE[k], seed=k + 1), model.config)


def _encoder_inputs(model, k: int) -> dict:
    """Right-padded rows of different lengths, as a tokenizer pads for an encoder."""
    import torch

    batch, seq = builders.PREFILL[k]
    # A character model (CANINE) pools ``downsampling_rate`` characters into a molecule: as many molecules as
    # another model has tokens (its first set, one molecule, would trace a program of one molecule only)
    seq *= getattr(model.config, "downsampling_rate", 1)
    g = builders.generator(k + 1)
    ids = builders.random_ids(g, vocab_size(model.config), batch, seq)
    mask = torch.ones(batch, seq, dtype=torch.long)
    for row, pad in enumerate(builders.left_pads(batch, seq, k)):
        if pad:
            mask[row, -pad:] = 0
            ids[row, -pad:] = builders.pad_token_id_of(model.config)
    found = {"input_ids": ids, "attention_mask": mask}
    if "attention_mask" not in _forward_params(type(model)):
        del found["attention_mask"]  # FNet mixes tokens by Fourier transform: no mask to give
    if "token_type_ids" in _forward_params(type(model)):
        found["token_type_ids"] = torch.zeros_like(ids)
        kinds = getattr(model.config, "type_vocab_sizes", None)
        if isinstance(kinds, (list, tuple)):  # TAPAS: one token type per table feature (row, column, rank...)
            found["token_type_ids"] = _table_token_types(mask, kinds, k)
    return _scrub(found, model.config)


def _table_token_types(mask, kinds, k: int):
    """TAPAS's token types for a question followed by a flattened table, as its tokenizer lays them out: segment
    (0 question, 1 table), column and row (0 outside the table, the header is row 0), then labels, ranks and
    numeric relations (left at 0). Each sample has its own column count and cell width, so its cells (which
    position ids restart in, ``reset_position_index_per_cell``) differ from the other samples'; padding is 0."""
    import torch

    batch, seq = mask.shape
    types = torch.zeros(batch, seq, len(kinds), dtype=torch.long)
    question = 2
    for row in range(batch):
        columns, width = 2 + (row + k) % 2, 1 + row % 2
        for position in range(question, int(mask[row].sum())):
            cell = (position - question) // width
            types[row, position, :3] = torch.tensor([1, 1 + cell % columns, cell // columns])
    return types.clamp(max=torch.tensor(kinds) - 1)


# --- speech -----------------------------------------------------------------------------------------------------

SPEECH_DECODE = [(2, 3, 2), (3, 4, 3), (1, 6, 1)]  # (batch, past, seq)
SPEECH_FORWARD = [(2, 4), (3, 6), (4, 3)]  # (batch, decoder tokens)
SPEECH_FRAMES = [40, 48, 56]  # where the encoder takes any length


def _audio_candidates(model, batch: int, k: int, g, embeds: bool = False) -> list:
    """Input shapes an audio encoder may take, most specific first: Whisper's exact frame count, mel bins x
    frames, frames x features (Speech2Text), raw samples (Moonshine, wav2vec2 encoders). ``embeds``: features that
    are the encoder's input embeddings (Pop2Piano), frames x its width."""
    import torch

    config = getattr(model.config, "encoder", None) or getattr(model.config, "encoder_config", None) or model.config
    frames = SPEECH_FRAMES[k]
    if embeds:
        width = getattr(config, "d_model", None) or getattr(config, "hidden_size", None)
        return [torch.randn(batch, frames, width, generator=g)]
    found = []
    mel = getattr(config, "num_mel_bins", None)
    source = getattr(config, "max_source_positions", None)
    if _is_int(mel):
        if _is_int(source):
            found.append(torch.randn(batch, mel, 2 * source, generator=g))
        found.append(torch.randn(batch, mel, frames, generator=g))
    features = getattr(config, "input_feat_per_channel", None) or getattr(config, "feature_size", None) or \
        getattr(config, "feature_projection_input_dim", None) or mel  # SeamlessM4T: stacked mel frames
    if _is_int(features):
        channels = getattr(config, "input_channels", 1) or 1
        found.append(torch.randn(batch, frames, features * channels, generator=g))
    found.append(torch.randn(batch, 1600 * (k + 2), generator=g))
    return found


def _audio_names(model) -> tuple:
    """The audio's keyword for the model and for its encoder: the encoder's own input name (a speech
    encoder-decoder's wav2vec2 encoder takes input_values), except where the model takes ``input_features`` that
    its text encoder gets as input embeddings (Pop2Piano's T5 stack: its main input is input_ids)."""
    encoder = model.get_encoder()
    name = getattr(encoder, "main_input_name", None) or getattr(model, "main_input_name", "input_features")
    if name == "input_ids" and "input_features" in _forward_params(type(model)) \
            and "inputs_embeds" in _forward_params(type(encoder)):
        return "input_features", "inputs_embeds"
    return name, name


def _audio(model, batch: int, k: int, g):
    """The first candidate input the model's encoder takes (its eager encoder is the judge): the model's keyword
    for it, and the audio."""
    import torch

    encoder = model.get_encoder()
    name, encoder_name = _audio_names(model)
    if encoder_name == "input_ids":  # a text-to-speech model (Dia): its encoder reads text
        return name, builders.random_ids(g, vocab_size(encoder.config), batch, SPEECH_FRAMES[k] // 4)
    errors = []
    for candidate in _audio_candidates(model, batch, k, g, embeds=encoder_name != name):
        try:
            with torch.no_grad():
                encoder(**{encoder_name: candidate})
            return name, candidate
        except Exception as exc:
            errors.append(first_line(exc))
    raise BuildError(f"no audio input shape fits the encoder: {errors[0]}")


def _code_channels(model) -> int:
    """Audio codebooks per decoder position: a text-to-speech decoder (Dia) reads one code per codebook at each
    position, every other decoder one token."""
    decoder = getattr(model.config, "decoder_config", None)
    if _audio_names(model)[1] != "input_ids" or not _is_config(decoder):
        return 1
    return getattr(decoder, "num_channels", 1)


def _decoder_ids(g, vocab: int, batch: int, length: int, channels: int):
    """Decoder tokens, or (``channels`` > 1) audio codes as Dia's generate() gives them: ``(batch, length,
    channels)``, contiguous (its documented ``(batch * channels, length)`` form fails in eager past one position:
    the model transposes it and its embedding views the result)."""
    ids = builders.random_ids(g, vocab, batch * channels, length)
    return ids if channels == 1 else ids.view(batch, channels, length).transpose(1, 2).contiguous()


def _speech_inputs(model, step: str, k: int) -> dict:
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    g = builders.generator(k + 1)
    channels = _code_channels(model)
    vocab = vocab_size(model.config.decoder_config if channels > 1 else model.config)
    if step == "forward":
        batch, seq = SPEECH_FORWARD[k]
        name, audio = _audio(model, batch, k, g)
        found = {name: audio, "decoder_input_ids": _decoder_ids(g, vocab, batch, seq, channels), "use_cache": False}
        if _audio_names(model)[1] == "inputs_embeds":
            # Pop2Piano's feature extractor gives a batch its frames' mask (4.57's encoder, traced, builds none)
            found["attention_mask"] = torch.ones(audio.shape[:2], dtype=torch.long)
        return _scrub(found, model.config)
    batch, past, seq = SPEECH_DECODE[k]
    name, audio = _audio(model, batch, k, g)
    with torch.no_grad():
        out = model(**{name: audio}, decoder_input_ids=_decoder_ids(g, vocab, batch, past, channels), use_cache=True)
        # the encoder's own output type: Canary's carries the encoder's attention mask the decoder reads
        encoded = model.get_encoder()(**{_audio_names(model)[1]: audio})
    if not hasattr(encoded, "last_hidden_state"):
        encoded = BaseModelOutput(last_hidden_state=out.encoder_last_hidden_state)
    return _scrub({"encoder_outputs": encoded, "decoder_input_ids": _decoder_ids(g, vocab, batch, seq, channels),
                   "past_key_values": out.past_key_values}, model.config)


# --- vision-language --------------------------------------------------------------------------------------------

# the placeholder's id, by the names configs give it (InstructBLIP-Video's placeholders are video ones only)
IMAGE_TOKEN_NAMES = ("image_token_id", "image_token_index", "image_token", "video_token_index")


def image_token(config):
    for owner in (config, _text_config(config)):
        for name in IMAGE_TOKEN_NAMES:
            value = getattr(owner, name, None)
            if _is_int(value):
                return value
    return None


def _vision_config(config):
    for name in ("vision_config", "vision_tower_config", "visual_config", "encoder"):
        value = getattr(config, name, None)
        if value is not None and _is_config(value):
            # T5Gemma 2: its encoder's config holds the vision config in turn
            nested = getattr(value, "vision_config", None)
            return nested if name == "encoder" and nested is not None and _is_config(nested) else value
    return config


def _image_size(vision) -> int:
    size = getattr(vision, "image_size", None)
    if isinstance(size, (list, tuple)):
        size = size[0]
    if isinstance(size, dict):
        size = size.get("height") or next(iter(size.values()))
    return size if _is_int(size) else 32


def _channels(vision) -> int:
    return getattr(vision, "num_channels", None) or getattr(vision, "in_channels", None) or 3


def _grid_layout(model, batch: int, g) -> dict:
    """Qwen2-VL and kin: every image's patches flattened into one row each, and its (t, h, w) patch grid."""
    import torch

    vision = _vision_config(model.config)
    patch = getattr(vision, "patch_size", 14)
    temporal = getattr(vision, "temporal_patch_size", 2) or 1
    merge = getattr(vision, "spatial_merge_size", 2) or 1
    side = 2 * merge
    grid = torch.tensor([[1, side, side]] * batch)
    pixels = torch.randn(batch * side * side, _channels(vision) * temporal * patch * patch, generator=g)
    found = {"pixel_values": pixels, "image_grid_thw": grid}
    if "image_merge_sizes" in _forward_params(type(model)):  # VideoLLaMA 3: each image's merge, given with it
        found["image_merge_sizes"] = torch.tensor([merge] * batch)
    return found


def _patch_sequence_layout(model, batch: int, g) -> dict:
    """SigLIP 2's "naflex" towers (LFM2-VL): each image as a sequence of flattened patches, its patch grid
    (``spatial_shapes``) and which patches are real."""
    import torch

    vision = _vision_config(model.config)
    patch, side = getattr(vision, "patch_size", 16), PATCHES_PER_SIDE
    pixels = torch.randn(batch, side * side, _channels(vision) * patch * patch, generator=g)
    return {"pixel_values": pixels, "spatial_shapes": torch.tensor([[side, side]] * batch),
            "pixel_attention_mask": torch.ones(batch, side * side, dtype=torch.long)}


def _tiled_layout(model, batch: int, g) -> dict | None:
    """LLaVA-NeXT and kin ("anyres"): each image cut into tiles of the tower's size plus a thumbnail, as many as
    the model's own ``image_size_to_num_patches`` says for a square image of one tile's size."""
    import torch

    config, vision = model.config, _vision_config(model.config)
    pinpoints = getattr(config, "image_grid_pinpoints", None)
    tiles_of = getattr(sys.modules.get(type(model).__module__), "image_size_to_num_patches", None)
    if not pinpoints or tiles_of is None:
        return None
    size = _image_size(vision)
    tiles = tiles_of(image_size=(size, size), grid_pinpoints=pinpoints, patch_size=size)
    return {"pixel_values": torch.randn(batch, tiles, _channels(vision), size, size, generator=g),
            "image_sizes": torch.tensor([[size, size]] * batch)}


def _numbered_patches_layout(model, batch: int, g) -> dict:
    """Pix2Struct: flattened patches, each row led by its (1-based) row and column, and which patches are real."""
    import torch

    vision = _vision_config(model.config)
    patch, side = getattr(vision, "patch_size", 16), PATCHES_PER_SIDE
    width = getattr(vision, "patch_embed_hidden_size", None) or _channels(vision) * patch * patch
    rows = torch.arange(1, side + 1).repeat_interleave(side).float()
    cols = torch.arange(1, side + 1).repeat(side).float()
    values = torch.randn(batch, side * side, width, generator=g)
    patches = torch.cat([rows.expand(batch, -1)[..., None], cols.expand(batch, -1)[..., None], values], dim=-1)
    return {"flattened_patches": patches, "attention_mask": torch.ones(batch, side * side, dtype=torch.long)}


def _patch_positions_layout(model, batch: int, g) -> dict:
    """Gemma 4's and DiffusionGemma's towers (and Gemma 4 Unified's embedder): flattened patches and each one's
    (x, y) on the patch grid, a grid of whole pooling kernels (3 x 3 by default, so two kernels a side, not
    PATCHES_PER_SIDE)."""
    import torch

    vision = _vision_config(model.config)
    # Gemma 4 Unified embeds flattened patches of model_patch_size (its tower-free embedder), not patch_size
    patch = getattr(vision, "model_patch_size", None) or getattr(vision, "patch_size", 16)
    kernel = getattr(vision, "pooling_kernel_size", 1) or 1
    side = 2 * kernel
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    positions = torch.stack([xs.flatten(), ys.flatten()], dim=-1)
    return {"pixel_values": torch.randn(batch, side * side, _channels(vision) * patch * patch, generator=g),
            "image_position_ids": positions.expand(batch, -1, -1).clone()}


def _cross_attention_layout(model, batch: int, g) -> dict:
    """Mllama: images of tiles for cross-attention layers; one image of one tile (aspect ratio id 1, [1, 1]) per
    sample, the other tiles masked as a processor pads them."""
    import torch

    vision = _vision_config(model.config)
    size, tiles = _image_size(vision), getattr(vision, "max_num_tiles", 4)
    mask = torch.zeros(batch, 1, tiles, dtype=torch.long)
    mask[:, :, 0] = 1
    return {"pixel_values": torch.randn(batch, 1, tiles, _channels(vision), size, size, generator=g),
            "aspect_ratio_ids": torch.ones(batch, 1, dtype=torch.long), "aspect_ratio_mask": mask}


def _pixel_layouts(model, batch: int, g) -> list:
    """Candidate image inputs for ``batch`` samples (one image each) in the layouts forward's parameters name, most
    specific first; the model's own ``get_image_features`` picks (``_pixel_inputs``)."""
    import torch

    found = _image_layouts(model, batch, g)
    if "qformer_input_ids" in _forward_params(type(model)):
        # InstructBLIP: the Q-Former reads the instruction too (its own tokenizer's ids)
        qformer = _stored(model.config).get("qformer_config")
        ids = builders.random_ids(g, vocab_size(qformer) if _is_config(qformer) else VOCAB, batch, 4)
        found = [{**layout, "qformer_input_ids": ids, "qformer_attention_mask": torch.ones_like(ids)}
                 for layout in found]
    return found


def _strip_layout(model, batch: int, g) -> dict:
    """MiniCPM-V 4.6 and kin: every image's patches side by side in one strip, (1, channels, patch, patches x
    patch) as their processor's ``reshape_by_patch`` lays them, and each image's patch grid (``target_sizes``)."""
    import torch

    vision = _vision_config(model.config)
    patch, side = getattr(vision, "patch_size", 14), PATCHES_PER_SIDE
    pixels = torch.randn(1, _channels(vision), patch, batch * side * side * patch, generator=g)
    return {"pixel_values": pixels, "target_sizes": torch.tensor([[side, side]] * batch, dtype=torch.int32)}


def _grid_hw_layout(model, batch: int, g) -> dict:
    """Nemotron-H Omni: every image's patches flattened into one row each, and its (h, w) patch grid."""
    import torch

    vision = _vision_config(model.config)
    patch, side = getattr(vision, "patch_size", 16), PATCHES_PER_SIDE
    pixels = torch.randn(batch * side * side, _channels(vision) * patch * patch, generator=g)
    return {"pixel_values": pixels, "image_grid_hw": torch.tensor([[side, side]] * batch)}


def _patch_rows_layout(model, batch: int, g) -> dict:
    """Fuyu: no vision tower, each image's patches flattened (batch, patches, channels x patch x patch) for a linear
    patch embedding, as its processor gives them."""
    import torch

    vision = _vision_config(model.config)
    patch, side = getattr(vision, "patch_size", 30), PATCHES_PER_SIDE
    return {"pixel_values": torch.randn(batch, side * side, _channels(vision) * patch * patch, generator=g)}


# Per-model image layouts no parameter name tells apart (model type -> builder), and why.
IMAGE_LAYOUTS = {
    # MiniCPM-V 4.6/4.7 and MiniCPM-OCR: NaViT patch strips with per-image patch grids (their processor's layout)
    **dict.fromkeys(("minicpmv4_6", "minicpmv4_7", "minicpm_ocr"), _strip_layout),
    # Fuyu's pixel_values are flattened patches, not images (its forward's parameter names say images)
    "fuyu": _patch_rows_layout,
}


def _image_layouts(model, batch: int, g) -> list:
    import torch

    taken = _forward_params(type(model))
    special = IMAGE_LAYOUTS.get(getattr(model.config, "model_type", ""))
    if special is not None:
        return [special(model, batch, g)]
    if "image_grid_thw" in taken:
        flat = _grid_layout(model, batch, g)
        # PaddleOCR-VL and Kimi-K2.5: the same patches as small images, (patches, channels, patch, patch), for a
        # conv patch embedding that takes no temporal axis
        vision = _vision_config(model.config)
        patch = getattr(vision, "patch_size", 14)
        rows = flat["pixel_values"].shape[0]
        own = torch.Generator().manual_seed(rows)  # not from g: the other layouts' draws stay as they were
        small = torch.randn(rows, _channels(vision), patch, patch, generator=own)
        found = [flat, {**flat, "pixel_values": small}]
        if "temporal_patch_size" not in _stored(vision):
            # ERNIE 4.5 VL: flattened patches of one frame each (its tower merges frames later, by its
            # temporal_merge_size), for a linear patch embedding
            found.append({**flat, "pixel_values": small.flatten(1)})
        # Inkling 2: one block of merge x merge patches per language-model token, channels last, the grid counted
        # in tokens
        merge = getattr(vision, "spatial_merge_size", 2) or 1
        tokens = torch.cat([flat["image_grid_thw"][:, :1], flat["image_grid_thw"][:, 1:] // merge], dim=1)
        blocks = torch.randn(int(tokens.prod(-1).sum()), patch * merge, patch * merge, _channels(vision), generator=own)
        found.append({**flat, "pixel_values": blocks, "image_grid_thw": tokens})
        return found
    if "image_grid_hw" in taken:
        return [_grid_hw_layout(model, batch, g)]
    if "aspect_ratio_ids" in taken:
        return [_cross_attention_layout(model, batch, g)]
    if "spatial_shapes" in taken:
        return [_patch_sequence_layout(model, batch, g)]
    if "flattened_patches" in taken:
        return [_numbered_patches_layout(model, batch, g)]
    if "image_position_ids" in taken:
        return [_patch_positions_layout(model, batch, g)]
    vision = _vision_config(model.config)
    size = _image_size(vision)
    plain = torch.randn(batch, _channels(vision), size, size, generator=g)
    if "image_attention_mask" in taken or _video_only(model):
        # IDEFICS: an images axis (a mask says which text attends to which image); InstructBLIP-Video: frames
        frames = VIDEO_FRAMES if _video_only(model) else 1
        return [{"pixel_values": torch.randn(batch, frames, _channels(vision), size, size, generator=g)}]
    found = [_tiled_layout(model, batch, g)] if "image_sizes" in taken else []
    if "pixel_attention_mask" in taken:
        # Idefics and SmolVLM: an images axis and which pixels are real
        found.append({"pixel_values": plain.unsqueeze(1),
                      "pixel_attention_mask": torch.ones(batch, 1, size, size, dtype=torch.bool)})
        # Granite Docling: the mask says which tiles (not pixels) are real
        found.append({"pixel_values": plain.unsqueeze(1),
                      "pixel_attention_mask": torch.ones(batch, 1, dtype=torch.bool)})
    if "image_sizes" in taken:  # Pixtral's towers take any size and read it here; others ignore or refuse it
        found.append({"pixel_values": plain, "image_sizes": torch.tensor([[size, size]] * batch)})
    found.append({"pixel_values": plain})
    if _is_int(_stored(vision).get("temporal_patch_size")) and _is_int(getattr(vision, "patch_size", None)):
        # Inkling: each placeholder token is one patch volume (frames, patch, patch, channels), channels last
        patch, frames = vision.patch_size, vision.temporal_patch_size
        found.append({"pixel_values": torch.randn(batch * PATCHES_PER_SIDE, frames, patch, patch, _channels(vision),
                                                  generator=g)})
    high_res = _stored(model.config).get("high_res_vision_config")
    if "high_res_pixel_values" in taken and _is_config(high_res):
        # DeepSeek-VL hybrid: the same image again at its second tower's (larger) size
        wide = _image_size(high_res)
        extra = torch.randn(batch, _channels(high_res), wide, wide, generator=g)
        found = [{**layout, "high_res_pixel_values": extra} for layout in found if layout is not None]
    return [layout for layout in found if layout is not None]


VIDEO_FRAMES = 4


def _video_only(model) -> bool:
    """InstructBLIP-Video: its ``pixel_values`` are videos (no separate ``pixel_values_videos``)."""
    return hasattr(model, "get_video_features") and "pixel_values_videos" not in _forward_params(type(model)) \
        and "pixel_values_images" not in _forward_params(type(model))


def _features_name(model) -> str:
    """The method that gives the features the placeholders stand for."""
    return "get_video_features" if _video_only(model) else "get_image_features"


def _image_features_owners(model) -> list:
    """The model and its inner model, those that have the features method: the outer one first. transformers 4's
    GOT-OCR2 passes the inner one ``vision_feature_layer``, which it does not take (forward calls the inner one)."""
    name = _features_name(model)
    return [owner for owner in (model, getattr(model, "model", None)) if owner is not None and hasattr(owner, name)]


def _features_of(owner, model):
    return getattr(owner, _features_name(model))


def _pixel_inputs(model, batch: int, g, need_count: bool) -> tuple:
    """(image inputs, placeholder tokens per sample): the first candidate layout the model's own
    ``get_image_features`` takes, and as many placeholders as it gives features."""
    import torch

    layouts = _pixel_layouts(model, batch, g)
    owners = _image_features_owners(model)
    if not owners:
        if need_count and "aspect_ratio_ids" in layouts[0]:
            return layouts[0], 1  # cross-attention: one placeholder per image marks where it is attended from
        if need_count:
            raise BuildError("no get_image_features: cannot count the image placeholders")
        return layouts[0], 0
    errors = []
    for owner in owners:  # every layout with the outer model's method first: what it takes, it decides
        settings = _feature_settings(_features_of(owner, model), owner.config)
        for layout in layouts:
            try:
                with torch.no_grad():
                    count = _feature_count(_features_of(owner, model)(**settings, **_renamed(layout, owner))) // batch
                return _renamed(layout, owner), count
            except BuildError:
                raise
            except Exception as exc:
                errors.append(first_line(exc))
    # the outer method's error on the last layout, as before the inner method was tried too
    raise BuildError(f"no image layout fits get_image_features: {errors[len(layouts) - 1]}")


def _feature_settings(features, config) -> dict:
    """What the features method requires that forward reads from the config (transformers 4's Llama 4 wants
    ``vision_feature_select_strategy`` passed; its forward reads it from the vision sub-config)."""
    try:
        wanted = inspect.signature(features).parameters.values()
    except (TypeError, ValueError):
        return {}
    settings = {}
    for p in wanted:
        if p.default is not p.empty or not p.name.startswith("vision_feature"):
            continue
        for holder in (config, getattr(config, "vision_config", None)):
            if holder is not None and hasattr(holder, p.name):
                settings[p.name] = getattr(holder, p.name)
                break
    return settings


def _renamed(layout: dict, owner) -> dict:
    """The layout under get_image_features' own name for the images (Video-LLaVA's ``pixel_values_images``)."""
    try:
        names = set(inspect.signature(getattr(owner, "get_image_features", None)).parameters)
    except (TypeError, ValueError):
        return layout
    if "pixel_values" in layout and "pixel_values" not in names and "pixel_values_images" in names:
        layout = {("pixel_values_images" if k == "pixel_values" else k): v for k, v in layout.items()}
    return layout


def _feature_count(features) -> int:
    """How many image tokens ``get_image_features`` gave, whatever container it returns them in."""
    import torch

    if hasattr(features, "pooler_output") and features.pooler_output is not None:
        features = features.pooler_output
    elif getattr(features, "deepstack_features", None):
        # Granite 4 Vision: only (text layer, per-image features) pairs, each pair every image's tokens once
        features = features.deepstack_features[0][1]
    elif hasattr(features, "last_hidden_state") and not isinstance(features, torch.Tensor):
        features = features.last_hidden_state
    if isinstance(features, torch.Tensor):
        return features.numel() // features.shape[-1]
    if isinstance(features, tuple) and features and isinstance(features[0], (list, tuple)):
        return _feature_count(features[0])  # (per-image features, extras): transformers 4's Qwen3-VL deepstack
    if isinstance(features, (list, tuple)):
        return sum(_feature_count(f) for f in features)
    raise BuildError(f"get_image_features returned {type(features).__name__}")


def _vision_start(config, first):
    """The token before the image's placeholders: the vision-start token where the config has one (Qwen-VL models
    count their images by it, as their processors write it), else the text's own first token."""
    start = next((value for node in _tree(config)
                  if _is_int(value := getattr(node, "vision_start_token_id", None))), None)
    return first if start is None else first.new_full(first.shape, start)


def _vlm_inputs(model, k: int, padded: bool) -> dict:
    import torch

    config = model.config
    taken = _forward_params(type(model))
    if "mm_encoder_outputs" in taken and not any("pixel" in name or "image" in name for name in taken):
        # DiffusionGemma's block-diffusion model: its encoder's get_image_features makes the features, which its
        # forward takes only as mm_encoder_outputs (precomputed), never as pixels
        raise BuildError(f"{type(model).__name__}.forward takes no pixels: images come in as mm_encoder_outputs, "
                         "computed beforehand")
    # PI0, a vision-language-action policy: its state, the action chunk's noise and the flow-matching time step
    # beside the images, one per camera (its processor's (batch, cameras, channels, height, width)); its
    # vision-language model (PaliGemma) reads the images and the text (placeholder id, vocabulary)
    policy = {"state", "noise", "timestep"} <= taken
    reader = model.model.vlm if policy else model
    token = image_token(reader.config)
    batch, seq = builders.PREFILL[k]
    g = builders.generator(k + 1)
    pixels, count = _pixel_inputs(reader, batch * (CAMERAS if policy else 1), g, need_count=token is not None)
    if policy:
        pixels = {"pixel_values": pixels["pixel_values"].unflatten(0, (batch, CAMERAS)),
                  "pixel_attention_mask": torch.ones(batch, CAMERAS, dtype=torch.bool)}
        count *= CAMERAS
    text = _scrub({"input_ids": builders.random_ids(g, vocab_size(reader.config), batch, seq)},
                  reader.config)["input_ids"]
    queries = getattr(config, "latent_query_num", None)
    if "image_embeds_position_mask" in taken and _is_int(queries):
        # Kosmos-2: no placeholder id; a mask says which (any) tokens the image's latent queries replace
        ids = torch.cat([text[:, :1], torch.full((batch, queries), 3), text[:, 1:]], dim=1)
        where = torch.zeros_like(ids, dtype=torch.bool)
        where[:, 1:1 + queries] = True
        pixels = {**pixels, "image_embeds_position_mask": where}
    elif token is None:
        ids = text  # no placeholder token (BLIP-2, GIT): the model puts the image features before the text itself
    else:
        ids = torch.cat([_vision_start(config, text[:, :1]), torch.full((batch, count), token), text[:, 1:]], dim=1)
    text_inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "input_ids" not in taken and "decoder_input_ids" in taken:
        # an image encoder-decoder (VisionEncoderDecoder, Pix2Struct): the text is the decoder's
        text_inputs = {"decoder_input_ids": ids}
        if "decoder_attention_mask" in taken:
            text_inputs["decoder_attention_mask"] = torch.ones_like(ids)
    if "bbox" in taken:
        # UDOP: each text token's box on the page, (x0, y0, x1, y1) in [0, 1] as its processor normalizes them
        corners = torch.rand(*ids.shape, 2, 2, generator=g).sort(dim=-2).values  # (x0, y0) <= (x1, y1)
        text_inputs["bbox"] = corners.reshape(*ids.shape, 4)
    if "decoder_input_ids" in taken and "decoder_input_ids" not in text_inputs \
            and getattr(config, "is_encoder_decoder", False):
        # an encoder-decoder reading text and image (UDOP): a short answer so far for its decoder
        text_inputs["decoder_input_ids"] = builders.random_ids(g, vocab_size(config), batch, 3)
    # the text's mask wins over a patch layout's (Kosmos-2.5 takes Pix2Struct's numbered patches, whose model
    # reads that mask, but gives attention_mask to its text model); an image encoder-decoder's text has none
    found = {**pixels, **text_inputs, "use_cache": False}
    if "mm_token_type_ids" in taken and token is not None:
        found["mm_token_type_ids"] = (ids == token).long()  # which tokens are image ones (M-RoPE's positions)
    if "moe_mm_token_type_ids" in taken and token is not None:
        # ERNIE 4.5 VL's processor gives it too: the tokens its vision experts take (the image's; the prompt has no
        # image start or end tokens)
        found["moe_mm_token_type_ids"] = (ids == token).long()
    if policy:
        # as sample_actions() gives them each denoising step; left out, forward() samples noise and time itself
        # (another answer every call)
        found["state"] = torch.randn(batch, config.max_state_dim, generator=g)
        found["noise"] = torch.randn(batch, config.chunk_size, config.max_action_dim, generator=g)
        found["timestep"] = torch.rand(batch, generator=g)
    if "image_attention_mask" in taken and "input_ids" in found:
        found["image_attention_mask"] = torch.ones(batch, ids.shape[1], 1, dtype=torch.long)  # every token sees it
    if "cross_attention_mask" in taken and "aspect_ratio_mask" in pixels:
        # every text token attends to its sample's image tiles (the real ones)
        found["cross_attention_mask"] = pixels["aspect_ratio_mask"][:, None].expand(-1, ids.shape[1], -1, -1)
    if padded and "input_ids" in found:
        _left_pad_tokens(model, found, builders.left_pads(batch, seq - 1, k))
    return found


def _left_pad_tokens(model, inputs: dict, pads: list) -> dict:
    """A VLM prefill set left-padded as a tokenizer pads a batch: every per-token input (ids, mask, token types,
    image masks, boxes: the tensors as long as ``input_ids``) shifted right by its row's pad count, pad id and
    zeros in front, the row's last tokens dropped (``pads`` never reach the image placeholders, which come
    first); positions as generate() makes them."""
    import torch

    ids = inputs["input_ids"]
    pad_id = builders.pad_token_id_of(model.config)
    if pad_id >= vocab_size(model.config):
        pad_id = 0  # a composite config's own pad id (Idefics3's 128002) the shrunk vocab lost; masked out anyway
    for name, value in list(inputs.items()):
        if name.startswith("pixel") or not (
                isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[:2] == ids.shape):
            continue  # (an image's patches may count as many as the tokens: not per-token)
        value = inputs[name] = value.clone()  # some are expanded views (Mllama's cross-attention mask)
        for row, pad in enumerate(pads):
            if pad:
                fill = torch.full((pad, *value.shape[2:]), pad_id if name == "input_ids" else 0, dtype=value.dtype)
                value[row] = torch.cat([fill, value[row, :-pad]])
    return builders.generate_positions(model, inputs, inputs["input_ids"].shape[1])


# ---------------------------------------------------------------------------------------------------------------
# --check
# ---------------------------------------------------------------------------------------------------------------


def check_one(arch: Arch) -> dict:
    """Build, then eager on set 0 of every step."""
    import torch

    torch.set_num_threads(1)
    result = {"kind": arch.kind, "model_type": arch.model_type, "params": 0, "status": "ok", "reason": ""}
    try:
        model = build(arch)
        result["params"] = params(model)
        for step in steps(arch):
            try:
                found = inputs(model, arch, step, 0)
                with torch.no_grad():
                    model(**found)
            except BuildError:
                raise
            except Exception as exc:
                raise BuildError(f"{step}: {_reason(exc)}") from exc
    except BuildError as exc:
        result["status"], result["reason"] = "fail", str(exc)
    except Exception as exc:  # a bug of ours or of the model: still one line
        result["status"], result["reason"] = "fail", _reason(exc)
    return result


def _forked(arch: Arch, timeout: float) -> dict:
    import json
    import select
    import signal
    import time

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 2)  # the models' warnings would drown the one line per architecture
        try:
            payload = json.dumps(check_one(arch)).encode()
        except BaseException as exc:  # noqa: BLE001 - the child reports whatever happened
            payload = json.dumps({"status": "fail", "reason": first_line(exc)}).encode()
        os.write(write, payload)
        os._exit(0)
    os.close(write)
    chunks, deadline = [], time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([read], [], [], left)[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return {"status": "fail", "reason": f"timeout after {timeout:.0f} s"}
        chunk = os.read(read, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, code = os.waitpid(pid, 0)
    if not chunks:
        return {"status": "fail", "reason": f"crashed (wait status {code})"}
    return json.loads(b"".join(chunks))


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="build and run eager on set 0 of every step")
    parser.add_argument("--kinds", nargs="*", default=list(KINDS), choices=KINDS)
    parser.add_argument("--only", nargs="*", default=None, help="model types")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    if not args.check:
        parser.print_help()
        return 0
    import torch
    import transformers  # noqa: F401 - imported once, before forking

    torch.set_num_threads(1)
    archs = [a for a in architectures(tuple(args.kinds)) if args.only is None or a.model_type in args.only]
    counts: dict = {}
    for arch in archs:
        result = {"params": 0, **_forked(arch, args.timeout)}
        built, total = counts.get(arch.kind, (0, 0))
        counts[arch.kind] = (built + (result["status"] == "ok"), total + 1)
        print(f"{arch.kind:8} {arch.model_type:32} {result['params']:>10,} {result['status']:4} {result['reason']}",
              flush=True)
    for kind, (built, total) in counts.items():
        print(f"{kind}: built {built} / {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
