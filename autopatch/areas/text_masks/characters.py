"""Replacements for CANINE's rows of ``text_masks/rows.py``. CANINE reads characters, pools them into molecules of
``downsampling_rate`` characters, and first encodes the characters with attention local to chunks of
``local_transformer_stride`` characters. Upstream pools the mask with ``nn.MaxPool1d``, whose output size the
export computes from the traced length, and loops over the chunks in Python: both made the length a constant."""

from __future__ import annotations

import torch

from ...kit import calls_original, runtime


def _pooled_mask(char_attention_mask, rate: int):
    """``MaxPool1d(rate, rate)`` of the mask as float, shape (batch, 1, molecules): the maximum of every whole group
    of ``rate`` characters, a trailing partial group dropped as the pool drops it. The same comparisons, so the
    same values. The groups are gathered by index: slicing them off and reshaping (or ``unfold``, a strided view)
    guards on the length being a multiple of the rate, or not, as it was when traced."""
    length = char_attention_mask.shape[1]
    device = char_attention_mask.device
    groups = torch.arange(length // rate, device=device)[:, None] * rate + torch.arange(rate, device=device)
    return char_attention_mask.float()[:, groups].amax(dim=-1).unsqueeze(1)


def canine_molecule_mask(self, char_attention_mask, downsampling_rate):
    """``CanineModel._downsample_attention_mask`` (5.x): the pooled mask, its channel dimension dropped."""
    return _pooled_mask(char_attention_mask, downsampling_rate).squeeze(1)


def canine_molecule_mask_4x(self, char_attention_mask, downsampling_rate):
    """``CanineModel._downsample_attention_mask`` (4.x). Upstream squeezes the last dimension, which removes
    nothing unless the text is a single molecule: the pooled mask keeps its (batch, 1, molecules) shape. With
    one molecule upstream returns (batch, 1); the extended attention mask made from either is the same
    (batch, 1, 1, 1), so the model computes the same values."""
    return _pooled_mask(char_attention_mask, downsampling_rate)


def canine_repeat_molecules(self, molecules, char_seq_length):
    """``CanineModel._repeat_molecules``: every character takes its molecule's row, the characters past the last
    whole molecule the last row, <cls> (row 0) left out. Upstream slices <cls> off, repeats the rows and
    concatenates the remainder: the slice's contiguity checks guard on the molecule count being 1 or 2, or not,
    as it was when traced. The same rows gathered by index (with one molecule, the only row: upstream's too)."""
    rate = self.config.downsampling_rate
    characters = torch.arange(char_seq_length, device=molecules.device)
    rows = (characters // rate + 1).clamp(max=molecules.shape[1] - 1)
    return molecules[:, rows]


def _block_diagonal(attention) -> bool:
    """Chunks that tile the sequence (width == stride, from and to alike), with no position attending to all or
    attended by all: local attention is then attention within each block, whatever the length."""
    width = attention.attend_from_chunk_width
    return (
        attention.attend_from_chunk_stride == width
        and attention.attend_to_chunk_width == width
        and attention.attend_to_chunk_stride == width
        and not attention.always_attend_to_first_position
        and not attention.first_position_attends_to_all
    )


@calls_original
def canine_local_blocks(original, self, hidden_states, attention_mask=None, *rest, **kwargs):
    """``CanineAttention.forward`` with local attention as one batched attention over the blocks, (batch * chunks,
    chunk, hidden) picked by index, where upstream attends chunk by chunk in a Python loop over
    ``range(0, length, stride)``. The last block is filled up to a whole chunk; those keys get -inf, not the
    dtype's minimum of masked keys: upstream's last chunk is shorter, and where all its real keys are masked its
    softmax is uniform over them; -inf keeps the filling out of that average too. Anything else (global
    attention, chunks that overlap or a first position that attends everywhere, attention probabilities or a head
    mask asked for, a mask that is not upstream's 3D one): the original."""
    extras = [*rest, *kwargs.values()]
    if (
        not self.local
        or not _block_diagonal(self)
        or attention_mask is None
        or attention_mask.ndim != 3
        or any(value is not None and value is not False for value in extras)
    ):
        return original(self, hidden_states, attention_mask, *rest, **kwargs)
    batch, length, _ = hidden_states.shape
    chunk = self.attend_from_chunk_width
    chunks = (length + chunk - 1) // chunk
    device = hidden_states.device
    # Every block picked by index, (batch * chunks, chunk): the sample and the positions of each block, the last
    # block's positions past the end pointing at the last character (their keys are masked below, their queries
    # dropped). Padding and reshaping instead guard on the padding being zero or not, and on the chunk count
    # being 1 or not, as they were when traced (the program then refuses other lengths).
    sample, index = runtime.flat_blocks(batch, chunks, device)
    unclamped = index[:, None] * chunk + torch.arange(chunk, device=device)[None, :]
    sample = sample[:, None]
    positions = unclamped.clamp(max=length - 1)
    blocks = hidden_states[sample, positions]

    # The mask's blocks on the diagonal, (batch * chunks, from, to), in upstream's additive form, its order.
    mask = attention_mask[sample[:, :, None], positions[:, :, None], positions[:, None, :]]
    additive = (1.0 - mask.float()) * torch.finfo(hidden_states.dtype).min
    additive = additive.masked_fill((unclamped >= length)[:, None, :], float("-inf"))
    additive = additive[:, None].to(hidden_states.dtype)

    attended = self.self(blocks, blocks, additive)[0]
    # Back to (batch, length, hidden): each character's row in its block.
    index = torch.arange(length, device=device)
    attended = attended[(torch.arange(batch, device=device)[:, None] * chunks + index // chunk), index % chunk]
    return (self.output(attended, hidden_states),)
