"""Nemotron-H-Omni (transformers 5.23): its RADIO vision tower packs every image's patches into one sequence
(``pixel_values [patches, channels * patch**2]``, ``image_grid_hw [images, 2]`` their (rows, columns)), and its
code reads that grid image by image in Python:

- the patch embeddings resample the learned position grid to each image with ``F.interpolate`` (to a square as
  large as the image's longer side, then cut to its grid: a Python ``if`` on the sizes) and put the class and
  register tokens before each image's patches, in a loop over ``image_grid_hw.tolist()``;
- the tower passes ``cu_seqlens`` only when ``len(sequence_lengths) > 1`` (the number of images as an int);
- the attention, without a varlen kernel, splits q/k/v per image with ``lengths.tolist()``;
- ``get_image_features`` splits the tower's features per image with ``.tolist()`` sizes and pixel-shuffles each
  image's grid in a loop, then splits the projected features per image again.

The replacements compute the same values for every patch or token at once, with ``packed.py``'s helpers and the
runtime's bilinear taps: the number of images, their sizes, the batch and the text length stay symbolic.
"""

from __future__ import annotations

import torch

from ...kit import calls_original, runtime
from .packed import _firsts, _locate


def _fma(x, y, z):
    """``x * y + z`` rounded once to float32, as a fused multiply-add does: the product of two float32 values is
    exact in float64."""
    return (x.double() * y.double() + z.double()).float()


def _position_embeddings(table, rows, columns, image, index):
    """RADIO's ``_interpolate_position_embedding`` for every patch at once: patch ``index`` (raster order) of image
    ``image``, whose grid is ``rows x columns``, reads the learned ``side_rows x side_columns x dim`` grid ``table``
    resampled bilinearly (``align_corners=False``) to ``s x s``, ``s = max(rows, columns)``, at its (row, column):
    upstream resamples to that square and cuts it to the image's grid, whose cells keep their place (its second
    resampling, to the grid, never runs: the cut square is the grid). The taps and weights are F.interpolate's
    (``runtime._linear_taps``; the kernel multiplies a row weight by a column weight per tap, as here). The grid is
    channels-last (upstream permutes it from ``[1, cells, dim]``), so torch's CPU kernel sums the four taps in
    vectors of channels; measured on an AVX-512 build (float32, 64 and 1280 channels, 25 random grids): the
    bottom-left tap times its weight, the bottom-right, top-right and top-left taps added by fused multiply-adds,
    in that order, bit for bit the same. Channels past the last whole vector (none at 64 or 1280) are summed by
    the kernel's scalar loop in another order: equal to float32 rounding there."""
    side_rows, side_columns, _ = table.shape
    height, width = rows[image], columns[image]
    row, column = index // width, index % width
    square = torch.maximum(height, width)
    top, bottom, w_top, w_bottom = runtime._linear_taps(row, torch.full_like(square, side_rows), square)
    left, right, w_left, w_right = runtime._linear_taps(column, torch.full_like(square, side_columns), square)
    flat = table.float().reshape(side_rows * side_columns, -1)

    def tap(y, x, weight_y, weight_x):
        return flat[y * side_columns + x], (weight_y * weight_x)[:, None]

    total = torch.mul(*tap(bottom, left, w_bottom, w_left))
    for y, x, weight_y, weight_x in ((bottom, right, w_bottom, w_right), (top, right, w_top, w_right),
                                     (top, left, w_top, w_left)):
        total = _fma(*tap(y, x, weight_y, weight_x), total)
    return total


def radio_embed_packed(self, pixel_values, image_grid_hw):
    """``RadioPatchEmbeddings._embed_packed_patches`` (5.23) without the loop over ``image_grid_hw.tolist()``:
    upstream projects every patch, adds each image's resampled position grid to its patches and puts the class
    and register tokens before them, image after image, in one ``[1, length, hidden]`` sequence. Here every patch
    computes its position embedding (``_position_embeddings``, cast to the patches' dtype as upstream), and one
    scatter lays the prefix tokens and the patches at their places in the sequence."""
    patches = self.patch_projection(pixel_values)
    rows, columns = image_grid_hw[:, 0], image_grid_hw[:, 1]
    image, index = _locate(rows * columns)  # every patch's image and place in it
    torch._check(image.shape[0] == patches.shape[0])  # upstream splits the patches by these counts
    table = self.position_embedding.reshape(self.max_rows, self.max_cols, -1)
    patches = patches + _position_embeddings(table, rows, columns, image, index).to(patches.dtype)
    prefix = self.cls_register_token
    count, images = prefix.shape[0], image_grid_hw.shape[0]
    # In the sequence, image i starts after the patches and prefixes of the images before it.
    starts = _firsts(rows * columns + count, torch.arange(images, device=patches.device))
    prefix_places = (starts[:, None] + torch.arange(count, device=patches.device)).flatten()
    patch_places = torch.arange(patches.shape[0], device=patches.device) + count * (image + 1)
    places = torch.cat([prefix_places, patch_places])
    tokens = torch.cat([prefix.repeat(images, 1), patches])
    order = torch.empty_like(places).scatter(0, places, torch.arange(places.shape[0], device=places.device))
    return tokens[order].unsqueeze(0)


