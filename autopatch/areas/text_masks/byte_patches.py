"""BLT (Byte Latent Transformer) embeds each byte with hashes of the n-grams ending at it, and groups its bytes into
patches by its small patcher's entropies. The hashes read overlapping ``unfold`` windows, whose tied strides make
the export compare the length with n (fixing it). The entropies come from a ``torch.distributions.Categorical``
that validates its logits with a Python ``if`` on the data (``areas/distributions`` has the program check them).
The number of patches itself is read from the data; the export keeps it as a symbol of its own (unbacked) and the
rest of the model follows it without guards."""

from __future__ import annotations

import torch


def _int64(value: int) -> int:
    """``value`` wrapped to a signed 64-bit integer, as torch's int64 arithmetic wraps it."""
    value %= 1 << 64
    return value - (1 << 64) if value >= 1 << 63 else value


def blt_byte_group_hash(token_ids, group_size=2, prime=1000000007, max_hash=30000):
    """byte_group_hash_function: each token's hash of the ``group_size`` tokens ending at it (zeros before the
    first), ``sum(token_j * prime**j) % max_hash`` in int64. Upstream takes the windows as ``unfold(1, group_size,
    1)``, a view whose last two strides are both 1: the product with the prime's powers orders those dimensions by
    comparing their sizes, the length against the group size, and the export fixes the length (guards
    ``length >= 5``, ``length < 6`` over the groups 3..8). Here the windows are gathered by index (a tensor of
    their own, no tied strides), and the powers, ``prime ** arange(group_size)`` in int64 upstream (wrapping), are
    the same wrapped values computed in Python: a constant, not a Pow that ONNX would compute in floating point.
    Products and sums wrap alike in any order, so the hashes are upstream's exactly, in eager, in the program and
    in onnxruntime (whose ReduceSum of int64 does not wrap: the terms are added one by one)."""
    with torch.no_grad():
        batch_size, seq_len = token_ids.shape
        padding = torch.zeros(batch_size, group_size - 1, dtype=torch.int64, device=token_ids.device)
        padded_tokens = torch.cat([padding, token_ids], dim=1)
        window = torch.arange(seq_len, device=token_ids.device).unsqueeze(-1) + torch.arange(
            group_size, device=token_ids.device)
        powers = torch.tensor([_int64(prime**j) for j in range(group_size)], dtype=torch.int64,
                              device=token_ids.device)
        products = padded_tokens[:, window] * powers
        # Summed one term at a time, not by torch.sum: an ONNX ReduceSum of int64 past 2**53 answers wrong in
        # onnxruntime (rounded, saturated at the int64 maximum; measured), where Add wraps as torch does.
        hashes = products[..., 0]
        for j in range(1, group_size):
            hashes = hashes + products[..., j]
        return hashes % max_hash



def blt_patch_lengths(entropies, sequence_length, patch_size=None, threshold=None):
    """BltPatcher.patch_lengths_from_entropies, the same lengths. Upstream cuts the first entropy off
    (``entropies[:, 1:]``, a view of length - 1 columns), picks each row's starts with a boolean index
    (``padded_indices[padded_mask]``: its positions over the threshold ascending, then a sentinel ``seq_len`` =
    length - 1 for each other one) and reshapes it back to ``seq_len`` columns. The ops on that view and the
    reshape's contiguity check guard on ``length - 1`` being neither 0 nor 1 (sort) or at least 2: the program
    refuses one- or two-token steps and short prompts ('Guard failed: -1 + input_ids.size()[1] != 1',
    'input_ids.size()[1] >= 3'). Here every tensor keeps the full length: the first position is masked out
    instead of cut off, each position ``p`` stands for upstream's ``p - 1``, and the starts are
    ``torch.where(mask, p - 1, seq_len)`` sorted per row (one sentinel more than upstream's, at the end). The cut
    to the batch's largest count of starts (at most ``seq_len``) is upstream's, so the extra column never
    remains: the same tensor, and the number of patches stays the data's (an unbacked size)."""
    batch_size, length = entropies.shape
    positions = torch.arange(length, device=entropies.device)
    patch_mask = (entropies > threshold) & (positions >= 1)  # the first token's entropy (BOS) ignored, as upstream
    seq_len = length - 1
    patch_starts = torch.where(patch_mask, positions - 1, seq_len).sort(dim=1).values
    max_valid_patches = patch_mask.sum(dim=1).max()
    patch_starts = patch_starts[:, :max_valid_patches]
    init_tokens = torch.tensor([0, 1], dtype=torch.long, device=entropies.device).unsqueeze(0).repeat(batch_size, 1)
    patch_start_ids = torch.cat((init_tokens, patch_starts + init_tokens.shape[1]), dim=1)
    last_token = torch.full_like(patch_start_ids[:, :1], sequence_length - 1)
    patch_ends = torch.cat((patch_start_ids[:, 1:] - 1, last_token), dim=1)
    return patch_ends - patch_start_ids + 1
