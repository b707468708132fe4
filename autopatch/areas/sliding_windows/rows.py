"""The rows of this area. Sliding-window cache layers and the SDPA mask: one program for every past length, inside,
across and beyond the window.
"""

from __future__ import annotations

from ...spec import PatchSpec

ROWS = (
    # Sliding-window layers: one program for every past length, inside the window, crossing it and beyond it.
    PatchSpec(
        id="transformers.cache.sliding_update",
        family="transformers",
        trigger="transformers.cache_utils",
        target="DynamicSlidingWindowLayer.update",
        mode="route",
        replacement="autopatch.areas.sliding_windows.layers:sliding_update",
        requires=("transformers>=4.56", "torch>=2.9"),
        fingerprints=("1d2449946249", "ee796ceb5145"),
        reason="A sliding layer keeps its last window - 1 tokens with keys[:, :, -window + 1:]: torch compares the "
        "traced past with the window, so a program traced inside the window refuses a past beyond it and the other "
        "way round. Keeps min(length, window - 1) tokens (torch.sym_min): no guard, the same tensors.",
    ),
    PatchSpec(
        id="transformers.cache.sliding_mask_sizes",
        family="transformers",
        trigger="transformers.cache_utils",
        target="DynamicSlidingWindowLayer.get_mask_sizes",
        mode="route",
        replacement="autopatch.areas.sliding_windows.layers:sliding_mask_sizes",
        requires=("transformers>=4.56", "torch>=2.9"),
        fingerprints=("ac86092c14a3", "68bb5db6d9c1"),
        reason="With transformers.cache.sliding_update: the mask sizes branch on 'seen >= window' and take "
        "max(seen - window + 1, 0) in Python (guards on the past). Computed with torch.sym_min/sym_max.",
    ),
    PatchSpec(
        id="transformers.masks.sdpa_causal_skip",
        family="transformers",
        trigger="transformers.masking_utils",
        target="_ignore_causal_mask_sdpa",
        mode="route",
        replacement="autopatch.areas.sliding_windows.layers:ignore_causal_mask_sdpa",
        requires=("transformers>=4.56", "torch>=2.9"),
        fingerprints=("265aa69ff0b2", "14bd2b59ba26"),
        reason="With the sliding rows: before answering False under any trace, this trims a padding mask longer "
        "than the keys behind 'if mask length > kv_length', which for a sliding layer traced inside its window "
        "ties the past to the window. Answers False without the unused trim.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        (
            'transformers.cache.sliding_update', 'transformers.cache.sliding_mask_sizes',
            'transformers.masks.sdpa_causal_skip',
        ),
        'Sliding-window layers (Mistral, Gemma 2/3, gpt-oss, Qwen2/3 with a window...): upstream keeps '
        'the last `window - 1` tokens with a negative slice and sizes the mask with `if seen >= window` '
        'and `max(...)` in Python, and the SDPA mask helper trims a mask longer than the keys behind '
        'another `if`: each is a guard on the traced past, so a program traced inside the window refuses '
        'a past beyond it and the other way round. The same arithmetic with `torch.sym_min`/`sym_max` and '
        "the keys' own sizes: one decode program for every past length, inside, across and beyond the "
        'window, with the keys/values-only `dynamic_shapes` users write. A cache whose layers are *all* '
        "sliding takes its count of seen tokens from the step's 2-D `attention_mask` (see [Known "
        'limits](#known-limits)).',
    ),
)
