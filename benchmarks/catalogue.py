"""Export cases for the coverage matrix, built offline from tiny configs (random weights, nothing downloaded).

Every case has a builder returning ``(model, inputs_a, inputs_b, inputs_c)``:

* ``inputs_a`` is traced,
* ``inputs_b`` differs from ``a`` in every size that should be dynamic; it is used only to derive
  ``dynamic_shapes`` (every dimension that differs between a and b is ``Dim.DYNAMIC``, caches as the active
  pytree registration flattens them) unless the case gives explicit ``dynamic_shapes``,
* ``inputs_c`` differs again; the exported program and the eager model are compared on it.

Inputs are keyword dicts.  Cases whose config class is missing in the installed transformers are
"unavailable" on that version (nothing else is skipped).  This module imports torch and transformers lazily:
``CASES`` can be listed without them.

Real regimes (issue 15): only sizes are shrunk (layers, hidden, heads, vocab, intermediate).  What chooses a code
path keeps the config class's own value: ``sliding_window``, ``layer_types`` and the other per-layer patterns,
``max_position_embeddings``, rope parameters, the attention implementation; the layer count grows until the
class's own pattern holds every kind of layer (``own_depth``: Gemma 3's five sliding layers and one full layer
need 6).  A regime that needs a special value is an extra case with its own name beside the real one
(``*_past_window``: a window of 4 that every input set is past; ``*_cross_window``: a window of 8, traced inside
it and run beyond it).  Every decoder and vision-language case has a
``*_padded`` twin whose batches are left-padded, differently in A, B and C.
"""

from __future__ import annotations

import dataclasses
import sys
from functools import partial
from pathlib import Path
from typing import Callable

try:
    import autopatch.models  # noqa: F401
except ImportError:  # an interpreter without autopatch installed (onnx-diagnostic's venv): the checkout's
    sys.path.append(str(Path(__file__).resolve().parent.parent))
from autopatch.models.builders import (  # noqa: E402  (the package's tiny-model inputs, shared with the sweep)
    DECODE, PADDED_DECODE, PREFILL, RECURRENT_DECODE, SEQ2SEQ_DECODE, SEQ2SEQ_FORWARD, at_own_depth, decode_inputs,
    generate_positions, generator, left_pad, left_pads, make_model, pad_token_id_of, prefill_inputs, random_ids, rope,
    seq2seq_decode_inputs, seq2seq_forward_inputs, transformers_module,
)
from autopatch.models import handmade  # noqa: E402

# The shared tiny sizes and token ids of the package's hand-sized models; sizes only, no code path.
TINY = {**handmade.SIZES, **handmade.TOKENS}

# The special window of the *_past_window cases: every decode set's past (6, 8, 9) and every prefill (5-9
# tokens) is beyond it.  transformers branches in Python on "past the window or not", so the real windows (4096,
# 128) never reach that branch at these sizes: it gets cases of its own.
PAST_WINDOW = handmade.PAST_WINDOW
# The window of the *_cross_window cases, and their sizes: A and B inside it (prefills of 5 and 6 tokens; decode
# steps whose past and new tokens stay below the window), C beyond it (12 tokens; a past of 13): one program
# traced inside the window must serve a past beyond it, as a generation loop does.
CROSS_WINDOW = 8
CROSS_SIZES = {"prefill": [(2, 5), (3, 6), (4, 12)], "decode": [(2, 3, 2), (3, 4, 3), (1, 13, 1)]}


@dataclasses.dataclass
class Case:
    name: str
    family: str  # decoder | decoder-rope | moe | ssm | seq2seq | encoder | vlm | torch
    kind: str  # prefill | decode | forward
    builder: Callable
    needs: tuple = ()  # transformers attribute names that must exist ("unavailable" otherwise)
    dynamic_shapes: Callable | None = None  # (inputs_a) -> dynamic_shapes; None: guessed from a and b
    note: str = ""

    def missing(self):
        """Names in ``needs`` that the installed transformers does not have."""
        if not self.needs:
            return []
        import transformers

        return [n for n in self.needs if not hasattr(transformers, n)]


