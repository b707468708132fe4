"""Rewriters for the rows of ``positions/rows.py`` whose position table is computed, not learned."""

from __future__ import annotations


def ctrl_table_local(forward):
    """``CTRLModel.forward`` (5.13+): the sinusoidal table, a buffer, is cast to the device and dtype of the
    embeddings and assigned back to ``self.pos_encoding`` before it is indexed. Assigning a tensor to a buffer's
    name re-registers the buffer, which Dynamo cannot follow (``strict=True``: "Unsupported python_type() call").
    The cast table is kept in a local instead: the same rows are indexed, and the module is left as it was."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        "self.pos_encoding = self.pos_encoding.to(device=device, dtype=inputs_embeds.dtype)":
        "pos_encoding = self.pos_encoding.to(device=device, dtype=inputs_embeds.dtype)",
        "self.pos_encoding[position_ids, :]": "pos_encoding[position_ids, :]",
    })
