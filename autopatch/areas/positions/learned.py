"""Rewriters for the rows of ``positions/rows.py``.

``position_ids[:, past:]`` and ``position_ids[:, -new:]`` hold the same positions whenever the attention mask is
``past + new`` long, which is what transformers asks of it (and what eager needs: the positions are added to the
new tokens' embeddings). The second is sized by the input itself, so the program's shapes stay those of the
inputs and torch has no difference of sizes to guard on.
"""

from __future__ import annotations

from ...kit import calls_original


def _keep_last(function, cut: str, new_tokens: str):
    from ...kit import substitute_expressions

    return substitute_expressions(function, {f"position_ids[:, {cut}:]": f"position_ids[:, -{new_tokens}:]"})


def opt_new_positions(forward):
    """OPTDecoder.forward (4.57 and 5.x): ``position_ids[:, past_seen_tokens:]``."""
    return _keep_last(forward, "past_seen_tokens", "inputs_embeds.shape[1]")


def biogpt_new_positions(forward):
    """4.x BioGptModel.forward: ``position_ids[:, past_key_values_length:]``."""
    return _keep_last(forward, "past_key_values_length", "inputs_embeds.shape[1]")


def reformer_axial_gather(forward):
    """``AxialPositionEmbeddings.forward``: ``torch.cat([index_select(pe[i], 0, ids[i])[None] for i in
    range(batch)])`` is ``torch.gather(pe, 1, ids[..., None].expand(..., dim))``, the same rows, the batch kept
    symbolic."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        "torch.cat([torch.index_select(position_encodings[i], 0, position_ids[i]).unsqueeze(0) "
        "for i in range(batch_size)], dim=0)":
        "torch.gather(position_encodings, 1, position_ids.unsqueeze(-1).expand(-1, -1, position_encodings.shape[-1]))",
    })


def gptsan_positions_gathered(forward):
    """``GPTSanJapaneseModel.forward``: ``for i in range(num_batch): hidden_states[i] += torch.gather(weight, 0,
    gather_position[i])`` is one gather along the positions of the table expanded over the batch: per element the
    same row read and the same single addition, the batch kept symbolic."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        "for i in range(num_batch):\n"
        "    hidden_states[i] += torch.gather(self.position_embeddings.weight, dim=0, index=gather_position[i])":
        "hidden_states += torch.gather(self.position_embeddings.weight.expand(num_batch, -1, -1), dim=1, "
        "index=gather_position)",
    })


@calls_original
def reformer_chunk_length_int(original, config):
    """Reformer's ``_get_least_common_mult_chunk_len``: with both attention kinds it returns ``np.lcm(...)``, a
    numpy integer. Its forward tests ``length % lcm != 0`` to decide on padding; Dynamo (``strict=True``) follows a
    numpy integer as an array and stops at that test ("Data-dependent branching"), and cannot convert it either.
    The same value by ``math.lcm``, a Python int; with one attention kind, the original (a config value)."""
    import math

    if set(config.attn_layers) == {"lsh", "local"}:
        return math.lcm(config.lsh_attn_chunk_length, config.local_attn_chunk_length)
    return original(config)