# ---------------------------------------------------------------------------------------------------------------
PADDED_NOTE = ("left-padded batch, padded differently in A, B and C; position_ids from the mask as generate() makes "
               "them")


def decoder_case(name, config_name, model_name, kind, family="decoder", note="", cache_position=False, sizes=None,
                 variant="", padded=False, **config):
    """``name/kind`` with the class's own code-path settings, ``variant`` naming a special regime's case
    (``_past_window``), ``padded`` its left-padded twin (``_padded``)."""
    kwargs = {**TINY, **config}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if padded:
        if kind == "decode" and sizes is None:
            sizes = PADDED_DECODE
        no_step_mask = "the step takes no mask (generate() drops it after the prefill): the padding is in the state"
        note = "; ".join(n for n in (note, PADDED_NOTE, no_step_mask if cache_position else "") if n)

    def build():
        model, cfg = make_model(config_name, model_name, **at_own_depth(getattr(transformers_module(), config_name), kwargs))
        if kind == "prefill":
            sets = [prefill_inputs(model, cfg, *s, seed=k + 1, pads=left_pads(s[0], s[1], k) if padded else None)
                    for k, s in enumerate(sizes or PREFILL)]
        else:
            sets = [decode_inputs(model, cfg, *s, seed=k + 1, cache_position=cache_position,
                                   pads=left_pads(s[0], s[1], k) if padded else None)
                    for k, s in enumerate(sizes or DECODE)]
        return (model, *sets)

    suffix = variant + ("_padded" if padded else "")
    return Case(f"{name}/{kind}{suffix}", family, kind, build, needs=(config_name, model_name), note=note)


def with_padded(name, config_name, model_name, kind, **options) -> list:
    """The case and its left-padded twin."""
    return [decoder_case(name, config_name, model_name, kind, padded=padded, **options) for padded in (False, True)]


# ---------------------------------------------------------------------------------------------------------------
# decoder-only language models: prefill (use_cache=False) and decode with the model's own cache
# ---------------------------------------------------------------------------------------------------------------

DECODERS = [
    # name, config, model, family, extra config (sizes; the sliding windows and layer patterns are the class's own)
    ("llama", "LlamaConfig", "LlamaForCausalLM", "decoder", {}),
    ("mistral", "MistralConfig", "MistralForCausalLM", "decoder", {}),
    ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", "decoder", {}),
    ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", "decoder", dict(head_dim=16)),
    ("gemma", "GemmaConfig", "GemmaForCausalLM", "decoder", dict(head_dim=16)),
    ("gemma2", "Gemma2Config", "Gemma2ForCausalLM", "decoder", dict(head_dim=16)),
    ("gemma3_text", "Gemma3TextConfig", "Gemma3ForCausalLM", "decoder", dict(head_dim=16)),
    ("phi3", "Phi3Config", "Phi3ForCausalLM", "decoder", dict(pad_token_id=0)),
    ("phi", "PhiConfig", "PhiForCausalLM", "decoder", {}),
    ("gpt2", "GPT2Config", "GPT2LMHeadModel", "decoder",
     dict(n_embd=64, n_layer=2, n_head=4, hidden_size=None, intermediate_size=None, num_hidden_layers=None,
          num_attention_heads=None, num_key_value_heads=None)),
    ("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM", "decoder", dict(num_key_value_heads=None)),
    ("falcon", "FalconConfig", "FalconForCausalLM", "decoder", dict(num_key_value_heads=None, new_decoder_architecture=True, num_kv_heads=2)),
    ("olmo2", "Olmo2Config", "Olmo2ForCausalLM", "decoder", {}),
    ("stablelm", "StableLmConfig", "StableLmForCausalLM", "decoder", {}),
    ("granite", "GraniteConfig", "GraniteForCausalLM", "decoder", {}),
    ("cohere", "CohereConfig", "CohereForCausalLM", "decoder", {}),
    ("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", "decoder", {}),
    ("smollm3", "SmolLM3Config", "SmolLM3ForCausalLM", "decoder", {}),
    ("mixtral", "MixtralConfig", "MixtralForCausalLM", "moe", dict(num_local_experts=4, num_experts_per_tok=2)),
    ("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM", "moe",
     dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)),
    ("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", "moe",
     dict(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    ("gpt_oss", "GptOssConfig", "GptOssForCausalLM", "moe",
     dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2)),
    # Full-attention and lightning (linear) attention layers, the class's own alternation.
    ("minimax", "MiniMaxConfig", "MiniMaxForCausalLM", "moe", dict(num_local_experts=4, num_experts_per_tok=2)),
    ("dots1", "Dots1Config", "Dots1ForCausalLM", "moe",
     dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
          first_k_dense_replace=0, n_group=1, topk_group=1)),
    ("glm4_moe", "Glm4MoeConfig", "Glm4MoeForCausalLM", "moe",
     dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
          first_k_dense_replace=0, n_group=1, topk_group=1)),
    # MLA (keys and values of different head dims); dense layers and MoE layers.
    ("deepseek_v3", "DeepseekV3Config", "DeepseekV3ForCausalLM", "moe",
     dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8,
          v_head_dim=12, n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1,
          moe_intermediate_size=32, n_group=1, topk_group=1)),
]

