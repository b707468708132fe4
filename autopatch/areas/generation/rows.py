"""The rows of this area. Generation helpers that models call inside their own forward or
``prepare_inputs_for_generation``.
"""

from __future__ import annotations

from ...spec import PatchSpec

ROWS = (
    PatchSpec(
        id="transformers.generation.input_preparation",
        family="transformers",
        trigger="transformers.generation.utils",
        target="GenerationMixin._cache_dependant_input_preparation_exporting",
        mode="route",
        replacement="autopatch.areas.generation.inputs:cache_dependant_input_preparation",
        requires=("transformers>=4.56,<5", "torch>=2.9"),
        fingerprints=("472310d9b203",),
        reason="4.x prepare_inputs_for_generation, while exporting, always gathers input_ids[:, cache_position]: a "
        "decode step given only its new tokens exports, then every run raises IndexError. The eager cases instead: "
        "ids already the new tokens stay, a position past the ids keeps the last tokens (a traced select).",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('transformers.generation.input_preparation',),
        '4.x `prepare_inputs_for_generation`, while exporting, always gathers `input_ids[:, '
        'cache_position]`: a decode step given only its new tokens exports, then every run of the program '
        'raises `IndexError`. The eager cases instead (ids already the new tokens stay; a position past '
        'the ids keeps the last tokens, by a traced select).',
    ),
)
