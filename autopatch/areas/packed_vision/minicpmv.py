"""MiniCPM-V 4.7 (transformers 5.23): a NaViT-style SigLIP tower packing every image's patches into one strip
(``pixel_values [1, channels, patch, patches x patch]``, ``target_sizes [images, 2]`` their (rows, columns) in
patches), whose own code reads those sizes image by image in Python:

- ``vision_utils.get_vision_nearest_position_ids`` (bound by the module) loops over ``target_sizes.tolist()`` to
  bucket each image's rows and columns onto the learned position grid;
- the vision attention splits q/k/v per image with ``lengths.tolist()`` and attends chunk by chunk;
- the merger cuts each image's patches out of the strip in a loop over the images and folds its ``2 x 2`` blocks;
- ``get_rope_index`` walks each sample's tokens in Python (``.tolist()``) to lay the images out on its canvas.

The replacements compute the same values for every patch or token at once: the number of images, their sizes,
the batch and the text length stay symbolic.
"""

from __future__ import annotations

import torch

from ...kit import calls_original
from .packed import _CHUNKS, _PER_CHUNK, _latest, _locate


def nearest_position_ids(target_sizes, num_patches_per_side, kwargs=None):
    """``transformers.vision_utils.get_vision_nearest_position_ids`` (5.23) without the loop over the images: patch
    ``p`` of an image of ``(h, w)`` patches is row ``p // w``, column ``p % w``; its row's fraction ``row / h``
    (upstream's ``arange(h) / h``: the same float division in the default dtype) is bucketed onto the
    ``side``-cell grid by the same boundaries, its column's likewise, and the flat index is
    ``bucket_row * side + bucket_column``."""
    if kwargs is not None and (given := kwargs.pop("position_ids", None)) is not None:
        return given
    device = target_sizes.device
    boundaries = torch.arange(1 / num_patches_per_side, 1.0, 1 / num_patches_per_side, device=device)
    heights, widths = target_sizes[:, 0].long(), target_sizes[:, 1].long()
    image, within = _locate(heights * widths)
    width = widths[image]
    dtype = torch.get_default_dtype()
    row = within.div(width, rounding_mode="floor").to(dtype) / heights[image].to(dtype)
    column = (within % width).to(dtype) / width.to(dtype)
    # bucketize is searchsorted with its arguments swapped (the agent translates searchsorted to ONNX)
    bucket_row = torch.searchsorted(boundaries, row, right=True)
    bucket_column = torch.searchsorted(boundaries, column, right=True)
    return bucket_row * num_patches_per_side + bucket_column


def attention_one_call(attention_forward):
    """A rewriter for ``MiniCPMV4_7VisionAttention.forward`` (5.23): its non-flash path splits q/k/v per image with
    ``lengths.tolist()`` and attends chunk by chunk (no mask: upstream passes None to every chunk). Rewritten from
    the source: one chunk, the whole sequence, with the block-diagonal mask built from ``cu_seqlens`` (an image
    attends to itself only, as its chunk did). The flash path, which takes ``cu_seqlens`` itself, is unchanged."""
    from ...kit import substitute_expressions

    return substitute_expressions(attention_forward, {
        "lengths = cu_seqlens[1:] - cu_seqlens[:-1]": "pass",
        _CHUNKS: "splits = [(query_states,), (key_states,), (value_states,)]",
        _PER_CHUNK.format(mask="None"): _PER_CHUNK.format(mask="__autopatch_rt.block_diagonal_mask(cu_seqlens, q)"),
    })