# Past-the-window cases (window PAST_WINDOW), beside the real ones: case name, the DECODERS row of its model, kinds.
PAST_WINDOW_CASES = [
    ("gemma2", "gemma2", ("prefill", "decode")),
    ("gemma3_text", "gemma3_text", ("prefill", "decode")),
    ("gpt_oss", "gpt_oss", ("prefill", "decode")),
    # Sliding layers only: no full-attention layer to take the seen count from, only the step's attention mask.
    ("mistral_sliding", "mistral", ("decode",)),
]
CROSS_WINDOW_CASES = [
    ("gemma2", "gemma2", ("prefill", "decode")),
    ("gemma3_text", "gemma3_text", ("prefill", "decode")),
    ("mistral_sliding", "mistral", ("decode",)),
]

RECURRENT = [
    ("mamba", "MambaConfig", "MambaForCausalLM",
     dict(state_size=8, expand=2, conv_kernel=4, time_step_rank=8, intermediate_size=None, num_attention_heads=None,
          num_key_value_heads=None)),
    # The class's own block pattern (attention every 8 layers from the 5th): 5 layers.
    ("jamba", "JambaConfig", "JambaForCausalLM",
     dict(num_experts=2, num_experts_per_tok=1, expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8,
          mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=8, use_mamba_kernels=False)),
    # The class's own default has no attention layer at all; a real Bamba has a few among mamba layers.
    ("bamba", "BambaConfig", "BambaForCausalLM",
     dict(attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=1, mamba_d_state=8,
          mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=8)),
    ("falcon_h1", "FalconH1Config", "FalconH1ForCausalLM",
     dict(mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
          mamba_chunk_size=8, mamba_d_ssm=128, head_dim=16)),
    # As for Bamba: the class's own default is mamba layers only.
    ("granitemoehybrid", "GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM",
     dict(layer_types=["mamba", "attention"], num_local_experts=0, shared_intermediate_size=64, mamba_n_heads=4,
          mamba_d_head=32, mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=8)),
    # Gated delta-net (linear attention) layers and a full-attention layer, the class's own 3:1 (4 layers), its
    # own MoE MLPs.
    ("qwen3_next", "Qwen3NextConfig", "Qwen3NextForCausalLM",
     dict(head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8,
          linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2,
          moe_intermediate_size=16, shared_expert_intermediate_size=16)),
]


