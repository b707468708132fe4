"""Hand-sized state-space and hybrid models by name, and the decode steps a user's ``generate()`` gives them: one
definition for the cache, scan and validate tests (``handmade`` has the attention-only decoders).

    SIZES          the shared tiny sizes here (hidden 32, vocab 64): a recurrent layer's states are what is proven,
                   and the mixers' own sizes (state, conv kernel, heads) are set per model
    STATE_SPACE    Mamba, FalconMamba and Mamba2: recurrent layers only
    HYBRIDS        recurrent or convolutional layers next to attention: Jamba, Bamba, GraniteMoeHybrid, FalconH1,
                   LFM2
    LINEAR         linear-attention layers next to full attention: the gated delta net (Qwen3-Next, Qwen3.5,
                   Qwen3.5-MoE, OlmoHybrid), Kimi delta attention (Kimi-Linear, Bailing-hybrid) and MiniMax's
                   lightning attention

``build(name)`` returns ``(model, config)``, random weights seeded the same way each time.  ``ssm_decode_inputs``
and ``hybrid_decode_inputs`` build a decode step from the model's own eager prefill.  Imports torch and
transformers lazily.
"""

from __future__ import annotations

from autopatch.models.builders import (empty_hybrid_cache, generator, hybrid_cache_class, make_model, random_ids,
                                       transformers_module)
from autopatch.models.handmade import Handmade

SIZES = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)

# Mamba2's mixer at the hybrids' hidden size (4 heads of 16 = 2 x 32): chunks of 8, so that a prefill of a few tokens
# already spans chunks and the chunked scan is what runs.
MAMBA2_MIXER = dict(mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=4,
                    mamba_expand=2, mamba_chunk_size=8)

# Linear-attention layer then full attention (the classes' own pattern starts that way), head sizes of 8, more value
# heads than key heads (the grouped case).
LINEAR_LAYERS = dict(SIZES, head_dim=8, layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
                     linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4)
# A sparse block of 4 experts, 2 per token, and a shared expert: Qwen3-Next's and Qwen3.5-MoE's block at tiny size.
QWEN_EXPERTS = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)

# Two mamba layers, a state of 4: conv kernel 4 and expand 2 (the classes' defaults); Mamba's and FalconMamba's.
MAMBA = dict(vocab_size=64, hidden_size=32, state_size=4, num_hidden_layers=2, conv_kernel=4, expand=2)

STATE_SPACE = {
    "mamba": Handmade("MambaConfig", "MambaForCausalLM", MAMBA),
    "falcon_mamba": Handmade("FalconMambaConfig", "FalconMambaForCausalLM", MAMBA),
    # The fixed-size MambaCache of 4.48-4.55 (test_legacy_caches): the vocabulary of the other fixed-size cases
    # there (128), a state of 8.
    "mamba_legacy": Handmade("MambaConfig", "MambaForCausalLM",
                             dict(vocab_size=128, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2,
                                  conv_kernel=4)),
    # Chunks of 8 (see MAMBA2_MIXER); its one-token path is chosen by the cache position alone on 4.x and 5.0-5.4.
    "mamba2": Handmade("Mamba2Config", "Mamba2ForCausalLM",
                       dict(vocab_size=64, hidden_size=32, state_size=8, num_heads=4, head_dim=16, expand=2, n_groups=1,
                            num_hidden_layers=2, conv_kernel=4, chunk_size=8)),
}

HYBRIDS = {
    # Layer 0 mamba with a dense MLP, layer 1 attention with a 4-expert sparse block.
    "jamba": Handmade("JambaConfig", "JambaForCausalLM",
                      dict(SIZES, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                           expert_layer_offset=1, num_experts=4, num_experts_per_tok=2, mamba_d_state=4,
                           mamba_expand=2, use_mamba_kernels=False)),
    # Layer 0 mamba, layer 1 attention, every MLP dense (one expert, a period no layer reaches): the cache alone.
    "jamba_dense": Handmade("JambaConfig", "JambaForCausalLM",
                            dict(SIZES, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=100,
                                 num_experts=1, mamba_d_state=4, mamba_expand=2, use_mamba_kernels=False)),
    # Mamba, attention (a cache needs one), mamba: two scans per prefill; the middle layer MoE (the class's own
    # expert period, 2), a dt rank of 8.
    "jamba_three": Handmade("JambaConfig", "JambaForCausalLM",
                            dict(SIZES, num_hidden_layers=3, attn_layer_period=3, attn_layer_offset=1, num_experts=2,
                                 mamba_d_state=4, mamba_dt_rank=8)),
    # Layer 0 a Mamba2 mixer, layer 1 attention.
    "bamba": Handmade("BambaConfig", "BambaForCausalLM", dict(SIZES, attn_layer_indices=[1], **MAMBA2_MIXER)),
    # Layer 0 mamba, layer 1 attention; no experts, a dense shared MLP.
    "granitemoehybrid": Handmade("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM",
                                 dict(SIZES, layer_types=["mamba", "attention"], num_local_experts=0,
                                      shared_intermediate_size=64, **MAMBA2_MIXER)),
    # Attention and mamba side by side in every layer.
    "falcon_h1": Handmade("FalconH1Config", "FalconH1ForCausalLM", dict(SIZES, mamba_d_ssm=64, **MAMBA2_MIXER)),
    # Layer 0 a short convolution (3 cached positions), layer 1 attention.
    "lfm2": Handmade("Lfm2Config", "Lfm2ForCausalLM",
                     dict(SIZES, layer_types=["conv", "full_attention"], conv_L_cache=3)),
}

