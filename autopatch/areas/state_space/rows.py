"""The rows of this area. State-space models and model-local caches: selective scans, gated delta rules and lightning
attention as torch scans, one-token decode paths, and cache code that takes ``len()`` of a tensor.
"""

from __future__ import annotations

from ...spec import PatchSpec, table_row

#: Hybrid mamba/attention models of 4.x and 5.0-5.4 (model-local caches until 5.5) whose decode step exports with
#: their cache row, the mask replacement and the mixer rewrite (falcon_h1: and its cache's update).
#: (model, cache class, class with _update_mamba_mask, mixer class with torch_forward, fingerprints of that source
#: on 4.57.6 and 5.3.0).
HybridMamba = table_row("HybridMamba", ("model", "cache_class", "mask_owner", "mixer", "fingerprints"))
HYBRID_MAMBA_4X = (
    HybridMamba("bamba", "HybridMambaAttentionDynamicCache", "BambaModel", "BambaMixer",
                ("a1f8754ec6b6", "9952e7d77950")),
    HybridMamba("granitemoehybrid", "HybridMambaAttentionDynamicCache", "GraniteMoeHybridModel",
                "GraniteMoeHybridMambaLayer",
                ("a1f8754ec6b6", "9952e7d77950")),
    HybridMamba("falcon_h1", "FalconHybridMambaAttentionDynamicCache", "FalconH1Model", "FalconH1Mixer",
                ("04d321f63f14", "da683ccbe8ef")),
)

#: Where those models keep model-local caches (4.x, and 5.x until DynamicCache took their states in 5.5).
LOCAL_CACHES = "transformers>=4.56,<5.5"

#: 5.23 linear attentions whose prefill (torch path, without flash-linear-attention) walks 64-token chunks in a
#: Python loop, one source each over these models: (what it is, its decay, the models, the module function, the
#: row's name, the rewriter, the function's fingerprint, the loop). GLM-5-Next has Kimi delta attention's source
#: too; its row waits for its indexer's.
ChunkedPrefill = table_row("ChunkedPrefill", ("attention", "decay", "models", "function", "row", "rewriter",
                                              "fingerprint", "loop"))
CHUNKED_PREFILLS = (
    ChunkedPrefill("The gated delta net", "per head",
                   ("qwen3_next", "qwen3_5", "qwen3_5_moe", "olmo_hybrid", "qwen4_exp"),
                   "torch_chunk_gated_delta_rule", "gated_delta_scan", "gated_delta_chunks_as_scan", "0dd16d07a108",
                   "for i in range(num_chunks)"),
    ChunkedPrefill("Kimi delta attention", "per channel", ("kimi_linear", "bailing_hybrid"),
                   "chunk_kimi_delta_attention", "kda_scan", "kda_chunks_as_scan", "78fb71a94a53",
                   "for i in range(total_sequence_length // chunk_size)"),
)