def _blocks(heights, widths, merge_h: int, merge_w: int):
    """For images laid out one after another in raster order (``heights[i] x widths[i]`` items each): for every
    ``merge_h x merge_w`` block (images after one another, blocks in raster order of the merged grid) the indices
    of its items, ``[blocks, merge_h * merge_w]``, row-major inside the block (upstream's view and permute)."""
    image, block = _locate((heights // merge_h) * (widths // merge_w))
    width = widths[image]
    across = width // merge_w
    first = (heights * widths).cumsum(0) - heights * widths
    top = first[image] + (block // across) * merge_h * width + (block % across) * merge_w
    rows = torch.arange(merge_h, device=heights.device)[:, None] * width[:, None, None]  # [blocks, merge_h, 1]
    offset = rows + torch.arange(merge_w, device=heights.device)
    return (top[:, None, None] + offset).flatten(1)


def merger_packed(self, hidden_states, target_sizes):
    """``MiniCPMV4_7Merger.forward`` (5.23) without the loop over the images: upstream cuts image after image
    ``h x w`` patches out of the packed sequence (starting where the previous image's ``h * w`` ended), folds each
    ``merge_h x merge_w`` block into one token (its patches' features concatenated, row-major) and runs the first
    MLP, then again on the merged grid for each further round. Here every block gathers its patches at once,
    round after round; the result is one element, every image's tokens in upstream's order (its only caller
    concatenates the list). A grid the kernel does not divide raises in upstream's view; here a runtime check."""
    merge_h, merge_w = self.merge_kernel_size
    heights = target_sizes[:, 0].to(device=hidden_states.device, dtype=torch.long)
    widths = target_sizes[:, 1].to(device=hidden_states.device, dtype=torch.long)
    features = hidden_states[0]
    for i in range(self.merger_times):
        torch._check_tensor_all((heights % merge_h == 0) & (widths % merge_w == 0))
        index = _blocks(heights, widths, merge_h, merge_w)
        features = self.mlp[i](features[index].flatten(1))
        heights, widths = heights // merge_h, widths // merge_w
    return [features]


def _markers(config):
    """The ids ``_group_visual_frames`` extends a frame over (the config's, those it sets)."""
    names = ("slice_start_id", "slice_end_id", "image_start_id", "image_end_id", "newline_id")
    return [value for value in (getattr(config, name, None) for name in names) if value is not None]


@calls_original
def rope_index(original, self, input_ids, mm_token_type_ids=None, target_sizes=None, target_sizes_videos=None,
               downsample_mode=None, attention_mask=None, **kwargs):
    """``MiniCPMV4_7Model.get_rope_index`` (5.23) for every token at once, for images without slices.

    Upstream, per sample over the tokens the mask keeps: each run of image tokens is a crop, taking the next grid
    (in batch order); the frame it opens starts one token before it (``<image>``) and ends after the markers that
    follow it; frames only markers separate share a group. Text takes the running position (+1 a token); a frame
    takes it as its origin ``o`` and advances it by ``max(rows, columns) + 1`` of its grid in language-model tokens
    (patches // 4 in "16x", // 2 in "4x"): its first token gets ``(o, o - 1, o - 1)`` (0 at least), its crop's
    tokens ``(o, o + row, o + column)`` in raster order, the token right after the crop, when it is a marker,
    ``(o, o + rows, o + columns)``, its other markers ``(o, o, o)``; a later frame overwrites the first token.
    Dropped tokens get 0; the deltas are the sample's largest position + 1 - its kept tokens.

    Here each token finds its frame by the latest frame start at or before it (kept tokens moved first, in their
    order: the same neighbours as upstream's unpadded list) and the running position by a cumulative sum. Videos
    keep the original (whose export stops). Refused at run time, where upstream would lay them out: a crop
    ``<slice>`` opens (a frame of detail slices), a crop on a sample's first kept token, a crop whose length is not
    its grid's, more crops than grids, a video token."""
    if target_sizes is None or target_sizes_videos is not None or mm_token_type_ids is None:
        return original(self, input_ids, mm_token_type_ids=mm_token_type_ids, target_sizes=target_sizes,
                        target_sizes_videos=target_sizes_videos, downsample_mode=downsample_mode,
                        attention_mask=attention_mask, **kwargs)
    downsample_mode = downsample_mode or self.config.downsample_mode
    merge = 2 if downsample_mode == "4x" else 4
    device = input_ids.device
    batch, length = input_ids.shape
    kept = (torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None
            else attention_mask.to(device).bool())
    # Kept tokens first, in their order (upstream's list of the kept ones), then the dropped ones: each token's
    # place ``dest`` (a permutation, by cumulative counts: no sort, which torch.onnx cannot translate), and one
    # sentinel column after them all.
    count = kept.sum(1, keepdim=True)
    dest = torch.where(kept, kept.long().cumsum(1) - 1, count + (~kept).long().cumsum(1) - 1)
    column = torch.arange(length + 1, device=device).expand(batch, length + 1)
    inside = column < count
    ids = torch.cat([torch.zeros_like(input_ids).scatter(1, dest, input_ids), input_ids.new_full((batch, 1), -1)], 1)
    kinds = mm_token_type_ids.to(device=device, dtype=torch.long)
    kinds = torch.cat([torch.zeros_like(kinds).scatter(1, dest, kinds), ids.new_zeros(batch, 1)], 1)
    ids = torch.where(inside, ids, -1)
    kinds = torch.where(inside, kinds, 0)
    torch._check_tensor_all((kinds == 0) | (kinds == 1))  # a video token: upstream reads a video grid
    image = kinds == 1
    before = torch.cat([image.new_zeros(batch, 1), image[:, :-1]], 1)
    after = torch.cat([image[:, 1:], image.new_zeros(batch, 1)], 1)
    opens, closes = image & ~before, image & ~after
    torch._check_tensor_all(~opens[:, 0])  # a crop on the first kept token: no token before it for the frame
    markers = _markers(self.config)
    is_marker = torch.zeros_like(image)
    for marker in markers:
        is_marker = is_marker | (ids == marker)
    if self.config.slice_start_id is not None:
        previous = torch.cat([ids.new_full((batch, 1), -1), ids[:, :-1]], 1)
        later = opens & (opens.long().cumsum(1) > 1)  # a crop after the sample's first: a slice if <slice> opens it
        torch._check_tensor_all(~(later & (previous == self.config.slice_start_id)))
    # A frame's end: the first token at or after its crop's end that is not a marker (the sentinel column is not);
    # a running minimum from the right, as a cummax of the negated columns (the agent translates cummax to ONNX).
    stop = -torch.where(is_marker, -(length + 1), -column).flip(1).cummax(1).values.flip(1)
    # The crops in batch order: each image token's crop number, and per crop its start, end, frame end and grid.
    ordinal = (opens.flatten().cumsum(0).view(batch, length + 1) - 1).clamp(min=0)
    crops = batch * (length + 1)
    torch._check_tensor_all(opens.sum() <= target_sizes.shape[0])  # upstream: next() of the grids, exhausted
    slot = torch.where(opens, ordinal, crops)
    start = torch.zeros(crops + 1, dtype=torch.long, device=device).scatter(0, slot.flatten(), column.flatten())
    slot = torch.where(closes, ordinal, crops)
    end = torch.zeros(crops + 1, dtype=torch.long, device=device).scatter(0, slot.flatten(), column.flatten() + 1)
    frame_end = torch.zeros(crops + 1, dtype=torch.long, device=device).scatter(
        0, slot.flatten(), stop.gather(1, (column + 1).clamp(max=length)).flatten())
    grid = target_sizes.to(device=device, dtype=torch.long)[ordinal.clamp(max=target_sizes.shape[0] - 1)]
    rows, columns = grid[..., 0] // merge, grid[..., 1] // merge  # per token, its crop's (when an image token)
    torch._check_tensor_all(~closes | (column + 1 - start[ordinal] == rows * columns))  # upstream's assignment
    # Each token's frame: the latest frame start (a crop's start - 1) at or before it; inside it up to its end.
    first = torch.cat([opens[:, 1:], opens.new_zeros(batch, 1)], 1)  # the token before a crop
    first_ordinal = torch.cat([ordinal[:, 1:], ordinal.new_zeros(batch, 1)], 1)
    frame = _latest(first, torch.where(first, first_ordinal, 0))
    owned = (frame >= 0) & (column < frame_end[frame.clamp(min=0)]) & inside
    frame = frame.clamp(min=0)
    first_rows = torch.cat([rows[:, 1:], rows.new_zeros(batch, 1)], 1)
    first_columns = torch.cat([columns[:, 1:], columns.new_zeros(batch, 1)], 1)
    step = torch.where(first, torch.maximum(first_rows, first_columns) + 1, (inside & ~owned).long())
    running = step.cumsum(1) - step
    origin = _latest(first, running)
    crop_start, crop_end = start[frame], end[frame]
    frame_rows = torch.zeros(crops + 1, dtype=torch.long, device=device).scatter(
        0, torch.where(first, first_ordinal, crops).flatten(), first_rows.flatten())[frame]
    frame_columns = torch.zeros(crops + 1, dtype=torch.long, device=device).scatter(
        0, torch.where(first, first_ordinal, crops).flatten(), first_columns.flatten())[frame]
    offset = column - crop_start
    wide = frame_columns.clamp(min=1)
    in_crop = (column >= crop_start) & (column < crop_end)
    height = torch.where(first, (origin - 1).clamp(min=0), origin)
    height = torch.where(in_crop, origin + offset.div(wide, rounding_mode="floor"), height)
    width = torch.where(in_crop, origin + offset % wide, height)
    corner = column == crop_end
    height = torch.where(corner, origin + frame_rows, height)
    width = torch.where(corner, origin + frame_columns, width)
    compact = torch.stack([origin, height, width])
    compact = torch.where(owned[None], compact, running[None])
    compact = torch.where(inside[None], compact, 0)[:, :, :length]
    position_ids = compact.gather(2, dest[None].expand(3, -1, -1))  # back in place; dropped tokens 0
    rope_deltas = position_ids.amax(dim=(0, 2)).unsqueeze(1) + 1 - count
    return position_ids, rope_deltas.long()


def window_rows_stated(forward):
    """``MiniCPMV4_7ViTWindowAttentionMerger.forward`` (5.23): it reorders the patches with
    ``hidden_states[:, window_index, :]``, and the index's length is read from the grid (data), so the attention
    after it stops on that size. The windows list every patch once, so the index is as long as the patches: stated
    (``runtime.same_first_size``; another length at run time is refused), and copied into an index of the
    patches' own length (the check alone leaves later sizes in terms of the index's, which the attention cannot
    compare)."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        "window_index = window_index.to(device)":
        "window_index = __autopatch_rt.same_first_size(window_index.to(device), hidden_states[0])\n"
        "window_index = window_index.new_empty(hidden_states.shape[1]).copy_(window_index)",
    })