LINEAR = {
    # Dense MLPs in both layers (mlp_only_layers): the experts are proven on their own, the linear layer here.
    "qwen3_next": Handmade("Qwen3NextConfig", "Qwen3NextForCausalLM",
                           dict(LINEAR_LAYERS, **QWEN_EXPERTS, mlp_only_layers=[0, 1])),
    "qwen3_5": Handmade("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", LINEAR_LAYERS),
    "qwen3_5_moe": Handmade("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(LINEAR_LAYERS, **QWEN_EXPERTS)),
    # Its special tokens are outside the class defaults' range at a vocabulary of 64.
    "olmo_hybrid": Handmade("OlmoHybridConfig", "OlmoHybridForCausalLM", dict(LINEAR_LAYERS, pad_token_id=0,
                                                                              eos_token_id=1)),
    # Qwen4-Exp's text model: one linear-attention layer alone (its indexed attention layers have rows and tests of
    # their own: tests/test_transformers_text_masks.py).
    "qwen4_exp": Handmade("Qwen4ExpTextConfig", "Qwen4ExpForCausalLM",
                          dict(LINEAR_LAYERS, num_hidden_layers=1, layer_types=["linear_attention"])),
    # Kimi delta attention (linear, 4 heads of 8) then full low-rank attention; the class's MLP pattern: dense, then
    # 4 experts (2 per token).
    "kimi_linear": Handmade("KimiLinearConfig", "KimiLinearForCausalLM",
                            dict(SIZES, num_key_value_heads=4, layer_types=["linear_attention", "full_attention"],
                                 linear_head_dim=8, linear_num_heads=4, kv_lora_rank=16, q_lora_rank=None,
                                 qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, num_local_experts=4,
                                 num_experts_per_tok=2, moe_intermediate_size=16, pad_token_id=0, bos_token_id=1,
                                 eos_token_id=2)),
    # Its layer groups (layer_group_size: the last layer of each group full attention) at two layers: linear, full;
    # the first layers dense (first_k_dense_replace, 2 by default: both here).
    "bailing_hybrid": Handmade("BailingHybridConfig", "BailingHybridForCausalLM",
                               dict(SIZES, num_key_value_heads=4, head_dim=8, layer_group_size=2, kv_lora_rank=16,
                                    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, num_local_experts=4,
                                    n_group=1, topk_group=1, num_experts_per_tok=2, moe_intermediate_size=16,
                                    num_mtp_layers=0, pad_token_id=0, eos_token_id=1)),
    # The class's own layer pattern (full, linear, full, linear...) at two layers; its own block size (256), which
    # a step of a few tokens never fills.
    "minimax": Handmade("MiniMaxConfig", "MiniMaxForCausalLM",
                        dict(SIZES, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
                             layer_types=["full_attention", "linear_attention"])),
}

MODELS = {**STATE_SPACE, **HYBRIDS, **LINEAR}


def build(name: str):
    """``(model, config)`` of the hand-sized model ``name``, in eval mode."""
    if name not in MODELS:
        raise KeyError(f"no hand-sized recurrent model {name!r}; choose one of {', '.join(MODELS)}")
    row = MODELS[name]
    return make_model(row.config, row.model, **row.settings)


def local_caches() -> bool:
    """transformers 4.x and 5.0-5.4 keep recurrent states in model-local caches, stepped with a ``cache_position``;
    5.5 on in DynamicCache's linear-attention layers (and the hybrids' forward takes no cache position)."""
    from packaging.version import Version

    return Version(transformers_module().__version__) < Version("5.5")


def ssm_decode_inputs(model, batch, past, seed, position=None):
    """A one-token decode step after an eager prefill of ``past`` tokens, with no attention mask (generate() drops
    it after the prefill: the state holds the prompt).  The cache goes under the name the model's output gives it
    (Mamba's and Mamba2's ``cache_params``, the others' ``past_key_values``); a model-local cache also takes the
    step's ``cache_position`` (``position``, by default ``past``), as generate() passes it."""
    import torch

    g = generator(seed)
    vocab = model.config.vocab_size
    with torch.no_grad():
        out = model(input_ids=random_ids(g, vocab, batch, past, low=0), use_cache=True)
    name = "cache_params" if hasattr(out, "cache_params") else "past_key_values"
    inputs = {"input_ids": random_ids(g, vocab, batch, 1, low=0), name: getattr(out, name)}
    if local_caches():
        position = past if position is None else position
        inputs["cache_position"] = torch.arange(position, position + 1)
    return inputs


def hybrid_decode_inputs(model, batch, past, seed, padded=False, seq=1):
    """A decode step of ``seq`` new tokens after an eager prefill of ``past`` tokens, with the attention mask of
    both; ``padded``: the first row's prompt is left-padded by 2.  Where the states live in the model's own hybrid
    cache (4.x, 5.0-5.4), the prefill is given an empty one (those models use only a cache they are given) and
    the step a ``cache_position``, as generate() does."""
    import torch

    g = generator(seed)
    vocab = model.config.vocab_size
    mask = torch.ones(batch, past, dtype=torch.long)
    if padded:
        mask[0, :2] = 0
    prefill = {"input_ids": random_ids(g, vocab, batch, past, low=0), "attention_mask": mask, "use_cache": True}
    local = local_caches()
    if local and hybrid_cache_class(model) is not None:
        prefill.update(past_key_values=empty_hybrid_cache(model, model.config, batch),
                       cache_position=torch.arange(past))
    with torch.no_grad():
        out = model(**prefill)
    inputs = {"input_ids": random_ids(g, vocab, batch, seq, low=0),
              "attention_mask": torch.cat([mask, torch.ones(batch, seq, dtype=torch.long)], dim=1),
              "past_key_values": out.past_key_values}
    if local:
        inputs["cache_position"] = torch.arange(past, past + seq)
    return inputs
