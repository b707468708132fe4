"""The rows of this area. Pytree registrations: transformers' caches (layered, 4.48-4.55 legacy, model-local) and 4.x
model outputs as export inputs and outputs.
"""

from __future__ import annotations

from ...spec import PatchSpec, table_row
from ..state_space.rows import HYBRID_MAMBA_4X

#: transformers 4.48-4.55 cache rows: (short name, class in cache_utils, what fails without the row).
LegacyCache = table_row("LegacyCache", ("short", "cache_class", "why"))
LEGACY_CACHES = (
    LegacyCache("dynamic_cache", "DynamicCache",
                "as an export input or output. 4.48-4.49: not a pytree node; 4.50-4.53 register it themselves, but "
                "their torch.fx flatten spec returns the leaves, and every program fails its guards on its first call; "
                "4.54-4.55's registration builds DynamicCache() on unflatten, which strict=True cannot trace: "
                "replaced."),
    LegacyCache("static_cache", "StaticCache", "as an export input or output: not a pytree node."),
    LegacyCache("hybrid_cache", "HybridCache", "the sliding + full cache of Gemma2 and its kin: not a pytree node."),
    LegacyCache("mamba_cache", "MambaCache",
                "the cache of Mamba and FalconMamba (cache_utils then): not a pytree node."),
)

