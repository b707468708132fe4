"""Sparse-attention indexers whose token selection loops in Python: Qwen4-Exp's (5.23) walks every (sample, query)
row, lists the row's visible keys with ``nonzero()`` and pools them in blocks of ``compress_ratio`` only ``if`` it
has a complete block. The replacement selects the same tokens for every row at once."""

from __future__ import annotations

import math
import sys

import torch


def _rope(module):
    """The ``apply_rotary_pos_emb`` of the module defining ``module``'s class (the indexer applies its model's own)."""
    return sys.modules[type(module).__module__].apply_rotary_pos_emb


def qwen4_exp_block_selection(self, hidden_states, position_embeddings, attention_mask, past_key_values):
    """Qwen4ExpTextQSAIndexer.forward (same signature and result, a [batch, 1, query, key] selection mask) without
    its per-row loop. Upstream, for each row: the visible keys in ascending order, cut into blocks of ``C`` (the
    last ``count % C`` are the tail); each complete block is scored by its pooled, normed, rotated key against the
    row's query; the ``block_topk`` best blocks and the tail are selected.

    Every row of the mask this layer gets (causal, padding removed: ``create_causal_mask`` without its skip) sees a
    prefix of what the batch's last row sees, so a key's rank in its row is its rank in the last row and the blocks
    are the same for every row of a sample: they are pooled once per sample (memory batch x keys x head_dim, not
    per query), and each row uses those it completes (block k when ``(k + 1) * C <= count``). A mask without that
    structure is refused at run time rather than answered differently. Exact ties between block scores at the
    top-k cut may pick other blocks than eager, whose choice among equal scores is its kernel's."""
    rope = _rope(self)
    batch_size, seq_length, _ = hidden_states.shape
    hidden_shape = (batch_size, seq_length, -1, self.index_head_dim)
    full_cos, full_sin = position_embeddings
    current_cos, current_sin = full_cos[:, -seq_length:, :], full_sin[:, -seq_length:, :]

    qk = self.index_qk_proj(hidden_states)
    q, token_k = torch.split(
        qk, [self.index_n_heads * self.index_head_dim, self.index_kv_heads * self.index_head_dim], dim=-1)
    q, raw_keys = q.reshape(*hidden_shape), token_k.reshape(*hidden_shape).squeeze(2)
    q = self.q_layernorm(q)
    q = rope(q, cos=current_cos, sin=current_sin, unsqueeze_dim=2)
    if past_key_values is not None:
        raw_keys = past_key_values.update_indexer(raw_keys, self.layer_idx)

    visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    kv_length = visible.shape[-1]
    visible = visible[:, 0].expand(batch_size, seq_length, kv_length)
    ratio, device = self.compress_ratio, hidden_states.device

    last = visible[:, -1]
    rank = last.long().cumsum(-1) - 1  # a key's place among the last row's visible keys
    count = visible.sum(-1)  # per row: its number of visible keys
    torch._check_tensor_all(
        visible == (last[:, None] & (rank[:, None] < count[..., None])),
        lambda: "Qwen4ExpTextQSAIndexer (autopatch): every row of the mask must see a prefix of the keys its "
        "sample's last row sees (a causal mask with padding); this mask does not",
    )
    positions = torch.arange(kv_length, device=device)
    order = (positions + (~last).long() * kv_length).argsort(dim=-1)  # the visible keys ascending, then the rest

    # Two block slots more than keys allow: the slot axis is never 0 or 1 long, sizes export would guard on (a
    # program traced with one block would refuse more). Slots past the keys read position 0 and are never valid.
    slots = kv_length // ratio + 2
    ranks = torch.arange(slots * ratio, device=device).view(slots, ratio)
    padded = torch.cat([order, order.new_zeros((batch_size, 2 * ratio))], dim=-1)
    block_tokens = padded[:, ranks]  # [batch, slots, C]: each block's key positions
    samples = torch.arange(batch_size, device=device)[:, None, None]
    pooled = raw_keys[samples, block_tokens].float().mean(dim=-2).to(raw_keys.dtype)
    pooled = self.k_layernorm(pooled)
    starts = block_tokens[..., 0]
    cos = full_cos.expand(batch_size, -1, -1)[samples[..., 0], starts]
    sin = full_sin.expand(batch_size, -1, -1)[samples[..., 0], starts]
    block_keys = rope(pooled.unsqueeze(-2), cos=cos, sin=sin, unsqueeze_dim=-2).squeeze(-2)  # [batch, slots, D]

    scores = torch.matmul(q.float(), block_keys.float().transpose(-1, -2)[:, None])  # [batch, query, heads, slots]
    scores = torch.relu(scores).sum(dim=2) / math.sqrt(self.index_head_dim)
    complete = count // ratio
    valid = torch.arange(slots, device=device) < complete[..., None]
    # topk(min(block_topk, complete)) over the valid blocks = the valid ones of topk(block_topk) over the scores
    # with the others at -inf, padded so that there are always block_topk (valid scores are finite, >= 0).
    scores = torch.cat([scores.masked_fill(~valid, float("-inf")),
                        scores.new_full((batch_size, seq_length, self.block_topk), float("-inf"))], dim=-1)
    top = scores.topk(self.block_topk, dim=-1).indices
    chosen = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, top, True)[..., :slots] & valid

    key_rank = rank[:, None, :].expand(batch_size, seq_length, kv_length)
    in_chosen = chosen.gather(-1, key_rank.clamp(min=0) // ratio)
    tail = (key_rank >= complete[..., None] * ratio) & (key_rank < count[..., None])
    return (visible & (in_chosen | tail)).unsqueeze(1)
