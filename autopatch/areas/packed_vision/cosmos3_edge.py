"""Cosmos3-Edge (transformers 5.23): a SigLIP 2 tower packed the Qwen2-VL way (every image's patches in one sequence,
``image_grid_thw [images, 3]`` their grids) whose own code reads that grid image by image:

- the patch embeddings resample the learned square position grid to each image's size with an antialiased
  bilinear ``F.interpolate`` in a loop over ``grid_thw.tolist()`` (the output size is data: guard ``u1 > 0``);
- the attention splits q/k/v per frame with ``lengths.tolist()`` and attends chunk by chunk.

The replacements below compute the same values for every patch at once, with ``packed.py``'s helpers. (The
feature split and the rope index, Qwen3-VL's rules, are ``packed.py``'s.)
"""

from __future__ import annotations

import torch

from .packed import _CHUNKS, _patch_layout


def _antialiased_bilinear_weights(index, out_size, in_size: int):
    """Each output index's weights over the ``in_size`` input positions, as ``F.interpolate(mode="bilinear",
    antialias=True, align_corners=False)`` computes them along one axis (``out_size`` per index): the triangle
    filter centred at ``scale * (index + 0.5)``, widened by the scale when shrinking (``scale = in / out``), every
    input position's weight normalised by their sum. Zero outside the filter's support, where upstream does not
    look, so the dense sum adds nothing there."""
    scale = in_size / out_size.to(torch.float32)
    inverse = torch.where(scale >= 1.0, 1.0 / scale, torch.ones_like(scale))
    centre = scale * (index.to(torch.float32) + 0.5)
    position = torch.arange(in_size, device=index.device, dtype=torch.float32)
    weights = (1.0 - ((position - centre[:, None] + 0.5) * inverse[:, None]).abs()).clamp(min=0.0)
    return weights / weights.sum(dim=-1, keepdim=True)


def positions_packed(positional_embeddings, grid_thw, spatial_merge_size):
    """``Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings`` without the loop over images: every patch's
    position embedding is the learned ``(side, side)`` grid weighted by its row's and its column's antialiased
    bilinear weights (the resampling is separable), for the patches in the packed block-major order
    (``_patch_layout``); every frame of an image has the same. Equal to upstream's up to float rounding (it
    resamples one axis, rounds, then the other)."""
    source_dtype = positional_embeddings.dtype
    grid = positional_embeddings.float()  # as upstream on the CPU (no antialias for half precision there)
    image, _, row, column = _patch_layout(grid_thw, spatial_merge_size)
    rows = _antialiased_bilinear_weights(row, grid_thw[:, 1].to(row.device)[image], grid.shape[0])
    columns = _antialiased_bilinear_weights(column, grid_thw[:, 2].to(row.device)[image], grid.shape[1])
    return torch.einsum("ph,pw,hwd->pd", rows, columns, grid).to(source_dtype)


#: Its per-chunk call (no rotary table: the positions were added before the layers).
_PER_CHUNK = ("attention_interface(self, query, key, value, attention_mask=None, scaling=self.scale, "
              "dropout=0.0 if not self.training else self.dropout, is_causal=False, **kwargs)")


def attention_one_call(attention_forward):
    """A rewriter for ``Cosmos3EdgeVisionAttention.forward``: its non-flash path splits q/k/v per frame with
    ``lengths.tolist()`` and attends chunk by chunk. Rewritten from the source: one chunk (the whole sequence)
    with a block-diagonal mask built from ``cu_seqlens``. The flash path, which takes ``cu_seqlens`` itself, is
    unchanged."""
    from ...kit import substitute_expressions

    return substitute_expressions(attention_forward, {
        _CHUNKS: "splits = [(query_states,), (key_states,), (value_states,)]",
        _PER_CHUNK: _PER_CHUNK.replace("attention_mask=None",
                                       "attention_mask=__autopatch_rt.block_diagonal_mask(cu_seqlens, query)"),
    })