ROWS = (
    PatchSpec(
        id="pytree.dynamic_cache",
        family="pytree",
        trigger="transformers.cache_utils",
        target="DynamicCache",
        mode="install",
        replacement="autopatch.areas.pytree.caches:register_dynamic_cache",
        requires=("transformers>=4.56", "torch>=2.9"),
        reason="DynamicCache (and every subclass: cache_utils' own, a model's such as MiniMaxCache, a user's, "
        "also those defined later) is not a pytree node, so torch.export rejects it "
        "as an input or output. Flattened as {'key_cache': [...], 'value_cache': [...]} (plus linear-attention "
        "states when present); the context keeps each layer's class and constructor arguments.",
    ),
    PatchSpec(
        id="pytree.static_cache",
        family="pytree",
        trigger="transformers.cache_utils",
        target="StaticCache",
        mode="install",
        replacement="autopatch.areas.pytree.caches:register_static_cache",
        requires=("transformers>=4.56", "torch>=2.9"),
        reason="StaticCache and its subclasses (on 4.56-4.57 SlidingWindowCache, HybridCache, HybridChunkedCache) as an export "
        "input or output; the layers' position counters are tensors and travel as leaves.",
    ),
    PatchSpec(
        id="pytree.encoder_decoder_cache",
        family="pytree",
        trigger="transformers.cache_utils",
        target="EncoderDecoderCache",
        mode="install",
        replacement="autopatch.areas.pytree.caches:register_encoder_decoder_cache",
        requires=("transformers>=4.48", "torch>=2.9"),
        reason="Encoder-decoder models (bart, t5, whisper...) take and return an EncoderDecoderCache; it flattens "
        "to [self_attention_cache, cross_attention_cache].",
    ),
    PatchSpec(
        id="pytree.model_output_keys",
        family="pytree",
        trigger="transformers.utils.generic",
        target="ModelOutput",
        mode="install",
        replacement="autopatch.areas.pytree.model_outputs:install_model_output_keys",
        requires=("transformers>=4.48,<5", "torch>=2.9"),
        reason="4.x registers model outputs as pytree nodes without key paths, so a seq2seq decode step given "
        "encoder_outputs=BaseModelOutput(...) (as optimum and Whisper runtimes feed it) stops with 'Did not find a "
        "flatten_with_keys_fn'. Adds the field names as keys to transformers' own registration (kept).",
    ),
    # transformers 4.48-4.55: tensor-list caches, then CacheLayerMixin ones (pytree_legacy_caches). One row per
    # root class; each registers its subclasses too.
    *(
        PatchSpec(
            id=f"pytree.legacy.{short}",
            family="pytree",
            trigger="transformers.cache_utils",
            target=cache_class,
            mode="install",
            replacement=f"autopatch.areas.pytree.legacy_caches:register_{short}",
            requires=("transformers>=4.48,<4.56", "torch>=2.9"),
            reason=f"{cache_class} of transformers 4.48-4.55 (and its subclasses), {why} Flattened by attribute: "
            "its tensor lists as children, the rest as structure; per-call counters rebuilt from the tensors.",
        )
        for short, cache_class, why in LEGACY_CACHES
    ),
    # transformers 4.x model-local caches: one row per model module, generated below from _MODEL_CACHES_4X.
    *(
        PatchSpec(
            id=f"pytree.model_cache.{model}",
            family="pytree",
            trigger=f"transformers.models.{model}.modeling_{model}",
            target=cache_class,
            mode="install",
            replacement="autopatch.areas.pytree.caches:register_attribute_cache",
            requires=(f"transformers>={since},<{before}", "torch>=2.9"),
            reason=f"{cache_class}, the {model} cache of transformers 4.x"
            f"{' and 5.0-5.4 (5.5 and later keep these states in DynamicCache)' if before == '5.5' else ''}, "
            "as an export input or output: its tensor attributes in definition order, the rest as structure.",
        )
        # Only caches whose models then export and run, with the transformers rows of the hybrid models below
        # (mamba2 and lfm2: their decode_by_length rows; zamba and zamba2: their mask rows, transformers.zamba*).
        # (falcon_mamba's program unlifts with torch.export.parameter_buffers.)
        # MambaCache moved out of cache_utils into modeling_mamba in 4.54 (pytree.legacy.mamba_cache before).
        # Zamba's and Zamba2's rows stop at 5: their 5.0-5.4 code was not proven (5.3's Zamba2 fails in eager).
        for model, cache_class, since, before in (
            ("mamba", "MambaCache", "4.54", "5.5"), ("falcon_mamba", "FalconMambaCache", "4.54", "5.5"),
            ("qwen3_next", "Qwen3NextDynamicCache", "4.56", "5.5"),
            ("jamba", "HybridMambaAttentionDynamicCache", "4.56", "5.5"),
            ("mamba2", "Mamba2Cache", "4.56", "5.5"), ("lfm2", "Lfm2HybridConvCache", "4.56", "5.5"),
            ("zamba", "ZambaHybridDynamicCache", "4.56", "5"), ("zamba2", "Zamba2HybridDynamicCache", "4.56", "5"),
            *((row.model, row.cache_class, "4.56", "5.5") for row in HYBRID_MAMBA_4X))
    ),
    PatchSpec(
        id="pytree.model_cache.xlstm",
        family="pytree",
        trigger="transformers.models.xlstm.modeling_xlstm",
        target="xLSTMCache",
        mode="install",
        replacement="autopatch.areas.pytree.caches:register_attribute_cache",
        # 4.57 and 5.12 count positions in a Python int (the _4x row flattens it as a tensor); 5.23 keeps a tensor
        requires=("transformers>=5.23", "torch>=2.9"),
        reason="xLSTMCache, which xLSTM keeps in its own module (its recurrent states per layer and a position "
        "counter in a tensor), as an export input or output: its tensor attributes in definition order, the rest "
        "(its config too, as class and settings) as structure.",
    ),
    PatchSpec(
        id="pytree.model_cache.xlstm_4x",
        family="pytree",
        trigger="transformers.models.xlstm.modeling_xlstm",
        target="xLSTMCache",
        mode="install",
        replacement="autopatch.areas.pytree.caches:register_counted_attribute_cache",
        # 5.0-5.22 keep the int counter too, unmeasured (no venv of theirs runs this row's test)
        requires=("transformers>=4.57,<5", "torch>=2.9"),
        reason="4.x xLSTMCache (its recurrent states per layer, its config, and a position counter kept as a "
        "Python int, which 5.23 keeps in a tensor) as an export input or output: the decode step stopped on "
        "\"Unsupported input type xLSTMCache\". Flattened as 5.23's, the counter a one-element int64 tensor "
        "(as structure, every step would be another program), restored as an int in eager.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('pytree.dynamic_cache',),
        "`DynamicCache` and every subclass (cache_utils' own, a model's such as `MiniMaxCache`, yours, "
        'also those defined after activation) as an export input or output, with every layer kind: full, '
        "sliding window (past its window too), linear attention (mamba-like), hybrid, dummy, and 5.23's "
        'indexed layers, whose sparse-attention indexer keys travel as leaves too (DeepSeek-V3.2, '
        'GLM-MoE-DSA: without them the indexer starts afresh and the export stops), and layers whose '
        "constructor takes the model's config (5.23's DeepSeek-V4 compressed-attention layers: rebuilt as their "
        'base class, their compressor buffers and compressed entries as leaves, their entry counts read from '
        'those sizes) (transformers 4.56+).',
    ),
    (
        ('pytree.static_cache',),
        '`StaticCache` and its subclasses, on 4.56-4.57 `SlidingWindowCache`, `HybridCache`, '
        '`HybridChunkedCache`; their position counters are tensors and travel as leaves.',
    ),
    (
        ('pytree.encoder_decoder_cache',),
        '`EncoderDecoderCache` (bart, t5, whisper...) as `[self_attention_cache, cross_attention_cache]`.',
    ),
    (
        ('pytree.model_output_keys',),
        'transformers 4.x registers its model outputs (`BaseModelOutput`...) as pytree nodes without key '
        'paths, so a seq2seq decode step fed as runtimes feed it (`encoder_outputs=BaseModelOutput(...)` '
        'beside an `EncoderDecoderCache`) stops with "Did not find a flatten_with_keys_fn". Adds the '
        "field names as keys to transformers' own registration, which is otherwise kept (5.x has them).",
    ),
    (
        (
            'pytree.model_cache.mamba', 'pytree.model_cache.falcon_mamba', 'pytree.model_cache.qwen3_next',
            'pytree.model_cache.jamba', 'pytree.model_cache.bamba', 'pytree.model_cache.granitemoehybrid',
            'pytree.model_cache.falcon_h1', 'pytree.model_cache.mamba2', 'pytree.model_cache.lfm2',
            'pytree.model_cache.zamba', 'pytree.model_cache.zamba2',
        ),
        'transformers 4.x and 5.0-5.4 model-local `MambaCache` and `FalconMambaCache` (from 4.54; '
        "FalconMamba's program also needs `torch.export.parameter_buffers`), and from 4.56 "
        '`Qwen3NextDynamicCache`, `HybridMambaAttentionDynamicCache`, '
        '`FalconHybridMambaAttentionDynamicCache`, `Mamba2Cache`, `Lfm2HybridConvCache`, '
        "and 4.x `ZambaHybridDynamicCache` and `Zamba2HybridDynamicCache` (with their mask rows, "
        "`transformers.zamba*`): their tensor attributes (`conv_states`, `ssm_states`, the attention layers' keys "
        "and values...) as children in the object's own attribute order, the batch size read back from the "
        "tensors (5.5 and later keep these states in `DynamicCache`). Tested on 4.57.6 and 5.3.0 (Zamba's and "
        "Zamba2's on 4.57.6).",
    ),
    (
        ('pytree.model_cache.xlstm', 'pytree.model_cache.xlstm_4x'),
        "xLSTM's own `xLSTMCache` (every layer's matrix memory, normalizer and stabilizer states, and 5.23's "
        'position counter, a tensor) as an export input or output, flattened by attribute as the caches above '
        "(the model's config it keeps: its class and settings, which strict export can hold as a constant): "
        "a decode step exports, strict too, and runs at other batches and past lengths. 4.57 counts positions in a "
        "Python int: flattened as a one-element tensor (as structure it would change every step), an int again in "
        "eager. 5.0-5.22 (an int too) are not measured.",
    ),
    (
        (
            'pytree.legacy.dynamic_cache', 'pytree.legacy.static_cache', 'pytree.legacy.hybrid_cache',
            'pytree.legacy.mamba_cache',
        ),
        'transformers 4.48-4.55 caches (`DynamicCache`, `StaticCache`, `HybridCache`, `MambaCache` and '
        'their subclasses). 4.48-4.53 keep lists of tensors per kind of state, flattened by attribute; '
        '4.54-4.55 keep `CacheLayerMixin` layers, rebuilt without running any `__init__`. Both flatten a '
        "`DynamicCache` to transformers' `[key_cache, value_cache]`; `_seen_tokens` and batch sizes are "
        'read back from the tensors. 4.50-4.53 register `DynamicCache` themselves with a torch.fx flatten '
        'spec that returns the leaves (every program fails its guards on its first call), 4.54-4.55 with '
        'an unflatten that `strict=True` cannot trace: replaced, and put back on `disable()`. '
        "(4.54-4.55's `MambaCache` lives in `modeling_mamba`: `pytree.model_cache.mamba`.)",
    ),
)
