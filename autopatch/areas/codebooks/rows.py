"""The rows of this area. Audio decoders whose codebooks are packed in the batch of their ids (MusicGen,
MusicGen-Melody): the batch they unpack is an expression of the ids' size, not an input dim.
"""

from __future__ import annotations

from ...spec import PatchSpec

#: (model, decoder class, fingerprint of its forward on 5.23.0). transformers 4.57's decode step fails in eager
#: itself (the sweep's upstream verdict), so the rows start at 5.
PACKED_DECODERS = (
    ("musicgen", "MusicgenDecoder", "2a49091410d0"),
    ("musicgen_melody", "MusicgenMelodyDecoder", "ea32403c7250"),
)

ROWS = tuple(
    PatchSpec(
        id=f"transformers.codebooks.{model}_batch_from_cache",
        family="transformers",
        trigger=f"transformers.models.{model}.modeling_{model}",
        target=f"{decoder}.forward",
        mode="rewrite",
        replacement="autopatch.areas.codebooks.musicgen:batch_from_cache",
        requires=("transformers>=5",),
        fingerprints=(fingerprint,),
        needs=("torch.export.derived_size_ranges", "torch.export.derived_size_ranges_alias"),
        reason=f"{decoder} unpacks its ids (batch * codebooks, length) by reshape(-1, codebooks, length): traced, "
        "the batch is ids_size // codebooks, an expression export guards on being other than 1, so a decode step "
        "traced at batch 2 refuses batch 1. In a decode step the batch is read from the keys the cache holds (the "
        "cache's own dim; -1 as upstream in a prefill). Its layer loop draws random.uniform for LayerDrop, which "
        "strict export refuses ('Dynamo attempts to add additional input'): drawn only when training.",
    )
    for model, decoder, fingerprint in PACKED_DECODERS
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ("transformers.codebooks.musicgen_batch_from_cache", "transformers.codebooks.musicgen_melody_batch_from_cache"),
        "MusicGen's and MusicGen-Melody's decoders unpack their ids (batch x codebooks) by `reshape(-1, codebooks, "
        "length)`: traced, that batch is an expression of the ids' size, which export guards on being other than 1 "
        "(a decode step traced at batch 2 refused batch 1). A decode step reads the batch from the keys its cache "
        "holds, the cache's own dim; with `torch.export.derived_size_ranges`. LayerDrop's `random.uniform`, which "
        "strict export refuses, is drawn only when training.",
    ),
)
