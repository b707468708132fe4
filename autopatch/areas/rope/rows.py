"""The rows of this area. RoPE: transformers' ``dynamic_rope_update`` (``rope_type="dynamic"``, 4.x ``"longrope"``)
without a Python ``if``.
"""

from __future__ import annotations

from ...spec import PatchSpec

ROWS = (
    PatchSpec(
        id="transformers.rope.dynamic",
        family="transformers",
        trigger="transformers.modeling_rope_utils",
        target="dynamic_rope_update",
        mode="install",
        replacement="autopatch.areas.rope.dynamic:install_dynamic_rope_update",
        requires=("transformers>=4.57", "torch>=2.9"),
        fingerprints=("97e426d014ac", "9f96bf12a97e", "54741fa0ea32"),
        reason="Dynamic RoPE (rope_type='dynamic'; and 'longrope' on 4.x and 5.3-5.12, e.g. Phi-3) tests max(position_ids)+1 "
        "in Python ifs and re-registers inv_freq: export fails with 'Could not guard on data-dependent expression'. Under export, the decorated "
        "rotary forward uses where(seq_len > original length, rescaled, original) frequencies, without state; "
        "every model using the decorator, including classes decorated before activation.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('transformers.rope.dynamic',),
        '`rope_type="dynamic"` (4.57, 5.x), and `"longrope"` on 4.x and 5.3-5.12 (Phi-3): a Python `if` '
        'on `max(position_ids)`. Patched once, at `dynamic_rope_update`, for every model that uses it '
        '(also classes decorated before activation): a traced select between original and rescaled '
        'frequencies.',
    ),
)
