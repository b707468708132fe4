"""HunYuan-VL (transformers 5.23): a vision tower of its own, packed the Qwen2-VL way (every image's patches in one
sequence, ``image_grid_thw [images, 3]`` their grids), whose own code reads that grid image by image in Python:

- the patch embeddings resample the learned position grid with ``F.interpolate`` in a loop over the grid's rows;
- the tower splits its output per image with ``.tolist()`` sizes and hands each image's ``(h, w)`` to the patch
  merger in a loop; the merger convolves each image's patches, appends a newline token to every row of merged
  tokens and puts a begin and an end token around them;
- ``get_placeholder_mask`` compares a data-dependent size with the features' in a Python ``if``;
- ``get_rope_index`` groups each sample's tokens with ``itertools.groupby`` over ``.tolist()`` and walks the
  image spans in Python.

(The vision attention's per-image chunks and the per-image feature split are rewritten in ``packed.py``, with
the other models' sources.) The replacements below compute the same values for every patch or token at once, with
``packed.py``'s helpers: the number of images, their sizes, the batch and the text length stay symbolic.
"""

from __future__ import annotations

import sys

import torch

from ... import kit
from ...kit import calls_original
from .packed import _firsts, _latest, _locate, packed_interpolation_starts


def _rewritten_taps():
    """``vision_utils.get_vision_interpolation_indices_and_weights`` with ``packed_interpolation_starts``' exclusive
    sum (the original pads a tensor one shorter than the number of images, which fixes that number)."""
    from transformers import vision_utils

    return packed_interpolation_starts(vision_utils.get_vision_interpolation_indices_and_weights)


#: The rewritten taps, built before Dynamo traces (strict=True cannot enter the rewrite's reading of the source).
_interpolation_taps = kit.built_before_export("transformers.models.hunyuan_vl.modeling_hunyuan_vl", _rewritten_taps)


def patch_embed_packed(self, pixel_values, grid_thw):
    """``HunYuanVLVisionPatchEmbed.forward`` (5.23) without the loop over the images: upstream resamples the learned
    ``edge x edge`` position grid (its row 0 is a class slot, unused) to each image's ``(h, w)`` with
    ``F.interpolate`` (``config.interpolate_mode``, ``align_corners=False``, in float), repeated over the frames, in
    raster order. Here vision_utils' taps and weights of that interpolation for every patch at once (raster order:
    merge size 1), summed in float and cast to the embeddings' dtype as upstream. The same values up to float
    rounding: the sample points are computed in another order than F.interpolate's (float32 steps of 7.6e-6 on a
    128-cell grid) and the taps summed in another (1e-6 at most, measured on the tiny tower)."""
    num_patches, _ = pixel_values.shape
    target_dtype = self.patch_embedding.weight.dtype
    pixel_values = pixel_values.reshape(num_patches, self.config.num_channels, self.patch_size, self.patch_size)
    embeddings = self.patch_embedding(pixel_values.to(dtype=target_dtype)).flatten(-2).squeeze(-1)
    if not isinstance(grid_thw, torch.Tensor):
        grid_thw = torch.tensor(grid_thw, device=embeddings.device)
    indices, weights = _interpolation_taps()(grid_thw, self.position_edge, mode=self.config.interpolate_mode,
                                             align_corners=False)
    table = self.position_embedding.weight[1:].float()
    position = (table[indices] * weights[..., None].to(table.dtype)).sum(1).to(embeddings.dtype)
    torch._check(position.shape[0] == embeddings.shape[0])  # both count the patches (upstream adds them)
    return (embeddings + position).unsqueeze(0)


