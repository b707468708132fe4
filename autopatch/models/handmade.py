"""Hand-sized models by name, for the cases a config class's defaults do not reach: one definition for the tests and
the benchmark catalogue (the shrinker in ``tiny`` builds any architecture from its defaults; these pick a regime).

    SIZES      the shared tiny sizes (hidden 64, 2 layers, 4 heads, 2 kv heads, vocab 128); sizes only, no code path
    TOKENS     the special token ids those models use
    DECODERS   decoder-only models with the settings a test needs (a window the inputs are past, MLA head dims)
    SEQ2SEQ    encoder-decoder models: BART, Marian, T5, Whisper

``build(name)`` returns ``(model, config)``, random weights seeded the same way each time.  Input sets come from
``builders``.  Imports torch and transformers lazily.
"""

from __future__ import annotations

from typing import NamedTuple

from autopatch.models.builders import make_model, transformers_module


class Handmade(NamedTuple):
    config: str  # the config class's name in transformers
    model: str  # the model class's name
    settings: dict  # on top of the config class's defaults


SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)

# A window of 4 that every input set is past: transformers branches in Python on "past the window or not", and the
# real windows (4096, 512) never reach that branch at tiny sizes.
PAST_WINDOW = 4

DECODERS = {
    "llama": Handmade("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": Handmade("Qwen2Config", "Qwen2ForCausalLM", {}),
    # Sliding-window layers next to full ones; prefills longer than the window exercise cumulative_length.
    "gemma3": Handmade("Gemma3TextConfig", "Gemma3ForCausalLM",
                       dict(head_dim=16, sliding_window=PAST_WINDOW, layer_types=["sliding_attention", "full_attention"])),
    "mistral": Handmade("MistralConfig", "MistralForCausalLM", {}),  # its own window (4096): every set inside it
    "mistral_past_window": Handmade("MistralConfig", "MistralForCausalLM", dict(sliding_window=PAST_WINDOW)),
    # Gemma 3's own five sliding layers to one full; a window of 8 that a past of 9 crosses.
    "gemma3_own_pattern": Handmade("Gemma3TextConfig", "Gemma3ForCausalLM",
                                   dict(num_hidden_layers=6, head_dim=16, sliding_window=8)),
    # Phi-3 with longrope: short factors up to 8 positions, long ones past them (4.x and 5.3-5.12 branch on that
    # in Python).  ``rope_scaling`` is read by every version we run.
    "phi3_longrope": Handmade("Phi3Config", "Phi3ForCausalLM",
                              dict(max_position_embeddings=64, original_max_position_embeddings=8, pad_token_id=0,
                                   rope_scaling={"type": "longrope", "short_factor": [1.0] * 8,  # head_dim 16: 8
                                                 "long_factor": [1.0 + i / 4 for i in range(8)]})),
    "gpt_oss": Handmade("GptOssConfig", "GptOssForCausalLM",
                        dict(head_dim=16, sliding_window=PAST_WINDOW, num_local_experts=4, num_experts_per_tok=2,
                             layer_types=["sliding_attention", "full_attention"])),
    # MLA: keys and values have different head dims.  Dense layers only (first_k_dense_replace=2): its MoE routing
    # is proven on its own.
    "deepseek_v3": Handmade("DeepseekV3Config", "DeepseekV3ForCausalLM",
                            dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
                                 qk_nope_head_dim=8, v_head_dim=12, n_routed_experts=4, num_experts_per_tok=2,
                                 first_k_dense_replace=2, moe_intermediate_size=32, n_group=1, topk_group=1)),
}

BART_LIKE = dict(vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, pad_token_id=1,
                 decoder_start_token_id=2, eos_token_id=2)

SEQ2SEQ = {
    "bart": Handmade("BartConfig", "BartForConditionalGeneration", BART_LIKE),
    "marian": Handmade("MarianConfig", "MarianMTModel", {**BART_LIKE, "decoder_vocab_size": 128}),
    "t5": Handmade("T5Config", "T5ForConditionalGeneration",
                   dict(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                        decoder_start_token_id=0)),
    # max_source_positions is a size here: the encoder takes exactly twice as many frames, and no branch reads it.
    "whisper": Handmade("WhisperConfig", "WhisperForConditionalGeneration",
                        dict(BART_LIKE, num_mel_bins=16, max_source_positions=16, bos_token_id=2, suppress_tokens=None,
                             begin_suppress_tokens=None)),
}


def settings(name: str) -> Handmade:
    """The row of ``name`` in DECODERS or SEQ2SEQ, decoders with the shared sizes under their own settings."""
    if name in DECODERS:
        row = DECODERS[name]
        return row._replace(settings={**SIZES, **row.settings})
    if name in SEQ2SEQ:
        return SEQ2SEQ[name]
    raise KeyError(f"no hand-sized model {name!r}; choose one of {', '.join([*DECODERS, *SEQ2SEQ])}")


def config(name: str, **extra):
    """The config of the hand-sized model ``name`` alone (``extra`` on top: ``architectures`` for a saved one)."""
    row = settings(name)
    return getattr(transformers_module(), row.config)(**row.settings, **extra)


def build(name: str):
    """``(model, config)`` of the hand-sized model ``name``, in eval mode."""
    row = settings(name)
    return make_model(row.config, row.model, **row.settings)