# Architectures also exported as a prefill (use_cache=False); every decoder has a decode case.  (A prefill for
# all of them would double the run time on 2 cores for little news: the prefill path is the decode path
# without the cache input.)
WITH_PREFILL = {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "gpt2", "mixtral",
                "qwen3_moe", "gpt_oss", "deepseek_v3", "mamba"}


def _rope_variants():
    """RoPE variants on llama (and longrope on phi3, whose config carries the factors): each is a regime of its
    own, named for it."""
    half = 16 // 2  # head_dim 16 -> 8 inverse frequencies
    return [
        ("llama_rope_dynamic", "LlamaConfig", "LlamaForCausalLM", rope("dynamic", factor=2.0)),
        ("llama_rope_yarn", "LlamaConfig", "LlamaForCausalLM",
         rope("yarn", factor=4.0, original_max_position_embeddings=64)),
        ("llama3_rope", "LlamaConfig", "LlamaForCausalLM",
         rope("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)),
        ("phi3_rope_longrope", "Phi3Config", "Phi3ForCausalLM",
         dict(pad_token_id=0, original_max_position_embeddings=8,
              **rope("longrope", short_factor=[1.0] * half, long_factor=[2.0] * half))),
    ]


def _decoder_cases():
    cases = []
    rows = {row[0]: row for row in DECODERS}
    for name, config_name, model_name, family, extra in DECODERS:
        for kind in ("prefill", "decode") if name in WITH_PREFILL else ("decode",):
            cases += with_padded(name, config_name, model_name, kind, family=family, **extra)
    for name, row, kinds in PAST_WINDOW_CASES:
        _, config_name, model_name, family, extra = rows[row]
        for kind in kinds:
            cases += with_padded(name, config_name, model_name, kind, family=family, variant="_past_window",
                                 note=f"sliding_window {PAST_WINDOW} (the class's own is larger): every set past it",
                                 **{**extra, "sliding_window": PAST_WINDOW})
    for name, row, kinds in CROSS_WINDOW_CASES:
        _, config_name, model_name, family, extra = rows[row]
        for kind in kinds:
            cases += with_padded(name, config_name, model_name, kind, family=family, variant="_cross_window",
                                 note=f"sliding_window {CROSS_WINDOW}: traced inside it, run beyond it",
                                 sizes=CROSS_SIZES[kind], **{**extra, "sliding_window": CROSS_WINDOW})
    for name, config_name, model_name, extra in RECURRENT:
        if name in WITH_PREFILL:
            cases += with_padded(name, config_name, model_name, "prefill", family="ssm", **extra)
        cases += with_padded(name, config_name, model_name, "decode", family="ssm", cache_position=(name == "mamba"),
                             sizes=RECURRENT_DECODE, **extra)
    for name, config_name, model_name, extra in _rope_variants():
        cases += with_padded(name, config_name, model_name, "decode", family="decoder-rope", **extra)
    return cases


# ---------------------------------------------------------------------------------------------------------------
# encoder-decoder
# ---------------------------------------------------------------------------------------------------------------

SEQ2SEQ = ("bart", "marian", "t5")


def _half(build):
    """The case in float16 (inputs are token ids: only the model changes)."""

    def half():
        import torch

        model, *sets = build()
        return (model.to(torch.float16), *sets)

    return half


def _seq2seq_forward(name):
    model, cfg = handmade.build(name)
    return (model, *[seq2seq_forward_inputs(model, cfg, *s, seed=i + 1) for i, s in enumerate(SEQ2SEQ_FORWARD)])


# (batch, source, past, seq): whisper's source is its fixed number of audio frames, the sizes say nothing of it
WHISPER_DECODE = [(2, 0, 3, 2), (3, 0, 4, 3), (1, 0, 6, 1)]


def _seq2seq_decode(name):
    model, cfg = handmade.build(name)
    sizes = WHISPER_DECODE if name == "whisper" else SEQ2SEQ_DECODE
    return (model, *[seq2seq_decode_inputs(model, cfg, *s, seed=i + 1) for i, s in enumerate(sizes)])


def _seq2seq_cases():
    cases = []
    for name in (*SEQ2SEQ, "whisper"):
        needs = handmade.SEQ2SEQ[name][:2]
        forward, decode = partial(_seq2seq_forward, name), partial(_seq2seq_decode, name)
        if name in ("bart", "t5"):
            cases.append(Case(f"{name}/forward", "seq2seq", "forward", forward, needs=needs))
        if name in ("bart", "marian"):  # their encoder layers clamp float16 behind a tensor condition
            cases.append(Case(f"{name}_fp16/forward", "seq2seq", "forward", _half(forward), needs=needs,
                              note="float16: the encoder's clamp `if`"))
        cases.append(Case(f"{name}/decode", "seq2seq", "decode", decode, needs=needs))
    return cases


# ---------------------------------------------------------------------------------------------------------------
# encoders and vision
# ---------------------------------------------------------------------------------------------------------------

ENCODERS = [
    ("bert", "BertConfig", "BertModel", {}),
    ("roberta", "RobertaConfig", "RobertaModel", dict(pad_token_id=1)),
    ("deberta_v2", "DebertaV2Config", "DebertaV2Model", {}),
    # The class's own local window (128) and global layer every 3rd: inert at these lengths, as for short inputs.
    ("modernbert", "ModernBertConfig", "ModernBertModel", dict(cls_token_id=1, sep_token_id=2)),
]

# A local window of 8 (4 tokens each side) that every input set (5-9 tokens) is past: a case of its own.
ENCODERS_PAST_WINDOW = [
    ("modernbert", dict(local_attention=8), "local_attention 8 (the class's own is 128): every set past its window"),
]


def _encoder_cases():
    import_free = []

    def encoder(name, config_name, model_name, extra, variant="", note=""):
        kwargs = {**TINY, "num_key_value_heads": None, **extra}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}

        def build():
            import torch

            model, cfg = make_model(config_name, model_name, **at_own_depth(getattr(transformers_module(), config_name), kwargs))
            sets = []
            for i, (batch, seq) in enumerate(PREFILL):
                g = generator(i + 1)
                sets.append({"input_ids": random_ids(g, cfg.vocab_size, batch, seq),
                             "attention_mask": torch.ones(batch, seq, dtype=torch.long)})
            return (model, *sets)

        return Case(f"{name}/forward{variant}", "encoder", "forward", build, needs=(config_name, model_name),
                    note=note)

    rows = {row[0]: row for row in ENCODERS}
    for name, config_name, model_name, extra in ENCODERS:
        import_free.append(encoder(name, config_name, model_name, extra))
    for name, special, note in ENCODERS_PAST_WINDOW:
        _, config_name, model_name, extra = rows[name]
        import_free.append(encoder(name, config_name, model_name, {**extra, **special}, variant="_past_window",
                                   note=note))

    def vision(name, config_name, model_name, kwargs, channels=3):
        def build():
            import torch

            model, cfg = make_model(config_name, model_name, **kwargs)
            size = cfg.image_size
            sets = [{"pixel_values": torch.randn(b, channels, size, size, generator=generator(b))} for b in (2, 3, 4)]
            return (model, *sets)

        return Case(f"{name}/forward", "encoder", "forward", build, needs=(config_name, model_name),
                    note="batch only is dynamic (the image size is fixed by the config)")

    vit = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
               patch_size=8)
    import_free.append(vision("vit", "ViTConfig", "ViTModel", vit))
    return import_free