#: RADIO's attention without a varlen kernel: q/k/v split per image, one call per image.
_RADIO_CHUNKS = ("splits = [torch.split(tensor, lengths.tolist(), dim=2) "
                 "for tensor in (query_states, key_states, value_states)]")
_RADIO_PER_CHUNK = ("outputs = [attention_interface(self, query, key, value, attention_mask={mask}, "
                    "**attention_kwargs, **kwargs) for query, key, value in zip(*splits)]")


def radio_attention_one_call(attention_forward):
    """A rewriter for ``RadioAttention.forward`` (5.23): without a varlen kernel it splits q/k/v per image with
    ``lengths.tolist()`` and attends image by image. Rewritten from the source: one chunk (the whole sequence)
    attended once with the block-diagonal mask built from ``cu_seqlens``. Eager attention's weights then come as
    one map of the whole sequence, zero between images, which upstream's loop copies in place of its per-image
    blocks (the same map). The dense path (no ``cu_seqlens``) and the flash path are unchanged."""
    from ...kit import substitute_expressions

    return substitute_expressions(attention_forward, {
        _RADIO_CHUNKS: "splits = [(query_states,), (key_states,), (value_states,)]",
        _RADIO_PER_CHUNK.format(mask="None"):
        _RADIO_PER_CHUNK.format(mask="__autopatch_rt.block_diagonal_mask(cu_seqlens, query)"),
    })


def radio_packed_every_count(forward_packed):
    """A rewriter for ``RadioModel._forward_packed`` (5.23): it hands the encoder ``cu_seqlens`` only when
    ``len(sequence_lengths) > 1``, a Python test of the number of images, and takes the patches' features out
    with a mask whose count is data. Rewritten from the source: ``cu_seqlens`` always (one image's block-diagonal
    mask masks nothing: the same attention), and the features' count stated equal to the patches' (the mask keeps
    every patch, upstream's caller checks so)."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward_packed, {
        "cu_seqlens if len(sequence_lengths) > 1 else None": "cu_seqlens",
        "features = last_hidden_state[positions_in_image >= num_prefix_tokens]":
        "features = last_hidden_state[positions_in_image >= num_prefix_tokens]\n"
        "torch._check(features.shape[0] == pixel_values.shape[0])",
    })


@calls_original
def nemotron_h_omni_image_features(original, self, pixel_values, image_grid_hw, **kwargs):
    """``NemotronH_Omni_Reasoning_V3.get_image_features`` (5.23) without its loops over the images: upstream splits
    the tower's features per image with ``.tolist()`` sizes, pixel-shuffles each image's ``(rows, columns)`` grid
    (``downsample_ratio`` 0.5: every merged token at (i, j) holds the patches (2i, 2j), (2i, 2j + 1), (2i + 1, 2j),
    (2i + 1, 2j + 1) side by side in its channels, tokens row-major), projects them and splits them per image
    again, which its caller concatenates. Here every merged token gathers its four patches from the packed
    features; the norm and the projector act token by token, as on upstream's tensors. The features come back as
    one element. Another ratio (upstream's own split sizes assume 0.5) and a call asking for a tuple take the
    original."""
    if self.config.downsample_ratio != 0.5 or kwargs.get("return_dict") is False:
        return original(self, pixel_values, image_grid_hw, **kwargs)
    torch._check_tensor_all(image_grid_hw.prod(-1).sum() == pixel_values.shape[0])
    pixel_values = pixel_values.to(dtype=self.vision_model.config.torch_dtype)
    vision_outputs = self.vision_model(pixel_values, image_grid_hw=image_grid_hw, **kwargs)
    features = vision_outputs.features
    if self.vision_final_layernorm is not None:
        features = self.vision_final_layernorm(features)
    rows, columns = image_grid_hw[:, 0], image_grid_hw[:, 1]
    torch._check_tensor_all((rows % 2 == 0) & (columns % 2 == 0))  # upstream's view fails on an odd side
    across = columns // 2
    image, merged = _locate((rows // 2) * across)  # every merged token's image and place in it
    width = columns[image]
    row, column = merged // across[image], merged % across[image]
    step = torch.arange(2, device=features.device)
    first = _firsts(rows * columns, image)[:, None, None]  # the image's first patch
    source = (first + (2 * row[:, None, None] + step[:, None]) * width[:, None, None]
              + 2 * column[:, None, None] + step)  # [merged, 2 (row in block), 2 (column in block)]
    blocks = features[source.reshape(-1)].reshape(source.shape[0], 4 * features.shape[-1])
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    return BaseModelOutputWithPooling(last_hidden_state=vision_outputs.last_hidden_state,
                                      pooler_output=(self.multi_modal_projector(blocks),),
                                      hidden_states=vision_outputs.hidden_states, attentions=vision_outputs.attentions)