ROWS = (
    PatchSpec(
        id="transformers.mamba.selective_scan",
        family="transformers",
        trigger="transformers.models.mamba.modeling_mamba",
        target="mamba_selective_scan",
        mode="route",
        replacement="autopatch.areas.state_space.scans:mamba_selective_scan",
        requires=("transformers>=5.0", "torch>=2.9"),
        fingerprints=("b5b076947d18",),
        reason="Mamba's torch-only selective scan is a Python loop over the sequence: export unrolls it and "
        "specializes the sequence length. The recurrence runs as torch scan (higher-order op) instead; with a "
        "cache, the program refuses at run time the one-token step eager runs down another path.",
    ),
    PatchSpec(
        id="transformers.falcon_mamba.selective_scan",
        family="transformers",
        trigger="transformers.models.falcon_mamba.modeling_falcon_mamba",
        target="mamba_selective_scan",
        mode="route",
        replacement="autopatch.areas.state_space.scans:mamba_selective_scan",
        requires=("transformers>=5.0", "torch>=2.9"),
        fingerprints=("b5b076947d18",),
        reason="falcon_mamba's own copy of mamba_selective_scan: the same loop, the same scan.",
    ),
    PatchSpec(
        id="transformers.jamba.selective_scan",
        family="transformers",
        trigger="transformers.models.jamba.modeling_jamba",
        target="mamba_selective_scan",
        mode="route",
        replacement="autopatch.areas.state_space.scans:mamba_selective_scan",
        requires=("transformers>=5.0", "torch>=2.9"),
        fingerprints=("b5b076947d18",),
        reason="Jamba's own copy of mamba_selective_scan (its mamba layers' prefill, and a decode step of more than "
        "one token): the same loop, the same scan.",
    ),
    *(
        PatchSpec(
            id=f"transformers.{model}.slow_forward_scan",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{mixer}.slow_forward",
            mode="rewrite",
            replacement="autopatch.areas.state_space.scans:scan_instead_of_loop",
            requires=("transformers>=5,<5.13", "torch>=2.9"),
            fingerprints=fingerprints,
            reason=f"5.3-5.12 {mixer} prefill: under tracing associative_scan, whose program fixes the batch and "
            "refuses shorter sequences; with a cache a Python loop over the sequence, which fixes its length. "
            "Rewritten from the source: the loop's recurrence as a scan, the cache updates as written.",
        )
        # FalconMamba's mixer has the same code; its program unlifts with torch.export.parameter_buffers.
        # Fingerprints: 5.3.0 (its model-local cache's updates), 5.5-5.12 (DynamicCache's).
        for model, mixer, fingerprints in (("mamba", "MambaMixer", ("d3c6963850b0", "647e86c140af")),
                                           ("falcon_mamba", "FalconMambaMixer", ("be878582269b", "6fd5a458ef56")))
    ),
    PatchSpec(
        id="transformers.falcon_mamba.slow_forward_scan_4x",
        family="transformers",
        trigger="transformers.models.falcon_mamba.modeling_falcon_mamba",
        target="FalconMambaMixer.slow_forward",
        mode="rewrite",
        replacement="autopatch.areas.state_space.scans:loop_as_scan",
        requires=("transformers>=4.56,<5", "torch>=2.9"),
        fingerprints=("48877ccaa466",),
        reason="transformers 4.x: FalconMambaMixer.slow_forward loops over the sequence in Python, which fixes its "
        "length. Rewritten from the source: the loop's recurrence as a scan (its program also needs "
        "torch.export.parameter_buffers).",
    ),
    PatchSpec(
        id="transformers.jamba.slow_forward_scan_4x",
        family="transformers",
        trigger="transformers.models.jamba.modeling_jamba",
        target="JambaMambaMixer.slow_forward",
        mode="rewrite",
        replacement="autopatch.areas.state_space.scans:loop_as_scan",
        requires=("transformers>=4.56,<5", "torch>=2.9"),
        fingerprints=("b73fc7ca33ef",),  # 4.57.6
        reason="transformers 4.x: JambaMambaMixer.slow_forward loops over the sequence in Python (FalconMamba's "
        "loop, the same lines), which fixes the prefill's length ('Constraints violated', Eq(s53, 5) at the "
        "loop). Rewritten from the source: the loop's recurrence as a scan.",
    ),
    # The chunked linear attentions' prefill (torch path), one source per attention on 5.23.
    *(
        PatchSpec(
            id=f"transformers.{model}.{chunked.row}",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=chunked.function,
            mode="rewrite",
            replacement=f"autopatch.areas.state_space.scans:{chunked.rewriter}",
            requires=("transformers>=5.13", "torch>=2.9"),
            fingerprints=(chunked.fingerprint,),
            reason=f"{chunked.attention}'s prefill (torch path, without flash-linear-attention; a decay "
            f"{chunked.decay}) walks its chunks with `{chunked.loop}`, ceil(seq / 64) iterations: export fixes the "
            "sequence length (a prompt traced shorter than 64 refuses longer ones). Rewritten from the source: the "
            "same recurrence as torch scan over the chunks, and each chunk's triangular system inverted by blocks "
            "(log2(64) steps) instead of its 63-row loop, which made most of the traced graph.",
        )
        for chunked in CHUNKED_PREFILLS
        for model in chunked.models
    ),
    PatchSpec(
        id="transformers.minimax.lightning_decode_scan",
        family="transformers",
        trigger="transformers.models.minimax.modeling_minimax",
        target="MiniMaxLightningAttention.forward",
        mode="rewrite",
        replacement="autopatch.areas.state_space.scans:lightning_decode_as_scan",
        requires=("transformers>=4.56", "torch>=2.9"),
        fingerprints=("ec4256f9d53d", "69f87ef3f668", "dec6aa8a7765", "d52943090d9a"),  # 4.57, 5.3, 5.12, 5.23
        reason="MiniMax's lightning attention walks a cached step's tokens in a Python loop: a decode step of "
        "several tokens specializes its length. Rewritten from the source: the same recurrence as torch scan "
        "over the tokens.",
    ),
    PatchSpec(
        id="transformers.rwkv.wkv_scan",
        family="transformers",
        trigger="transformers.models.rwkv.modeling_rwkv",
        target="rwkv_linear_attention_cpu",
        mode="rewrite",
        replacement="autopatch.areas.state_space.scans:rwkv_wkv_as_scan",
        requires=("transformers>=4.56", "torch>=2.9"),
        fingerprints=("b50b6a58e56a",),  # 4.57.6, 5.12.1, 5.23.0
        reason="RWKV's time mixing on the CPU walks the tokens in a Python loop (`for current_index in "
        "range(seq_length)`): the prefill program takes only the traced length. Rewritten from the source: the "
        "same max-stabilised recurrence as torch scan over the tokens, the states as the loop leaves them.",
    ),
    PatchSpec(
        id="transformers.xlstm.mlstm_scan",
        family="transformers",
        trigger="transformers.models.xlstm.modeling_xlstm",
        target="mlstm_recurrent_sequence_native",
        mode="rewrite",
        replacement="autopatch.areas.state_space.scans:mlstm_sequence_as_scan",
        requires=("transformers>=4.56", "torch>=2.9"),
        fingerprints=("e3a37eebd4d9", "08586d70e2c7"),  # 4.57.6; 5.12.1 and 5.23.0 (type hints differ)
        reason="xLSTM's mLSTM walks a prompt shorter than its chunk (64 tokens by default) in a Python loop over the "
        "tokens: the prefill program takes only the traced length. Rewritten from the source: the same steps as "
        "torch scan over the tokens. A prompt of a chunk or more takes the chunkwise kernel instead, which the "
        "program traced on a short prompt refuses (a guard on the length, not a wrong answer).",
    ),
    PatchSpec(
        id="transformers.zamba.selective_scan",
        family="transformers",
        trigger="transformers.models.zamba.modeling_zamba",
        target="mamba_selective_scan",
        mode="route",
        replacement="autopatch.areas.state_space.scans:mamba_selective_scan",
        requires=("transformers>=5.13", "torch>=2.9"),
        fingerprints=("1566db8b2b0e",),  # 5.23.0: Mamba's loop, its decorator laid out over four lines
        reason="Zamba's own copy of mamba_selective_scan (5.13+): the same loop, the same scan.",
    ),
    PatchSpec(
        id="transformers.recurrent_gemma.rglru_scan",
        family="transformers",
        trigger="transformers.models.recurrent_gemma.modeling_recurrent_gemma",
        target="RecurrentGemmaRglru._rnn_scan",
        mode="rewrite",
        replacement="autopatch.areas.state_space.scans:rglru_as_scan",
        # 5.x only: 4.x RecurrentGemma carries its recurrent state from one call to the next even without a cache,
        # so eager itself answers differently on a second call and no program can be checked against it.
        requires=("transformers>=5", "torch>=2.9"),
        fingerprints=("249faf98d891",),  # 5.12.1 and 5.23.0
        reason="RecurrentGemma's RG-LRU walks a prompt's tokens in a Python loop: the prefill program takes only "
        "the traced length. Rewritten from the source: the same recurrence as torch scan over the tokens.",
    ),
    PatchSpec(
        id="transformers.mamba.slow_forward",
        family="transformers",
        trigger="transformers.models.mamba.modeling_mamba",
        target="MambaMixer.slow_forward",
        mode="route",
        replacement="autopatch.areas.state_space.scans:mamba_slow_forward",
        requires=("transformers<5", "torch>=2.9"),
        fingerprints=("3b03478a8b54",),
        reason="transformers 4.x: the selective scan loop inside MambaMixer.slow_forward specializes the "
        "sequence length; the recurrence runs as torch scan instead (cache branches kept).",
    ),
    # 4.x hybrids' _update_mamba_mask: the mask above under its other name (Jamba's too; its mixer's prefill loop is
    # transformers.jamba.slow_forward_scan_4x).
    *(
        PatchSpec(
            id=f"transformers.{model}.mamba_mask",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}._update_mamba_mask",
            mode="route",
            replacement="autopatch.areas.state_space.scans:linear_attention_mask",
            requires=(LOCAL_CACHES, "torch>=2.9"),
            # One source, copied into each model; 5.3's Jamba also tests cache_position for None (its forward
            # always passes one).
            fingerprints=("7127cbd79e01", "5885cfd0e3f4") if model == "jamba" else ("7127cbd79e01",),
            reason=f"{owner}._update_mamba_mask (4.x, 5.0-5.4) is Qwen3-Next's linear-attention mask under "
            "another name (guard Eq(u0, 1) in every decode step): the same replacement.",
        )
        for model, owner in (*((row.model, row.mask_owner) for row in HYBRID_MAMBA_4X), ("jamba", "JambaModel"))
    ),
    # 4.x Bamba-style mixers: the decode test.
    *(
        PatchSpec(
            id=f"transformers.{model}.decode_position",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{mixer}.torch_forward",
            mode="rewrite",
            replacement="autopatch.areas.state_space.scans:assume_decode_position",
            requires=(LOCAL_CACHES, "torch>=2.9"),
            fingerprints=mixer_fingerprints,
            reason=f"{mixer}.torch_forward (4.x, 5.0-5.4) picks its decode path with `... and seq_len == 1 and "
            "cache_position[0] > 0`: the last term is a data-dependent guard. Rewritten from the source: once the "
            "structural terms hold it is assumed, and the program asserts it at run time.",
        )
        for model, _, _, mixer, mixer_fingerprints in HYBRID_MAMBA_4X
    ),
    # 4.x and 5.0-5.4 Mamba2 mixer and LFM2 short convolution: the same decode test, without the structural terms.
    *(
        PatchSpec(
            id=f"transformers.{model}.decode_by_length",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=target,
            mode="rewrite",
            replacement=f"autopatch.areas.state_space.scans:{rewriter}",
            requires=(LOCAL_CACHES, "torch>=2.9"),
            fingerprints=fingerprints,  # 4.57.6, 5.3.0
            reason=f"{target} (4.x, 5.0-5.4) takes its one-token path when given a cache and `cache_position[0] > "
            "0`: a data-dependent guard with nothing structural beside it. Rewritten from the source: the step's "
            "length decides (one token: past position 0; several: position 0), asserted by the program at run time.",
        )
        for model, target, rewriter, fingerprints in (
            ("mamba2", "Mamba2Mixer.torch_forward", "assume_decode_by_length", ("3e7daa45c5a4", "6d13ddf29636")),
            ("lfm2", "Lfm2ShortConv.slow_forward", "short_conv_decode_by_length", ("fb11f66dbcc4", "c6000f7fd310")),
        )
    ),
    *(
        PatchSpec(
            id=f"transformers.{model}.causal_mask_length",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{owner}._update_causal_mask",
            mode="rewrite",
            replacement="autopatch.areas.state_space.scans:causal_mask_length_from_mask",
            requires=("transformers>=4.56,<5", "torch>=2.9"),
            fingerprints=("543f4a4249e5",),  # 4.57.6: Zamba2's is Jamba's source
            reason=f"{name}'s 4.x causal mask is `cache_position[-1] + 1` wide, a tensor: a data-dependent width the "
            "attention then fails to match with the keys (guard Eq(Min(6, u0), 6)). Rewritten from the source to "
            "take the 2D attention mask's width, asserted equal at run time.",
        )
        for model, owner, name in (("jamba", "JambaModel", "Jamba"), ("zamba2", "Zamba2Model", "Zamba2"))
    ),
    PatchSpec(
        id="transformers.zamba.slow_forward_scan_4x",
        family="transformers",
        trigger="transformers.models.zamba.modeling_zamba",
        target="ZambaMambaMixer.slow_forward",
        mode="rewrite",
        replacement="autopatch.areas.state_space.scans:zamba_mask_and_loop_as_scan",
        requires=("transformers>=4.56,<5", "torch>=2.9"),
        fingerprints=("1f373df6d06c",),  # 4.57.6
        reason="4.x ZambaMambaMixer.slow_forward zeroes padded positions only `if not torch.all(attention_mask == "
        "1)`, a branch on the data (guard Eq(u1, 1)), then loops over the sequence head by head, which fixes the "
        "prefill's length. Rewritten from the source: the mask applied whenever given (an all-ones mask changes no "
        "value), the loop's recurrence as one scan over heads x batch.",
    ),
    PatchSpec(
        id="transformers.zamba2.padding_mask_4x",
        family="transformers",
        trigger="transformers.models.zamba2.modeling_zamba2",
        target="Zamba2MambaMixer.torch_forward",
        mode="rewrite",
        replacement="autopatch.areas.state_space.scans:mask_always",
        requires=("transformers>=4.56,<5", "torch>=2.9"),
        fingerprints=("677b28722f5d",),  # 4.57.6
        reason="4.x Zamba2MambaMixer.torch_forward zeroes padded positions only `if not torch.all(attention_mask "
        "== 1)`, a branch on the data: the prefill stopped (guard Eq(u1, 1)). Rewritten from the source: the mask "
        "applied whenever given (an all-ones mask changes no value).",
    ),
    PatchSpec(
        id="transformers.falcon_h1.cache_update",
        family="transformers",
        trigger="transformers.models.falcon_h1.modeling_falcon_h1",
        target="FalconHybridMambaAttentionDynamicCache.update",
        mode="rewrite",
        replacement="autopatch.areas.state_space.cache_len:shape_based_empty_check",
        requires=(LOCAL_CACHES, "torch>=2.9"),
        fingerprints=("65abdfdf6e47", "745c19661b16"),  # 4.57, 5.3 (type hints only)
        reason="FalconH1's 4.x and 5.0-5.4 cache update tests `len(self.key_cache[layer_idx]) == 0` on a tensor: "
        "len() reads the batch as a plain int and fixes it to the traced size. Rewritten from the source to compare "
        "the first size.",
    ),
    PatchSpec(
        id="transformers.qwen3_next.one_token_path",
        family="transformers",
        trigger="transformers.models.qwen3_next.modeling_qwen3_next",
        target="Qwen3NextGatedDeltaNet.forward",
        mode="rewrite",
        replacement="autopatch.areas.state_space.scans:one_token_path_checked",
        requires=(LOCAL_CACHES, "torch>=2.9"),
        fingerprints=("8b7fcbc6ef29", "f5b167408bb0"),  # 4.57, 5.3
        reason="4.x and 5.0-5.4 Qwen3-Next picks its one-token recurrent path with `seq_len == 1`. A decode step "
        "traced with several tokens: torch assumes a dynamic length is never 1, but the program accepts one and "
        "runs the chunked path from no state (logits off by 0.04, measured on 4.57). The program refuses it instead.",
    ),
    PatchSpec(
        id="transformers.qwen3_next.linear_attention_mask",
        family="transformers",
        trigger="transformers.models.qwen3_next.modeling_qwen3_next",
        target="Qwen3NextModel._update_linear_attn_mask",
        mode="route",
        replacement="autopatch.areas.state_space.scans:linear_attention_mask",
        requires=(LOCAL_CACHES, "torch>=2.9"),
        fingerprints=("92e2bac7705f",),  # 4.57 and 5.3
        reason="4.x and 5.0-5.4 Qwen3-Next drops its linear-attention mask with `if cache_position[0] > 0 or "
        "torch.all(mask == 1)`: a data-dependent guard (Eq(u0, 1)) in every decode step. Under export the mask "
        "stays a tensor (ones where the original returns None; its consumer multiplies by it, so no bit changes).",
    ),
    PatchSpec(
        id="transformers.legacy.cache_seq_length",
        family="transformers",
        trigger="transformers.cache_utils",
        target="DynamicCache.get_seq_length",
        mode="rewrite",
        replacement="autopatch.areas.state_space.cache_len:shape_based_empty_check",
        requires=("transformers>=4.48,<4.51", "torch>=2.9"),
        fingerprints=("528bacc3dfd5",),
        reason="4.48-4.50: `len(self.key_cache[layer_idx]) == 0` reads the batch size as a plain int, so every "
        "decode step (decoders call it in forward, EncoderDecoderCache per layer) exports with a constant batch. "
        "Rewritten from the source to compare the first size.",
    ),
    PatchSpec(
        id="transformers.legacy.cache_update",
        family="transformers",
        trigger="transformers.cache_utils",
        target="DynamicCache.update",
        mode="rewrite",
        replacement="autopatch.areas.state_space.cache_len:shape_based_empty_check",
        requires=("transformers>=4.48,<4.51", "torch>=2.9"),
        fingerprints=("f7165761909b",),
        reason="The same test in DynamicCache.update of 4.48-4.50, called by every attention layer.",
    ),
    PatchSpec(
        id="transformers.zaya.conv_mask_batch",
        family="transformers",
        trigger="transformers.models.zaya.modeling_zaya",
        target="ZayaCCAProjection.forward",
        mode="rewrite",
        replacement="autopatch.areas.state_space.batches:zaya_mask_batch_stated",
        requires=("transformers>=5.0", "torch>=2.9"),
        fingerprints=("17bf4c51d9b3",),  # 5.23
        reason="Zaya masks its hidden states with the padding mask (batches broadcast: Max of two symbols), then "
        "concatenates the cached conv state and views by the product's shape: torch cannot substitute the maximum, "
        "and the guards it left refused a one-token decode step at run time; its delayed values, one shorter than "
        "the step, guarded the step against 2. The mask's batch stated equal to the hidden states' (one row per "
        "sample, as eager needs), the delayed values sliced after their concatenation (the same tokens).",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('transformers.zaya.conv_mask_batch',),
        "Zaya multiplies its padding mask into the hidden states (their batches broadcast: a maximum of two "
        'sizes), concatenates the cached convolution state and views the result by the product\'s shape. torch '
        'cannot substitute a maximum, and the guards left behind refused a one-token decode step at run time. '
        "The mask's batch is stated equal to the hidden states' (a padding mask has one row per sample), so "
        "one batch remains, tied to the cache's; the delayed values (every new token but the last, a tensor "
        "one shorter than the step, which refused two-token steps) are sliced after their concatenation.",
    ),
    (
        ('transformers.minimax.lightning_decode_scan',),
        "MiniMax's lightning attention walks a cached step's tokens in a Python loop, so a decode step of "
        'several tokens (speculative decoding, a chunked prompt) specializes its length. Rewritten from '
        'the source: the same recurrence as `torch` scan over the tokens (4.57 and 5.x).',
    ),
    (
        ('transformers.rwkv.wkv_scan',),
        "RWKV's time mixing walks the tokens in a Python loop on the CPU, so a prefill program took only the "
        "traced length: the same recurrence as a torch scan over the tokens.",
    ),
    (
        ('transformers.xlstm.mlstm_scan',),
        "xLSTM's mLSTM walks a prompt shorter than a chunk (64 tokens) token by token in a Python loop, so a prefill "
        "program took only the traced length: the same steps as a torch scan (prompts under a chunk; longer ones "
        "take the chunkwise kernel, refused by a program traced short).",
    ),
    (
        ('transformers.recurrent_gemma.rglru_scan',),
        "RecurrentGemma's RG-LRU walks a prompt token by token in a Python loop, so a prefill program took only the "
        "traced length: the same recurrence as a torch scan.",
    ),
    (
        (
            'transformers.mamba.selective_scan', 'transformers.falcon_mamba.selective_scan',
            'transformers.jamba.selective_scan', 'transformers.zamba.selective_scan',
        ),
        '5.x Mamba/FalconMamba/Jamba (and 5.13+ Zamba) prefill: the selective scan is a Python loop over the '
        'sequence, so its length is specialized. Runs as `torch` scan (higher-order op). With a filled cache the '
        'mixers take a one-token path of their own, which a program traced with several new tokens would '
        'never take (torch assumes a dynamic length is never 1): such a program refuses a one-token step '
        'at run time instead of answering wrong (not in an ONNX model: `torch.onnx` drops run-time '
        'assertions); export the one-token step on its own, as `autopatch validate` does.',
    ),
    (
        ('transformers.mamba.slow_forward_scan', 'transformers.falcon_mamba.slow_forward_scan'),
        '5.3-5.12 Mamba/FalconMamba prefill (fingerprints of 5.3.0 and of 5.5-5.12): under tracing its '
        'mixer takes `associative_scan`, whose program fixes the batch and refuses shorter sequences, and '
        "with a cache a Python loop over the sequence. Rewritten from the source: the loop's recurrence "
        "as a scan. (FalconMamba's program also needs `torch.export.parameter_buffers`.)",
    ),
    (
        (
            'transformers.qwen3_next.gated_delta_scan', 'transformers.qwen3_5.gated_delta_scan',
            'transformers.qwen3_5_moe.gated_delta_scan', 'transformers.olmo_hybrid.gated_delta_scan',
            'transformers.qwen4_exp.gated_delta_scan',
        ),
        '5.23 Qwen3-Next, Qwen3.5, Qwen3.5-MoE, OlmoHybrid and Qwen4-Exp prefill (torch path, without '
        'flash-linear-attention): the gated delta rule walks 64-token chunks in a Python loop, so the '
        'program takes one chunk (64 tokens) at most. Rewritten from the source: the loop as torch scan '
        'over the chunks, the padded length and chunk reshapes in terms of the chunk count (plus one '
        'all-padding chunk, which leaves the state exactly unchanged, so that torch can tell there are at '
        'least two). The export branch\'s loop over each chunk\'s 63 rows (a forward substitution: most of the '
        'traced graph, and minutes of a Qwen3.5 VLM\'s ONNX conversion) becomes the same inverse by blocks in six '
        'steps (`runtime.forward_substitution`, as close to float64 as the LAPACK solve eager calls).',
    ),
    (
        ('transformers.kimi_linear.kda_scan', 'transformers.bailing_hybrid.kda_scan'),
        '5.23 Kimi-Linear and Bailing-hybrid prefill (torch path): Kimi delta attention (a gated delta rule with a '
        'decay per channel) walks its chunks in the same Python loop, so the program takes 64 tokens at most; '
        'rewritten the same way, its loop over a chunk\'s rows too.',
    ),
    (
        ('transformers.mamba.slow_forward',),
        'The same loop inside 4.x `MambaMixer.slow_forward`.',
    ),
    (
        ('transformers.falcon_mamba.slow_forward_scan_4x', 'transformers.jamba.slow_forward_scan_4x'),
        "The same loop inside 4.x `FalconMambaMixer.slow_forward` and `JambaMambaMixer.slow_forward` (Jamba's "
        "prefill), rewritten from its source (the loop's statements only).",
    ),
    (
        (
            'transformers.jamba.mamba_mask', 'transformers.bamba.mamba_mask',
            'transformers.granitemoehybrid.mamba_mask', 'transformers.falcon_h1.mamba_mask',
        ),
        'The same mask under the name `_update_mamba_mask` in 4.x and 5.0-5.4 Jamba, Bamba, '
        'GraniteMoeHybrid and FalconH1: the same replacement.',
    ),
    (
        ('transformers.mamba2.decode_by_length', 'transformers.lfm2.decode_by_length'),
        '4.x and 5.0-5.4 Mamba2 mixer and LFM2 short convolution take their one-token path when given a '
        'cache and `cache_position[0] > 0`, with nothing structural beside it (a data-dependent guard in '
        "every decode step). Rewritten from the source: the step's length decides (one token: a position "
        'past 0; several: position 0), and the program asserts that at run time, so a one-token step at '
        'position 0 is refused, not miscomputed.',
    ),
    (
        ('transformers.jamba.causal_mask_length', 'transformers.zamba2.causal_mask_length'),
        "Jamba's and Zamba2's 4.x causal mask is `cache_position[-1] + 1` wide (a tensor, so a data-dependent "
        "width); rewritten from the source to take the 2D attention mask's width, which the program asserts equal "
        'at run time.',
    ),
    (
        ('transformers.zamba.slow_forward_scan_4x', 'transformers.zamba2.padding_mask_4x'),
        "4.x Zamba's and Zamba2's mixers zero padded positions only `if` the mask holds a zero (a branch on the "
        "data): applied whenever a mask is given (multiplying by ones changes no value); Zamba's per-head loop "
        'over the sequence becomes one scan.',
    ),
    (
        ('transformers.falcon_h1.cache_update',),
        "FalconH1's 4.x and 5.0-5.4 cache update takes the same `len()` of a tensor; the same rewrite.",
    ),
    (
        (
            'transformers.bamba.decode_position', 'transformers.granitemoehybrid.decode_position',
            'transformers.falcon_h1.decode_position',
        ),
        'Their 4.x and 5.0-5.4 mamba2 mixers choose the decode path with `... and seq_len == 1 and '
        'cache_position[0] > 0`; the last term reads a tensor. Rewritten from the source (no copy): once '
        'the structural terms hold, the term is assumed and the program asserts it at run time (a '
        'position-0 decode step is refused, not miscomputed). `seq_len == 1` too: torch decides it for a '
        'dynamic length by assuming it is never 1, yet a program traced with several new tokens accepts '
        'one and ran it down the several-token path, wrong without a word; now it refuses it.',
    ),
    (
        ('transformers.legacy.cache_seq_length', 'transformers.legacy.cache_update'),
        '4.48-4.50 `DynamicCache.get_seq_length` and `update` test `len(self.key_cache[layer_idx]) == 0`: '
        '`len()` of a tensor fixes the batch of every non-strict decode step. Rewritten from the source '
        '(that expression only) to compare the first size.',
    ),
    (
        ('transformers.qwen3_next.one_token_path',),
        "4.x and 5.0-5.4 Qwen3-Next's gated delta net takes its recurrent path when `seq_len == 1`; a "
        'decode step traced with several tokens accepted a one-token step and ran the chunked path from '
        'no state (logits off by 0.04). The program refuses it instead, as for the Bamba-style mixers.',
    ),
    (
        ('transformers.qwen3_next.linear_attention_mask',),
        '4.x and 5.0-5.4 Qwen3-Next drops its linear-attention mask in a Python `if cache_position[0] > 0 '
        'or all(mask == 1)`: a data-dependent guard in every decode step. Under export the mask stays a '
        'tensor (ones where the original gives None; it is only multiplied in, so no bit changes).',
    ),
)
