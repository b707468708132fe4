"""Tiny transformers models built from configs (random weights, nothing downloaded), and their export inputs.

Decode-step inputs are built by running the model's own prefill eagerly, so the cache has exactly the layers
and shapes the model builds for itself (sliding, MLA, linear attention...).
"""

import torch
import transformers

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2)

DECODERS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    # Sliding-window layers next to full ones; prefills longer than the window exercise cumulative_length.
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(head_dim=16, sliding_window=4, layer_types=["sliding_attention", "full_attention"])),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(head_dim=16, sliding_window=4, num_local_experts=4, num_experts_per_tok=2,
                     layer_types=["sliding_attention", "full_attention"])),
    # MLA: keys and values have different head dims. Dense layers only (first_k_dense_replace=2): its MoE
    # routing is a separate problem (issue 5).
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8,
                         v_head_dim=12, n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=2,
                         moe_intermediate_size=32, n_group=1, topk_group=1)),
}


SEQ2SEQ = {
    "bart": ("BartConfig", "BartForConditionalGeneration",
             dict(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)),
    "t5": ("T5Config", "T5ForConditionalGeneration",
           dict(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4)),
}


# Whisper's encoder takes exactly 2 * max_source_positions frames: batch and decoder lengths vary, frames do not.
WHISPER = dict(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
               max_source_positions=16, max_target_positions=64, pad_token_id=1, decoder_start_token_id=2,
               eos_token_id=2, bos_token_id=2, suppress_tokens=None, begin_suppress_tokens=None)
SEQ2SEQ["whisper"] = ("WhisperConfig", "WhisperForConditionalGeneration", WHISPER)


def build_seq2seq(name):
    config_name, model_name, kwargs = SEQ2SEQ[name]
    config = getattr(transformers, config_name)(**kwargs)
    torch.manual_seed(0)
    return getattr(transformers, model_name)(config).eval(), config


def seq2seq_decode_inputs(model, config, batch, source, past, seq, seed=0):
    """``source``: source tokens (text models); whisper's audio features have a fixed number of frames."""
    g = torch.Generator().manual_seed(seed)
    if config.model_type == "whisper":
        encoder = {"input_features": torch.randn(batch, config.num_mel_bins, 2 * config.max_source_positions,
                                                 generator=g)}
    else:
        encoder = {"input_ids": torch.randint(3, config.vocab_size, (batch, source), generator=g)}
    with torch.no_grad():
        prefix = torch.randint(3, config.vocab_size, (batch, past), generator=g)
        cache = model(**encoder, decoder_input_ids=prefix, use_cache=True).past_key_values
    return {
        **encoder,
        "decoder_input_ids": torch.randint(3, config.vocab_size, (batch, seq), generator=g),
        "past_key_values": cache,
    }


def build(name):
    config_name, model_name, extra = DECODERS[name]
    config = getattr(transformers, config_name)(**{**COMMON, **extra})
    torch.manual_seed(0)
    return getattr(transformers, model_name)(config).eval(), config


def decode_inputs(model, config, batch, past, seq, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        prefill = torch.randint(0, config.vocab_size, (batch, past), generator=g)
        cache = model(input_ids=prefill, use_cache=True).past_key_values
    return {
        "input_ids": torch.randint(0, config.vocab_size, (batch, seq), generator=g),
        "attention_mask": torch.ones(batch, past + seq, dtype=torch.long),
        "past_key_values": cache,
    }


def copy_inputs(inputs):
    """A deep copy: the model appends to the cache it is given."""
    import copy

    return copy.deepcopy(inputs)