def tower_merger_grid_tensor(tower_forward):
    """A rewriter for ``HunYuanVLVisionTransformer.forward`` (5.23): it splits the layers' output per image with
    ``grid_thw.prod(-1).tolist()`` sizes and merges each image in a loop over ``grid_thw.tolist()``, which fixes the
    number of images and their sizes. Rewritten from the source: the merger gets every image's patches and the
    grid tensor (``merger_packed`` merges them all at once, in the same order the loop concatenated them)."""
    from ...kit import substitute_expressions

    return substitute_expressions(tower_forward, {
        "split_sizes = grid_thw.prod(dim=-1).tolist()": "pass",
        "split_items = torch.split(hidden_states, split_sizes, dim=1)": "pass",
        "processed_items = []": "pass",
        "for grid, item in zip(grid_thw.tolist(), split_items):\n"
        "    _, h, w = grid\n"
        "    processed_items.append(self.patch_merger(item, size=(h, w)))": "pass",
        "image_features = torch.cat(processed_items, dim=1)":
        "image_features = self.patch_merger(hidden_states, size=grid_thw)",
    })


@calls_original
def merger_packed(original, self, hidden_states, size):
    """``HunYuanVLVisionPatchMerger.forward`` (5.23) for every image at once, when ``size`` is the grid tensor
    ``[images, 3]`` (``tower_merger_grid_tensor``; upstream's ``(h, w)`` of one image takes the original).

    Upstream, per image (its patches in raster order): the ``m x m`` stride-``m`` convolution, the activation and
    the 1x1 convolution; a newline embedding after every row of merged tokens; the MLP; a begin and an end token
    around them; the final norm. Here every merged token gathers the ``m x m`` patches its convolution reads (the
    convolution is a linear map of them, channels then rows then columns, as the kernel's layout), and every output
    token learns from its index whether it is a begin, a merged token, a newline or an end. The norms, the 1x1
    convolution and the MLP act per token, so all images at once change nothing."""
    if not isinstance(size, torch.Tensor):
        return original(self, hidden_states, size)
    m = self.spatial_merge_size
    frames, rows, columns = size[:, 0], size[:, 1], size[:, 2]
    torch._check_tensor_all(frames == 1)  # upstream reshapes each image's patches to one (h, w) frame
    torch._check_tensor_all((rows > 1) & (columns > 1))  # upstream's own checks
    x = self.before_rms(hidden_states)[0]  # [patches, channels]
    dtype = x.dtype
    down, across = rows // m, columns // m  # merged tokens per column and per row (the convolution floors)
    image, merged = _locate(down * across)  # per merged token: its image, its index there (row-major)
    width = columns[image]
    row, column = merged // across[image], merged % across[image]
    d = torch.arange(m, device=x.device)
    first = _firsts(rows * columns, image)[:, None, None]  # the image's first patch
    index = (first + (row[:, None, None] * m + d[:, None]) * width[:, None, None]
             + column[:, None, None] * m + d)  # [merged, m (kernel row), m (kernel column)]
    blocks = x[index.reshape(-1)].reshape(index.shape[0], m, m, x.shape[-1]).permute(0, 3, 1, 2).flatten(1)
    conv = self.proj_conv
    y = self.proj_act(torch.nn.functional.linear(blocks, conv.weight.flatten(1), conv.bias))
    y = torch.nn.functional.linear(y, self.proj_out.weight.flatten(1), self.proj_out.bias)
    # Per image: begin, `down` rows of (`across` merged tokens, newline), end.
    lengths = down * (across + 1) + 2
    image, k = _locate(lengths)
    grid_index = (k - 1).clamp(min=0)  # the begin token reads any place: replaced below
    line, place = grid_index // (across[image] + 1), grid_index % (across[image] + 1)
    newline = place == across[image]
    source = (_firsts(down * across, image) + line * across[image] + place.clamp(max=across[image] - 1)).clamp(min=0)
    source = torch.minimum(source, torch.full_like(source, y.shape[0] - 1))  # the end token of the last image
    out = self.mlp(torch.where(newline[:, None], self.image_newline.to(dtype)[None], y[source]))
    out = torch.where((k == 0)[:, None], self.image_begin.to(dtype)[None], out)
    out = torch.where((k == lengths[image] - 1)[:, None], self.image_end.to(dtype)[None], out)
    return self.after_rms(out[None])


