"""Replacements for Funnel Transformer's rows of ``positions/rows.py``. Funnel pools its sequence block after
block (every other token kept, <cls> apart) and upsamples it back for the decoder; the lengths of every block are
the input's length divided, kept symbolic here where upstream lists its positions, reshapes scores in a way
whose symbolic form guards on a divisibility, or repeats tokens through a view whose contiguity check guards on a
size of 1: guards that hold at the traced length only."""

from __future__ import annotations

import torch

from ...kit import calls_original


class _Positions:
    """The positions ``start, start + step, ..., start + (count - 1) * step``: what Funnel's relative-shift attention
    keeps as a Python list, ``list(range(seq_len))`` then pooled block after block. ``start`` and ``step`` are
    Python ints for every length (the pooling's <cls> position and stride depend on the block only); ``count``
    follows the length, a symbol under export, so nothing is ever listed."""

    __slots__ = ("start", "step", "count")

    def __init__(self, start: int, step: int, count):
        self.start, self.step, self.count = start, step, count

    @property
    def last(self):
        return self.start + (self.count - 1) * self.step

    def pooled(self, block: int, config):
        """``FunnelAttentionStructure.stride_pool_pos``: every other position, the first (and with
        ``truncate_seq`` the last) dropped and the <cls> position ``1 - 2**block`` put first when
        ``separate_cls``. None where the result would not be a progression (it always is: <cls> stands one
        stride before the first kept position)."""
        step = 2 * self.step
        if not config.separate_cls:
            return _Positions(self.start, step, (self.count + 1) // 2)
        # [1:] and, truncated, [:-1]; a count of -1 (one position, both dropped) halves to 0, as [] does
        count = self.count - 1 - (1 if config.truncate_seq else 0)
        cls = 1 - 2**block
        if self.start + self.step - step != cls:  # <cls> one stride before the first kept position
            return None
        return _Positions(cls, step, (count + 1) // 2 + 1)


def _distances(pos: _Positions, pooled: _Positions, stride: int, shift: int, device):
    """``FunnelAttentionStructure.relative_pos``: the relative distances from ``pooled`` to ``pos``, largest
    first, from the same four numbers upstream reads off its lists (first items, last item, length)."""
    largest = pooled.start - pos.start + shift * pooled.count * stride
    smallest = pooled.start - pos.last
    return torch.arange(largest, smallest - 1, -stride, dtype=torch.long, device=device)


@calls_original
def funnel_relative_position_embeds(original, self, seq_len, dtype, device):
    """``FunnelAttentionStructure.get_position_embeds`` of the relative-shift attention lists the positions,
    ``list(range(seq_len))``, and pools the list block by block: the length becomes a constant. The positions
    are arithmetic progressions at every block, so the same distances come from their first item, stride and
    count (``_Positions``), and the same rows of the same sinusoid table are gathered. The factorized attention
    (``arange`` only) and any configuration whose positions were not a progression: the original. (4.x keeps
    the positions in float tensors and sizes the ``arange`` by their items: data, the same values.)"""
    config = self.config
    if config.attention_type == "factorized":
        return original(self, seq_len, dtype, device)
    blocks = [_Positions(0, 1, seq_len)]
    for block in range(1, config.num_blocks):
        blocks.append(blocks[-1].pooled(block, config))
        if blocks[-1] is None:
            return original(self, seq_len, dtype, device)

    half = config.d_model // 2
    frequencies = torch.arange(0, half, 1.0, dtype=torch.int64, device=device).to(dtype)
    inv_freq = 1 / (10000 ** (frequencies / half))  # upstream's operations, in its order: the same table
    zero_offset = seq_len * 2  # the table's row of distance 0
    distances = torch.arange(-zero_offset, zero_offset, 1.0, dtype=torch.int64, device=device).to(dtype)
    sinusoid = distances[:, None] * inv_freq[None]
    table = torch.cat([self.sin_dropout(torch.sin(sinusoid)), self.cos_dropout(torch.cos(sinusoid))], dim=-1)

    def rows(relative):
        index = (relative[:, None] + zero_offset).expand(relative.size(0), config.d_model)
        return torch.gather(table, 0, index)

    embeds = []
    for block, pos in enumerate(blocks):
        # attention of the pooled queries to the previous block's keys (none in block 0), then within the block
        pooling = None if block == 0 else rows(_distances(blocks[block - 1], pos, 2 ** (block - 1), 2, device))
        embeds.append([rows(_distances(pos, pos, 2**block, 1, device)), pooling])
    return embeds


def funnel_relative_shift(positional_attn, context_len, shift):
    """Funnel's ``_relative_shift_gather``: the scores by relative distance, ``[..., queries, distances]``,
    re-read as ``[..., distances, queries]``, the first ``shift`` rows dropped and re-read as
    ``[..., queries, distances - shift]``, which lines each query's scores up with its keys. torch's symbolic
    reshape guards on whether one of those sizes divides the other, true at some traced lengths only (9 distances
    over 3 pooled queries at length 5), and the program then refuses the next length. The same elements picked
    from the flat scores: query i, key j is element ``shift * queries + i * (distances - shift) + j``."""
    batch, heads, queries, distances = positional_attn.shape
    flat = positional_attn.reshape(batch, heads, queries * distances)  # a merge: no divisibility to guard
    device = positional_attn.device
    rows = torch.arange(queries, device=device)[:, None] * (distances - shift)
    index = shift * queries + rows + torch.arange(context_len, device=device)[None, :]
    return flat[:, :, index]


def funnel_upsample(x, stride, target_len, separate_cls=True, truncate_seq=False):
    """Funnel's ``upsample``: each pooled token repeated ``stride`` times (``torch.repeat_interleave``) after
    <cls>, zero-padded with ``truncate_seq``, cut to ``target_len``. Slicing <cls> off leaves a strided tensor
    whose contiguity check guards on the pooled length being 1 wherever it is 1 at the traced length (the last
    block of a length-5 input), and the program refuses every other length. The same rows gathered by index:
    output position t reads token ``(t - 1) // stride + 1`` (0, <cls>, at t = 0), or ``t // stride`` without a
    separate <cls>; past the last token, the zero row upstream pads with. (A target longer than that, which
    upstream would return short and its decoder fail to add to the first block, is an index error here.)"""
    if stride == 1:
        return x
    positions = torch.arange(target_len, device=x.device)
    if not separate_cls:
        return x[:, positions // stride]
    if truncate_seq:  # upstream pads stride - 1 zero rows: positions past the last token read one zero row
        x = torch.nn.functional.pad(x, (0, 0, 0, 1))
    return x[:, (positions - 1) // stride + 1]