# ---------------------------------------------------------------------------------------------------------------
# vision-language: a tiny llava (CLIP vision tower + llama)
# ---------------------------------------------------------------------------------------------------------------


def _llava(padded=False):
    import torch

    tf = transformers_module()
    vision = tf.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 image_size=16, patch_size=8, projection_dim=32)
    text = tf.LlamaConfig(**{**TINY, "vocab_size": 130})
    image_token = 129
    config = tf.LlavaConfig(vision_config=vision, text_config=text, image_token_index=image_token,
                            image_seq_length=4, vision_feature_layer=-1)
    if hasattr(config, "image_token_id"):
        config.image_token_id = image_token
    torch.manual_seed(0)
    model = tf.LlavaForConditionalGeneration(config).eval()
    sets = []
    for i, (batch, seq) in enumerate(PREFILL):
        g = generator(i + 1)
        text_ids = random_ids(g, 128, batch, seq)
        ids = torch.cat([torch.full((batch, 4), image_token), text_ids], dim=1)  # 4 patches, CLS dropped
        sets.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                     "pixel_values": torch.randn(batch, 3, 16, 16, generator=g), "use_cache": False})
    if padded:
        sets = _left_padded(model, sets, [seq for _, seq in PREFILL])
    return (model, *sets)


def _left_padded(model, sets: list, rooms: list) -> list:
    """Prefill sets of a vision-language model left-padded: set k's rows by ``left_pads``, never more than its
    text length ``rooms[k]`` minus one, so that only text after the image placeholders is dropped and every row
    keeps its images."""
    pad_id = pad_token_id_of(model.config)
    for k, (inputs, room) in enumerate(zip(sets, rooms)):
        left_pad(inputs, left_pads(inputs["input_ids"].shape[0], room, k), pad_id)
        generate_positions(model, inputs, inputs["input_ids"].shape[1])
    return sets


