"""The rows of this area. Mixture-of-experts blocks without data-dependent control flow (dense top-k routing).
"""

from __future__ import annotations

from ...spec import PatchSpec

ROWS = (
    PatchSpec(
        id="transformers.moe.mixtral",
        family="transformers",
        trigger="transformers.models.mixtral.modeling_mixtral",
        target="MixtralSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:mixtral_sparse_moe_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("7008bd8a53b3",),
        reason="The 4.x block loops in Python over nonzero() of the experts hit: a data-dependent guard "
        "(Eq(u0, 0)). Under export every expert runs on every token, weighted by a dense top-k routing matrix.",
    ),
    PatchSpec(
        id="transformers.moe.qwen3_moe",
        family="transformers",
        trigger="transformers.models.qwen3_moe.modeling_qwen3_moe",
        target="Qwen3MoeSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:qwen3_moe_sparse_moe_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("751ffe2704e4",),
        reason="Same nonzero() expert loop as Mixtral (data-dependent guard Eq(u0, 0)); replaced by all experts "
        "on all tokens with dense routing weights (norm_topk_prob honoured).",
    ),
    PatchSpec(
        id="transformers.moe.minimax",
        family="transformers",
        trigger="transformers.models.minimax.modeling_minimax",
        target="MiniMaxSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:mixtral_sparse_moe_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("7008bd8a53b3",),  # the same source as Mixtral's block
        reason="A copy of Mixtral's 4.x block (same nonzero() loop, same guard Eq(u0, 0)): the same replacement.",
    ),
    PatchSpec(
        id="transformers.moe.qwen2_moe",
        family="transformers",
        trigger="transformers.models.qwen2_moe.modeling_qwen2_moe",
        target="Qwen2MoeSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:qwen2_moe_sparse_moe_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("b6675bc3b3ad",),
        reason="The nonzero() expert loop (guard Eq(u0, 0)) plus a gated shared expert; all experts on all tokens "
        "with dense routing weights, then the shared expert as the original adds it.",
    ),
    *(
        PatchSpec(
            id=f"transformers.moe.{model}",
            family="transformers",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=f"{block}.moe",
            mode="route",
            replacement="autopatch.areas.moe.experts:deepseek_moe",
            requires=("transformers>=4.56,<5",),
            fingerprints=("c8160923e43e",),  # one source, copied into each of these models
            reason=f"{block}.moe (4.x) loops over every expert and skips those no token picked with `if "
            "token_indices.numel() > 0`: a data-dependent guard (u0 > 0). Every expert on every token instead, "
            "weighted by the router's top-k weights scattered densely.",
        )
        for model, block in (("deepseek_v3", "DeepseekV3MoE"), ("dots1", "Dots1MoE"), ("glm4_moe", "Glm4MoeMoE"),
                             ("longcat_flash", "LongcatFlashMoE"), ("glm4v_moe", "Glm4vMoeTextMoE"))
    ),
    PatchSpec(
        id="transformers.moe.jamba",
        family="transformers",
        trigger="transformers.models.jamba.modeling_jamba",
        target="JambaSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:jamba_sparse_moe_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("cfbc37d21130",),
        reason="Jamba's 4.x sparse block: Mixtral's expert loop with `if top_x.shape[0] == 0: continue` (guard "
        "Eq(u1, 0)), its gate named router, no renormalisation. Every expert on every token instead.",
    ),
    PatchSpec(
        id="transformers.moe.qwen3_next",
        family="transformers",
        trigger="transformers.models.qwen3_next.modeling_qwen3_next",
        target="Qwen3NextSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:qwen2_moe_sparse_moe_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("b6675bc3b3ad",),  # the same source as Qwen2-MoE's block
        reason="Qwen3-Next's 4.x sparse block is Qwen2-MoE's (nonzero() expert loop, guard Eq(u0, 0); gated shared "
        "expert): the same replacement.",
    ),
    PatchSpec(
        id="transformers.moe.gpt_oss",
        family="transformers",
        trigger="transformers.models.gpt_oss.modeling_gpt_oss",
        target="GptOssExperts.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:gpt_oss_experts_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("e24f33c77bb1",),
        reason="On CPU the 4.x experts loop over nonzero() of the experts hit (data-dependent guard Eq(u0, 0)); "
        "under export the batched all-experts path (the one 4.x uses on accelerators) runs on every device.",
    ),
    PatchSpec(
        id="transformers.moe.dbrx_v4",
        family="transformers",
        trigger="transformers.models.dbrx.modeling_dbrx",
        target="DbrxExperts.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:dbrx_experts_forward_v4",
        requires=("transformers>=4.56,<5",),
        fingerprints=("724e56fa79c6",),
        reason="DBRX's 4.x experts loop over every expert and skip those no token picked (`if token_idx.shape[0] "
        "== 0`: guard Eq(u0, 0)); every expert's GLU on every token instead, weighted by the dense top-k weights.",
    ),
    PatchSpec(
        id="transformers.moe.deepseek_v2",
        family="transformers",
        trigger="transformers.models.deepseek_v2.modeling_deepseek_v2",
        target="DeepseekV2MoE.moe",
        mode="route",
        replacement="autopatch.areas.moe.experts:deepseek_moe",
        requires=("transformers>=4.56,<5",),
        fingerprints=("2345d276c45e",),
        reason="DeepseekV2MoE.moe (4.x) sorts tokens by expert and loops over the per-expert counts, skipping "
        "experts with `if num_tokens == 0` and slicing by them: data-dependent guards. The DeepSeek-V3 replacement "
        "(every expert on every token, the top-k weights scattered densely) computes the same sum.",
    ),
    PatchSpec(
        id="transformers.moe.ernie4_5_moe",
        family="transformers",
        trigger="transformers.models.ernie4_5_moe.modeling_ernie4_5_moe",
        target="Ernie4_5_MoeSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:ernie4_5_moe_sparse_moe_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("61d73c8e5555",),
        reason="Ernie 4.5 MoE's 4.x block: Mixtral's nonzero() loop over the experts hit (guard Eq(u0, 0)) behind "
        "its own float32 router; the router kept as it is, every expert on every token, then the shared experts.",
    ),
    PatchSpec(
        id="transformers.moe.aria",
        family="transformers",
        trigger="transformers.models.aria.modeling_aria",
        target="sequential_experts_gemm",
        mode="route",
        replacement="autopatch.areas.moe.experts:aria_sequential_experts_gemm",
        requires=("transformers>=4.56,<5",),
        fingerprints=("02e2d015232b",),
        reason="Aria's 4.x experts (without the grouped_gemm package) slice the expert-sorted rows with tensor "
        "bounds: data-dependent sizes. Every expert's matrix on every row, each row keeping its own expert's.",
    ),
    PatchSpec(
        id="transformers.moe.hunyuan_v1_moe",
        family="transformers",
        trigger="transformers.models.hunyuan_v1_moe.modeling_hunyuan_v1_moe",
        target="HunYuanMoEV1Moe.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:hunyuan_v1_moe_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("0a547cedc372",),
        reason="Hunyuan-MoE's 4.x block: Mixtral's nonzero() loop over the experts hit (guard Eq(u0, 0)) beside a "
        "shared MLP; every expert on every token instead, the shared MLP added as before.",
    ),
    PatchSpec(
        id="transformers.moe.phimoe",
        family="transformers",
        trigger="transformers.models.phimoe.modeling_phimoe",
        target="PhimoeSparseMoeBlock.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:phimoe_sparse_moe_forward",
        requires=("transformers>=4.56,<5",),
        fingerprints=("7a25d6fe3386",),
        reason="Phi-MoE's 4.x block loops over every expert and skips those no token picked (`if top_x.shape[0] == "
        "0`: guard Eq(u1, 0)); its sparsemixer router kept, every expert on every token instead.",
    ),
    PatchSpec(
        id="transformers.moe.longcat_flash_experts",
        family="transformers",
        trigger="transformers.models.longcat_flash.modeling_longcat_flash",
        target="LongcatFlashExperts.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:longcat_flash_experts_forward",
        requires=("transformers>=5",),
        fingerprints=("453eaea1d033",),  # 5.3, 5.12 and 5.23
        reason="LongCat-Flash's 5.x experts (not behind transformers' experts implementations; identity 'zero' "
        "experts among them) loop over nonzero() of the experts hit with .item(): guard Eq(u0, 0). Every expert "
        "on every token instead, the identities as the tokens themselves.",
    ),
    PatchSpec(
        id="transformers.moe.dbrx",
        family="transformers",
        trigger="transformers.models.dbrx.modeling_dbrx",
        target="DbrxExperts.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:dbrx_experts_forward",
        requires=("transformers>=5",),
        fingerprints=("2b7ca3a044a8",),  # 5.23's; 5.3-5.12 reshape by ffn_hidden_size, which eager itself fails on
        reason="DBRX's 5.x experts (not behind transformers' experts implementations) loop over nonzero() of the "
        "experts hit: a data-dependent number of iterations (guard Eq(u0, 0)). Every expert on every token instead.",
    ),
    PatchSpec(
        id="transformers.moe.ernie4_5_vl_modality_experts",
        family="transformers",
        trigger="transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe",
        target="Ernie4_5_VLMoeMoeBlock.forward",
        mode="route",
        replacement="autopatch.areas.moe.experts:ernie4_5_vl_modality_experts",
        requires=("transformers>=5",),
        fingerprints=("adf4d691089c",),
        reason="ERNIE 4.5 VL sends text tokens to its text experts and vision tokens to its vision experts: "
        "`if moe_mm_token_type_ids.any()` (a guard on data) chooses the path, boolean masks select the tokens "
        "(data-dependent sizes). Under export both expert sets run on every token and each token keeps its own "
        "modality's output and router logits.",
    ),
    PatchSpec(
        id="transformers.moe.xmod_lang_adapter",
        family="transformers",
        trigger="transformers.models.xmod.modeling_xmod",
        target="XmodOutput.lang_adapter",
        mode="route",
        replacement="autopatch.areas.moe.experts:xmod_lang_adapter",
        requires=("transformers>=4.56,<5",),
        fingerprints=("341e787c0598",),  # 4.57.6
        reason="4.x X-MOD picks each sample's language adapter like an expert: it splits the batch into runs of "
        "one language with unique_consecutive and split(counts.tolist()) and indexes the adapters with "
        "int(lang_id.item()): data-dependent sizes (guard Eq(u0, 0)) stop its prefill and decode. Under export "
        "every adapter runs on every sample and each sample keeps its own language's output (5.x exports as is).",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        (
            'transformers.moe.mixtral', 'transformers.moe.minimax', 'transformers.moe.jamba',
            'transformers.moe.qwen2_moe', 'transformers.moe.qwen3_moe', 'transformers.moe.qwen3_next',
            'transformers.moe.gpt_oss',
        ),
        '4.x MoE blocks loop over `nonzero()` of the experts hit: a data-dependent guard. Under export '
        'every expert runs on every token with dense routing weights (5.x exports as is). Blocks with the '
        'same source share one replacement (the fingerprint checks it).',
    ),
    (
        (
            'transformers.moe.deepseek_v3', 'transformers.moe.dots1', 'transformers.moe.glm4_moe',
            'transformers.moe.longcat_flash', 'transformers.moe.deepseek_v2', 'transformers.moe.glm4v_moe',
        ),
        '4.x DeepSeek-style `moe()` skips experts no token picked (`if numel() > 0`: a data-dependent '
        "guard); every expert on every token instead (DeepSeek-V2's sorts tokens by expert and slices by "
        "the counts: the same replacement; GLM-4V-MoE's text model has GLM-4-MoE's source).",
    ),
    (
        (
            'transformers.moe.ernie4_5_moe', 'transformers.moe.hunyuan_v1_moe', 'transformers.moe.phimoe',
            'transformers.moe.dbrx_v4', 'transformers.moe.aria',
        ),
        'More 4.x experts the sweep found stopping at a data-dependent guard: Ernie 4.5 and Hunyuan loop '
        'over `nonzero()` of the experts hit, Phi-MoE and DBRX skip experts no token picked (`if '
        'top_x.shape[0] == 0`), Aria slices its expert-sorted rows by tensor bounds. Every expert on '
        'every token instead, routers and shared experts kept as they are.',
    ),
    (
        ('transformers.moe.longcat_flash_experts',),
        'LongCat-Flash\'s 5.x experts (identity "zero" experts among them) loop over `nonzero()` of the '
        'experts hit, each read with `.item()`; every expert on every token instead, the identities as '
        'the tokens themselves.',
    ),
    (
        ('transformers.moe.dbrx',),
        "DBRX's 5.x experts are not behind transformers' experts implementations and loop over "
        "`nonzero()` of the experts hit; every expert on every token instead (5.23's source; 5.3-5.12 "
        'reshape by the wrong size, which eager itself fails on).',
    ),
    (
        ("transformers.moe.ernie4_5_vl_modality_experts",),
        "ERNIE 4.5 VL's 5.x block sends text tokens to its text experts and image and video tokens to its vision "
        "experts, choosing the path with `if moe_mm_token_type_ids.any()` and the tokens by boolean masks "
        "(data-dependent sizes): both expert sets run on every token, each token keeps its own modality's output "
        "and router logits (the second set's cost on every token, under export only).",
    ),
    (
        ("transformers.moe.xmod_lang_adapter",),
        "4.x X-MOD split its batch into runs of one language (`unique_consecutive`, `split(counts.tolist())`) to "
        "call each run's language adapter, data-dependent sizes: every adapter runs on every sample, each sample "
        "keeps its own language's output.",
    ),
)
