"""Replacements for SigLIP 2's variable-resolution ("NaFlex") towers and the VLMs built on them (LFM2-VL).

Each image of a batch keeps its own patch grid (``spatial_shapes[i] = (rows, columns)``), padded to the batch's
longest patch sequence. Upstream walks the images in Python twice: the tower resamples its learned position grid
to each image's grid (``F.interpolate`` with antialiasing, at a size read from the data), and LFM2-VL's projector
cuts each image's patches out of the padding and folds ``factor x factor`` blocks into channels. Both loops fix
the number of images; here every patch (or merged token) computes its own image, row and column instead, and one
weighted sum or one gather does the rest.
"""

from __future__ import annotations

import torch

from ...kit import calls_original
from ..packed_vision.packed import _locate


def _antialias_weights(out_size, in_size: int, index):
    """The weights ``F.interpolate(mode="bilinear", antialias=True, align_corners=False)`` gives each of ``in_size``
    source positions for output position ``index`` of ``out_size`` (tensors of one shape, sizes per element),
    as PyTorch's CPU kernel computes them: a triangle filter widened by the scale when shrinking, its support cut
    to whole source positions, normalized to sum 1. Shape: ``index.shape + (in_size,)``."""
    scale = in_size / out_size.to(torch.float32)
    support = torch.clamp(scale, min=1.0)  # bilinear: half the 2-tap width, times the scale when shrinking
    inverse = torch.where(scale >= 1.0, 1.0 / scale, torch.ones_like(scale))
    center = scale * (index.to(torch.float32) + 0.5)
    first = torch.clamp((center - support + 0.5).to(torch.int64), min=0)
    last = torch.clamp((center + support + 0.5).to(torch.int64), max=in_size)  # exclusive
    source = torch.arange(in_size, device=index.device)
    offset = source.to(torch.float32) - center[..., None] + 0.5
    weights = torch.clamp(1.0 - (offset * inverse[..., None]).abs(), min=0.0)
    weights = torch.where((source >= first[..., None]) & (source < last[..., None]), weights, 0.0)
    return weights / weights.sum(-1, keepdim=True)


@calls_original
def siglip2_positions_resampled(original, positional_embeddings, spatial_shapes, max_length):
    """``Siglip2VisionEmbeddings.resize_positional_embeddings`` (a staticmethod) for every image at once: patch
    ``p`` of image ``i`` is row ``p // columns``, column ``p % columns`` of its grid, and takes the antialiased
    bilinear resampling of the learned grid there (one weighted sum per patch, separable weights); the padding
    patches take the first one's, as upstream. The sizes stay data: the program takes any image count and grids.
    Only float32 on the CPU, where its kernel was measured (its one-column quirk below); other dtypes and devices
    keep the original, whose export stops loudly."""
    if positional_embeddings.dtype != torch.float32 or positional_embeddings.device.type != "cpu":
        return original(positional_embeddings, spatial_shapes, max_length)
    side_rows, side_columns, dim = positional_embeddings.shape
    rows = spatial_shapes[:, 0].to(positional_embeddings.device)[:, None]
    columns = spatial_shapes[:, 1].to(positional_embeddings.device)[:, None]
    torch._check_tensor_all((rows > 0) & (columns > 0) & (rows * columns <= max_length),
                            lambda: "autopatch: a resized position grid is empty or longer than max_length")
    patch = torch.arange(max_length, device=positional_embeddings.device)[None, :]
    inside = patch < rows * columns
    row = torch.where(inside, patch // columns, 0)
    column = torch.where(inside, patch % columns, 0)
    # Eager's quirk, kept: torch's CPU kernel (2.13), resampling to one column while resizing the rows, gives
    # every output row the first row's weights (measured over grids of 5, 7 and 16 rows, 1 to 39 output rows).
    quirk = (columns == 1) & (rows != side_rows)
    by_row = _antialias_weights(rows.expand_as(row), side_rows, torch.where(quirk, 0, row))  # [.., side_rows]
    by_column = _antialias_weights(columns.expand_as(column), side_columns, column)
    weights = (by_row[..., :, None] * by_column[..., None, :]).flatten(-2)  # [images, patches, rows*columns]
    return weights @ positional_embeddings.reshape(side_rows * side_columns, dim)


def lfm2_vl_features_gathered(self, pixel_values, spatial_shapes, pixel_attention_mask, **kwargs):
    """``Lfm2VlModel.get_image_features`` for every image at once (``_lfm2_vl_folded``). The features come back as
    one element, which forward concatenates."""
    outputs = self.vision_tower(pixel_values=pixel_values, spatial_shapes=spatial_shapes,
                                pixel_attention_mask=pixel_attention_mask, **{**kwargs, "return_dict": True})
    outputs.pooler_output = [_lfm2_vl_folded(self, outputs.last_hidden_state, spatial_shapes, pixel_attention_mask)]
    return outputs


def lfm2_vl_features_gathered_4x(self, pixel_values, spatial_shapes, pixel_attention_mask, **kwargs):
    """4.x ``Lfm2VlModel.get_image_features``, which returns the list of each image's features (the tower called
    without ``**kwargs``, as there): one element holding them all, which forward concatenates the same."""
    hidden = self.vision_tower(pixel_values=pixel_values, spatial_shapes=spatial_shapes,
                               pixel_attention_mask=pixel_attention_mask).last_hidden_state
    return [_lfm2_vl_folded(self, hidden, spatial_shapes, pixel_attention_mask)]


def _lfm2_vl_folded(self, hidden, spatial_shapes, pixel_attention_mask):
    """Every image's projected features, in image order: upstream cuts each image's patches out of the padding,
    views them as its (rows, columns) grid and folds each ``factor x factor`` block into the channels (the
    projector's pixel unshuffle), image by image. Here each merged token finds its image, block row and block
    column, and gathers its block's patches in the channel order the unshuffle gives ((block row, block column,
    channel)); the projector's norm and layers then act token by token, as on upstream's tensors.
    ``hidden``: the tower's [images, patches, channels]."""
    factor = self.multi_modal_projector.factor
    device = hidden.device
    rows, columns = spatial_shapes[:, 0].to(device), spatial_shapes[:, 1].to(device)
    torch._check_tensor_all((rows % factor == 0) & (columns % factor == 0)
                            & (pixel_attention_mask.sum(dim=1).to(device) == rows * columns),
                            lambda: "autopatch: an image grid that the projector cannot fold (upstream's reshape "
                                    "fails too)")
    block_columns = columns // factor
    image, local = _locate((rows // factor) * block_columns)  # each merged token's image and place in it
    block_row, block_column = local // block_columns[image], local % block_columns[image]
    step = torch.arange(factor, device=device)
    source = ((block_row[:, None, None] * factor + step[None, :, None]) * columns[image][:, None, None]
              + block_column[:, None, None] * factor + step[None, None, :])  # [tokens, factor, factor]
    folded = hidden[image[:, None, None], source].flatten(1)  # [tokens, factor * factor * channels]
    projector = self.multi_modal_projector
    if getattr(projector, "use_layer_norm", True):  # 4.x projectors always norm (5.x: the config says)
        folded = projector.layer_norm(folded)
    return projector.linear_2(projector.act(projector.linear_1(folded)))
