"""Replacements for Longformer's and LED's rows (``rows.py``). Their encoders attend within a window of
``attention_window`` tokens around each token, plus to and from the tokens marked global.

Upstream pads the text to a multiple of the window behind ``if padding_len > 0`` (a guard on the length), reads
the window's scores from overlapping chunks made by ``view`` and ``as_strided`` (whose contiguity checks guard on the
chunk count being 1, as traced), divides sizes with ``torch.div`` (a tensor read back as a size) and takes the global
branch behind ``if is_global_attn`` (a value of the data). Here the window is computed for any length, by index:

  * the queries go by blocks of w (the one-sided window); block m attends to the 3w keys from (m - 1) w, gathered
    by index and clamped into the text (keys outside it at -inf, as upstream's ``_mask_invalid_locations`` puts
    them); the band of query r of the block is columns r .. r + 2w of the block's scores;
  * the global tokens' columns are always there: one more column than the batch's largest global count, the empty
    ones at the dtype's minimum as upstream fills a row's unused global columns. Their probability is exactly 0 in
    float32, so a batch without global tokens gets upstream's local-only values;
  * the text is not padded (the pad rows): a padded token is a key masked at the dtype's minimum, whose probability
    is exactly 0 beside any real key, and a query cut from the output; every real token's values are upstream's.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ...kit import calls_original, runtime


def _same_length(attention_mask, input_ids, inputs_embeds):
    """Tells torch the mask is as long as the text (eager fails otherwise): dynamic shapes that give each input its
    own length symbol would leave the lengths unrelated, and every size made from both would guard."""
    text = input_ids if input_ids is not None else inputs_embeds
    torch._check(attention_mask.shape[1] == text.shape[1])


def longformer_unpadded(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, pad_token_id):
    """``LongformerModel._pad_to_window_size``: no padding (the band attention of this module takes any length)."""
    _same_length(attention_mask, input_ids, inputs_embeds)
    return 0, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds


def led_unpadded(self, input_ids, attention_mask, inputs_embeds, pad_token_id):
    """``LEDEncoder._pad_to_window_size``: no padding (the band attention of this module takes any length)."""
    _same_length(attention_mask, input_ids, inputs_embeds)
    return 0, input_ids, attention_mask, inputs_embeds


def _blocks(rows: int, length, window: int, device):
    """The blocks of ``window`` queries of every (batch, head) row, flat: block n of row r = n // blocks; its query
    positions (n, window) and its 3 * window key positions from one window before it (n, 3 * window), clamped into
    the text, and which of those keys are in it. Flat on purpose: a dimension of its own for the block count, which
    is 1 when traced below one window, makes every broadcast of it guard on that 1 (``broadcast_in_dim``'s check
    of size-1 dimensions), and the program would refuse longer texts; rows * blocks is never 1 for torch."""
    count = (length + window - 1) // window
    row, index = runtime.flat_blocks(rows, count, device)
    start = index[:, None] * window
    queries = (start + torch.arange(window, device=device)).clamp(max=length - 1)
    keys = start - window + torch.arange(3 * window, device=device)
    inside = (keys >= 0) & (keys < length)
    return row[:, None], queries, keys.clamp(0, length - 1), inside


def _to_tokens(blocks, batch, heads: int, length, window: int):
    """(blocks, window, x) of ``_blocks``' flat order back to (batch, length, heads, x): token l of head h of row b
    is query l % window of block (b * heads + h) * blocks + l // window. Gathered, not viewed: splitting the flat
    dimension guards on the block count as the view is computed."""
    count = (length + window - 1) // window
    device = blocks.device
    tokens = torch.arange(length, device=device)
    rows = torch.arange(batch, device=device)[:, None] * heads + torch.arange(heads, device=device)
    block = rows[:, None, :] * count + (tokens // window)[None, :, None]
    return blocks[block, (tokens % window)[None, :, None]]


def _globals(is_index_global_attn):
    """The global tokens' positions per row, (batch, slots), in order, and which slots hold one: slots are one more
    than the largest count of the batch (so never empty), the unused ones pointing at the last token."""
    batch, length = is_index_global_attn.shape
    counts = is_index_global_attn.long().sum(dim=1)
    most = counts.max().item()
    torch._check(most >= 0)
    torch._check(most <= length)
    positions = torch.arange(length, device=is_index_global_attn.device).expand(batch, length)
    # Non-global tokens sort after the global ones, at `length`; one more such column makes room for the spare slot.
    order = torch.cat([torch.where(is_index_global_attn, positions, length), torch.full_like(positions[:, :1], length)],
                      dim=1)
    slots = order.sort(dim=1).values.narrow(1, 0, most + 1)
    used = slots < length
    return slots.clamp(max=length - 1), used


def _rows(tensor, rows):
    """``tensor[b, rows[b, s]]`` for every row b: (batch, slots, ...)."""
    return tensor[torch.arange(tensor.shape[0], device=tensor.device)[:, None], rows]


@calls_original
def longformer_band(original, self, hidden_states, attention_mask=None, *rest, is_index_masked=None,
                    is_index_global_attn=None, is_global_attn=None, output_attentions=False, layer_head_mask=None):
    """``LongformerSelfAttention.forward`` (and LED's encoder's copy of it) for any length: see the module. Its
    values are upstream's for every token of any text upstream takes (a multiple of the window). Attention
    probabilities asked for, or arguments passed by position: the original (an encoder that returns attentions
    branches on the data before it gets here: whether any token is global decides its outputs)."""
    if rest or output_attentions or attention_mask is None:
        return original(self, hidden_states, attention_mask, *rest, is_index_masked=is_index_masked,
                        is_index_global_attn=is_index_global_attn, is_global_attn=is_global_attn,
                        output_attentions=output_attentions,
                        **({} if layer_head_mask is None else {"layer_head_mask": layer_head_mask}))
    batch, length, embed_dim = hidden_states.shape
    heads, head_dim, window = self.num_heads, self.head_dim, self.one_sided_attn_window_size
    device, dtype = hidden_states.device, hidden_states.dtype

    def split(vectors):  # (batch, length, embed) -> (batch, length, heads, head_dim)
        return vectors.view(batch, vectors.shape[1], heads, head_dim)

    query = split(self.query(hidden_states) / math.sqrt(head_dim))
    key = split(self.key(hidden_states))
    value = split(self.value(hidden_states))

    # The window's scores, (batch, length, heads, 2w + 1) as upstream lays them out: column w + d is the key d
    # tokens after the query. Computed per block: (blocks, w, 3w) scores, the band of query r is columns r .. r + 2w.
    def flat(vectors):  # (batch, length, heads, head_dim) -> (batch * heads, length, head_dim)
        return vectors.transpose(1, 2).reshape(batch * heads, length, -1)

    row, queries, keys, inside = _blocks(batch * heads, length, window, device)
    offset = torch.arange(window, device=device)[:, None]
    band = offset + torch.arange(2 * window + 1, device=device)
    scores = (flat(query)[row, queries] @ flat(key)[row, keys].transpose(-1, -2))[:, offset, band]
    # Upstream's diagonal mask: the dtype's minimum on masked and global keys, -inf outside the text.
    minimum = torch.finfo(dtype).min
    key_mask = (attention_mask != 0).to(dtype) * minimum
    scores = scores + key_mask[row // heads, keys].masked_fill(~inside, float("-inf"))[:, band]
    scores = _to_tokens(scores, batch, heads, length, window)

    # The global keys' columns, first, the unused slots at the dtype's minimum (upstream's filling).
    slots, used = _globals(is_index_global_attn)
    global_keys = _rows(key, slots) * used[:, :, None, None]
    global_scores = torch.einsum("blhd,bshd->blhs", query, global_keys)
    global_scores = global_scores.masked_fill(~used[:, None, None, :], minimum)
    slot_count = slots.shape[1]
    scores = torch.cat((global_scores, scores), dim=-1)

    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
    probs = probs.masked_fill(is_index_masked[:, :, None, None], 0.0)
    if layer_head_mask is not None:  # 4.x
        probs = layer_head_mask.view(1, 1, -1, 1) * probs
    probs = nn.functional.dropout(probs.type_as(scores), p=self.dropout, training=self.training)

    global_values = _rows(value, slots) * used[:, :, None, None]
    output = torch.matmul(probs.narrow(-1, 0, slot_count).transpose(1, 2), global_values.transpose(1, 2)).transpose(1, 2)
    # The band's probabilities spread back over each block's 3w keys: key column j of query r is band column j - r.
    local = flat(probs.narrow(-1, slot_count, 2 * window + 1))[row, queries]
    spread = torch.arange(3 * window, device=device) - offset
    within = (spread >= 0) & (spread <= 2 * window)
    local = local[:, offset, spread.clamp(0, 2 * window)].masked_fill(~within, 0.0) @ flat(value)[row, keys]
    local = _to_tokens(local, batch, heads, length, window)
    output = (output + local).reshape(batch, length, embed_dim)

    # The global tokens attend to every token with their own projections; their rows of the output are those.
    global_hidden = _rows(hidden_states, slots) * used[:, :, None]
    global_query = split(self.query_global(global_hidden) / math.sqrt(head_dim)).transpose(1, 2)
    global_key = split(self.key_global(hidden_states)).transpose(1, 2)
    global_value = split(self.value_global(hidden_states)).transpose(1, 2)
    everywhere = (global_query @ global_key.transpose(-1, -2)).masked_fill(~used[:, None, :, None], minimum)
    everywhere = everywhere.masked_fill(is_index_masked[:, None, None, :], minimum)
    everywhere_probs = nn.functional.softmax(everywhere, dim=-1, dtype=torch.float32)
    if layer_head_mask is not None:  # 4.x
        everywhere_probs = layer_head_mask.view(1, -1, 1, 1) * everywhere_probs
    everywhere_probs = nn.functional.dropout(everywhere_probs.type_as(everywhere), p=self.dropout,
                                             training=self.training)
    from_globals = (everywhere_probs @ global_value).transpose(1, 2).reshape(batch, slot_count, embed_dim)
    # Token l of row b is global number (global tokens of b up to l) - 1.
    rank = (is_index_global_attn.long().cumsum(dim=1) - 1).clamp(min=0)
    output = torch.where(is_index_global_attn[:, :, None], _rows(from_globals, rank), output)
    return (output,)