# ---------------------------------------------------------------------------------------------------------------
# pure torch: dynamic shapes without transformers
# ---------------------------------------------------------------------------------------------------------------


def _torch_module(forward):
    import torch

    class Model(torch.nn.Module):
        pass

    Model.forward = forward
    Model.__name__ = forward.__name__
    return Model().eval()


def _randn(*shape, seed=0):
    import torch

    return torch.randn(*shape, generator=generator(seed))


def _broadcast_add():
    def binary(self, x, y):
        return x + y, x * y, x - y

    # traced at equal sizes; run where the two inputs broadcast against each other
    return (_torch_module(binary), {"x": _randn(2, 3, seed=1), "y": _randn(2, 3, seed=2)},
            {"x": _randn(3, 4, seed=3), "y": _randn(4, 5, seed=4)}, {"x": _randn(1, 3, seed=5), "y": _randn(4, 3, seed=6)})


def _broadcast_chain():
    def chain(self, x, y):
        z = x + y
        return z * x, z - y

    # a broadcast result against one of its own inputs: torch's infer_size compares Max(a, b) with a
    return (_torch_module(chain), {"x": _randn(2, 3, seed=1), "y": _randn(2, 3, seed=2)},
            {"x": _randn(3, 4, seed=3), "y": _randn(4, 5, seed=4)}, {"x": _randn(1, 3, seed=5), "y": _randn(4, 3, seed=6)})


def _broadcast_where():
    import torch

    def where(self, x, y):
        return torch.where(x > 0, x, y), torch.maximum(x, y)

    return (_torch_module(where), {"x": _randn(2, 3, seed=1), "y": _randn(2, 3, seed=2)},
            {"x": _randn(3, 4, seed=3), "y": _randn(4, 5, seed=4)}, {"x": _randn(4, 1, seed=5), "y": _randn(4, 5, seed=6)})


def _broadcast_rows():
    def rows(self, x, bias):
        return (x + bias).relu()

    # x (n, d) + bias (m, d), m == n or 1: independent leading dims
    return (_torch_module(rows), {"x": _randn(3, 8, seed=1), "bias": _randn(3, 8, seed=2)},
            {"x": _randn(4, 8, seed=3), "bias": _randn(5, 8, seed=4)}, {"x": _randn(6, 8, seed=5), "bias": _randn(1, 8, seed=6)})