def placeholder_check(get_placeholder_mask):
    """A rewriter for ``HunYuanVLModel.get_placeholder_mask`` (5.23): it compares ``inputs_embeds[mask].numel()``
    (a data-dependent size) with the features' in a Python ``if`` and raises (guard ``Ne(u0, ...)``). Rewritten
    from the source: the same condition on the token count as ``torch._check_tensor_all``, a runtime assertion
    in the program (its message a constant: a formatted count would fix it under strict export)."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_placeholder_mask, {
        "if image_features is not None and inputs_embeds[special_image_mask].numel() != image_features.numel():\n"
        "    raise ValueError(f'Image features and image tokens do not match: tokens: {n_image_tokens}, "
        "features {image_features.shape[0]}')":
        "if image_features is not None:\n"
        "    torch._check_tensor_all(n_image_tokens * inputs_embeds.shape[-1] == image_features.numel(), "
        "lambda: 'Image features and image tokens do not match')",
    })


def rope_index(self, input_ids, mm_token_type_ids, image_grid_thw=None, attention_mask=None, **kwargs):
    """``HunYuanVLModel.get_rope_index`` (5.23) for every token at once.

    Upstream, per sample over the tokens the mask keeps: every axis holds the token's rank among them; each run of
    image tokens (kind 1) takes the next grid (in batch order) and, on its ``down x (across + 1)`` grid tokens (the
    run itself, or the run without its first and last token when it is two longer: the begin and end tokens), the
    last three axes become (column, row, the image's ordinal). Tokens the mask drops get 0; the deltas are the
    sample's largest position + 1 - its kept tokens. A run of another length, or as many runs as grids not, raise
    there and fail a runtime check here."""
    rope_parameters = self.config.text_config.rope_parameters or {}
    axes = len(rope_parameters.get("mrope_section", []))
    if axes < 3:
        raise ValueError(f"HunYuanVL expects at least 3 multimodal RoPE axes, got {axes}.")
    merge = self.config.vision_config.spatial_merge_size
    batch, length = input_ids.shape
    device = input_ids.device
    kinds = mm_token_type_ids.to(device=device, dtype=torch.long)
    kept = torch.ones_like(kinds, dtype=torch.bool) if attention_mask is None else attention_mask.to(device).bool()
    rank = kept.long().cumsum(1) - 1
    position_ids = torch.where(kept, rank, 0)[None].expand(axes, batch, length).clone()
    if image_grid_thw is not None:
        column = torch.arange(length, device=device).expand(batch, length)
        image = kept & (kinds == 1)
        # A kept image token opens a run when the previous kept token (if any) is not an image token.
        previous = torch.where(column == 0, -1, _latest(kept, column).roll(1, dims=1))
        opens = image & ((previous < 0) | (kinds.gather(1, previous.clamp(min=0)) != 1))
        ordinal = (opens.flatten().cumsum(0).view(batch, length) - 1).clamp(min=0)  # the run's, in batch order
        torch._check_tensor_all(opens.sum() == image_grid_thw.shape[0])  # upstream: as many runs as grids
        span = torch.zeros(batch * length, dtype=torch.long, device=device).scatter_add(
            0, torch.where(image, ordinal, 0).flatten(), image.long().flatten())[ordinal]  # the run's length
        grid = image_grid_thw.to(device=device, dtype=torch.long)
        down, across = grid[:, 1] // merge, grid[:, 2] // merge
        of_run = ordinal.clamp(max=grid.shape[0] - 1)
        tokens, width = (down * (across + 1))[of_run], (across + 1)[of_run]
        framed = span == tokens + 2
        torch._check_tensor_all(~image | framed | (span == tokens))  # upstream: either length, else it raises
        offset = rank - _latest(opens, rank) - framed.long()  # the token's index in its grid
        on_grid = image & (offset >= 0) & (offset < tokens)
        grid_ids = torch.stack([offset % width, offset // width, ordinal])
        position_ids[axes - 3:] = torch.where(on_grid[None], grid_ids, position_ids[axes - 3:])
    position_ids = position_ids.to(input_ids.dtype)
    largest = position_ids.masked_fill(~kept[None], 0).amax(dim=(0, 2))
    deltas = (largest + 1 - kept.sum(dim=1)).unsqueeze(1)
    return position_ids, deltas