def _reshape():
    def reshape(self, x):
        b, s, d = x.shape
        heads = x.reshape(b, s, 4, d // 4).transpose(1, 2)
        return heads.softmax(-1).transpose(1, 2).reshape(b * s, d)

    return (_torch_module(reshape), {"x": _randn(2, 5, 16, seed=1)}, {"x": _randn(3, 7, 16, seed=2)},
            {"x": _randn(4, 9, 16, seed=3)})


def _reshape_flatten():
    import torch

    def flatten(self, x, y):
        # concatenation then a view over the joined dim
        z = torch.cat([x, y], dim=1)
        return z.view(z.shape[0], -1, 2).sum(-1)

    return (_torch_module(flatten), {"x": _randn(2, 4, seed=1), "y": _randn(2, 6, seed=2)},
            {"x": _randn(3, 6, seed=3), "y": _randn(3, 8, seed=4)}, {"x": _randn(5, 8, seed=5), "y": _randn(5, 2, seed=6)})


def _kwargs_forward():
    import torch

    def varkw(self, input_ids, attention_mask=None, **kwargs):
        return (input_ids.float().sum(dim=1) + attention_mask.sum(dim=1)
                + kwargs["past"].sum(dim=1) * kwargs["cache"].shape[1])

    def inputs(batch, seq, cache, seed):
        return {"input_ids": torch.randint(0, 10, (batch, seq), generator=generator(seed)),
                "attention_mask": torch.ones(batch, seq), "past": _randn(batch, 3, seed=seed),
                "cache": _randn(batch, cache, seed=seed + 1)}

    return (_torch_module(varkw), inputs(2, 5, 4, 1), inputs(3, 7, 6, 2), inputs(4, 9, 8, 3))


def _mlp():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = model

        def forward(self, x):
            return self.mlp(x)

    return (Wrap().eval(), {"x": _randn(2, 5, 8, seed=1)}, {"x": _randn(3, 7, 8, seed=2)}, {"x": _randn(4, 9, 8, seed=3)})


def _torch_cases():
    return [
        Case("torch_broadcast_add/forward", "torch", "forward", _broadcast_add,
             note="x + y with independent dims, traced at equal sizes, run at (1,3)+(4,3)"),
        Case("torch_broadcast_chain/forward", "torch", "forward", _broadcast_chain,
             note="(x + y) * x: a broadcast result against one of its inputs, run at (1,3) and (4,3)"),
        Case("torch_broadcast_where/forward", "torch", "forward", _broadcast_where,
             note="torch.where / maximum (refs path), run at (4,1) vs (4,5)"),
        Case("torch_broadcast_rows/forward", "torch", "forward", _broadcast_rows,
             note="(n,d) + (m,d), run with m=1"),
        Case("torch_reshape/forward", "torch", "forward", _reshape, note="split heads, transpose, merge"),
        Case("torch_cat_view/forward", "torch", "forward", _reshape_flatten, note="cat then view(-1, 2)"),
        Case("torch_kwargs/forward", "torch", "forward", _kwargs_forward,
             note="forward(input_ids, attention_mask=None, **kwargs) with dynamic kwargs"),
        Case("torch_mlp/forward", "torch", "forward", _mlp, note="control: passes everywhere"),
    ]


#: The package's tiny VLMs (autopatch.models.vlms: one definition for tests and benchmarks), imported when a case is
#: built.
VLMS = [("vipllava", "VipLlavaConfig"), ("paligemma", "PaliGemmaConfig"), ("aya_vision", "AyaVisionConfig"),
           ("internvl", "InternVLConfig"), ("got_ocr2", "GotOcr2Config"), ("cohere2_vision", "Cohere2VisionConfig"),
           ("fuyu", "FuyuConfig")]


IDEFICS_VLMS = [("idefics2", "Idefics2Config"), ("idefics3", "Idefics3Config"), ("smolvlm", "SmolVLMConfig")]


# What autopatch.models.vlms pins for the tests' own regimes, given back to each text config class here: its
# max_position_embeddings 256, and Cohere2's window 4 in a two-layer pattern (aya_vision, cohere2_vision).
VLMS_PIN = ("max_position_embeddings", "sliding_window", "layer_types", "sliding_window_pattern",
            "_sliding_window_pattern", "rope_parameters", "rope_scaling")

# Vision-language models whose text model has sliding layers: also past a window of PAST_WINDOW.
VLM_PAST_WINDOW = ("aya_vision", "cohere2_vision")


def own_text_settings(model, **special):
    """The hand-sized VLM rebuilt (same seed, same sizes) with its text config class's own code-path settings
    (``VLMS_PIN``) and pattern depth, then ``special`` (a past-the-window case's window)."""
    import torch

    config, text = model.config, model.config.text_config
    kwargs = {k: v for k, v in text.to_dict().items() if k not in VLMS_PIN}
    config.text_config = type(text)(**at_own_depth(type(text), {**kwargs, **special}))
    torch.manual_seed(0)
    return type(model)(config).eval()


def _vlm_cases():
    def case(name, config_class, padded=False, variant="", special=None):
        def build():
            from autopatch.models import vlms

            model = own_text_settings(vlms.build(name), **(special or {}))
            sets = [{**vlms.prefill(name, batch, seq, seed=i + 1), "use_cache": False}
                    for i, (batch, seq) in enumerate(PREFILL)]
            if padded:
                sets = _left_padded(model, sets, [seq for _, seq in PREFILL])
            return (model, *sets)

        return Case(f"{name}/prefill{variant}{'_padded' if padded else ''}", "vlm", "prefill", build,
                    needs=(config_class,), note=_vlm_note("4 image tokens per image, dynamic image batch and text "
                                                          "length", padded, special))

    def idefics(name, config_class, padded=False):
        sizes = [(2, 5, 2), (3, 7, 3), (4, 9, 1)]

        def build():
            from autopatch.models import vlms

            model = own_text_settings(vlms.build_idefics(name))
            sets = [{**vlms.idefics_prefill(batch, seq, images, seed=i + 1), "use_cache": False}
                    for i, (batch, seq, images) in enumerate(sizes)]
            if padded:
                sets = _left_padded(model, sets, [seq for _, seq, _ in sizes])
            return (model, *sets)

        return Case(f"{name}/prefill{'_padded' if padded else ''}", "vlm", "prefill", build, needs=(config_class,),
                    note=_vlm_note("several images per sample: dynamic batch, images per sample and text length",
                                   padded))

    cases = []
    for name, config_class in VLMS:
        cases += [case(name, config_class, padded) for padded in (False, True)]
        if name in VLM_PAST_WINDOW:
            cases += [case(name, config_class, padded, "_past_window", {"sliding_window": PAST_WINDOW})
                      for padded in (False, True)]
    for name, config_class in IDEFICS_VLMS:
        cases += [idefics(name, config_class, padded) for padded in (False, True)]
    return cases


def _vlm_note(note, padded, special=None):
    if special:
        note += f"; sliding_window {special['sliding_window']} (the class's own is larger): every set past it"
    return note + ("; " + PADDED_NOTE if padded else "")


def all_cases():
    cases = _torch_cases() + _decoder_cases() + _seq2seq_cases() + _encoder_cases()
    llava_note = "CLIP vision tower + llama, 4 image tokens, dynamic batch and text length"
    needs = ("LlavaConfig", "LlavaForConditionalGeneration", "CLIPVisionConfig")
    cases.append(Case("llava/prefill", "vlm", "prefill", _llava, needs=needs, note=llava_note))
    cases.append(Case("llava/prefill_padded", "vlm", "prefill", lambda: _llava(padded=True), needs=needs,
                      note=_vlm_note(llava_note, True)))
    return cases + _vlm_cases()


CASES = {case.name: case for case in all_cases()}
