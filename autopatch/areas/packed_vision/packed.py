"""Vision-language models that pack every image's patches into one sequence (Qwen2-VL's design; transformers 5.23,
and Qwen2-VL's 4.57 sources, whose pieces are named ``*_4x``).

Such a model gets ``pixel_values [patches, dim]`` for all images at once and ``image_grid_thw [images, 3]``, the
(frames, rows, columns) of each image. Upstream derives everything else from the *values* of that grid, in Python:

- ``get_vision_position_ids`` loops over ``grid_thw.tolist()`` to lay out each image's (row, column) rotary
  positions: export fixes the number of images (and reads their sizes).
- the vision attention splits q/k/v per frame with ``lengths.tolist()`` and attends chunk by chunk: a
  data-dependent number of chunks (guard ``Eq(u0, 0)``).
- ``get_image_features`` splits the merged features per image with ``.tolist()``; its only caller concatenates
  them again at once.
- (Qwen2.5-VL) the attention windows are listed by a loop over ``grid_thw.tolist()``.
- (Qwen3-VL) the resampling of the learned position grid pads a tensor one shorter than the number of images.
- (4.57 GLM-4V) the tower hands its position embeddings each frame's length with ``.tolist()``, and they repeat
  each frame's target size in a loop over them.
- ``get_rope_index`` groups each sample's tokens with ``itertools.groupby`` over ``.tolist()`` and walks the
  groups in Python to build 3-axis (time, row, column) positions for the language model.
- (Muse Spark, Muse Glimmer) the merge blocks' gather index is built image by image, and the tower reorders its
  patches by the window index, whose length is data; (Kimi-K2.5) the temporal table's per-patch index and the
  patches each merged token pools are built image by image; (PaddleOCR-VL, Video-LLaMA-3) the tower's output is
  split per image with ``.tolist()`` sizes and each image's blocks merged in a loop; (LFM3-VL) the tower hands its
  depthwise convolutions ``grid_thw.tolist()``, and they raster each frame to its grid in a loop; (HunYuan-VL) its
  own tower's loops, in ``hunyuan_vl.py``.

The replacements compute the same values with tensor arithmetic over every patch or token at once, so the number of
images, their sizes, the batch and the sequence stay symbolic. Patch-wise: a patch finds its image by
``searchsorted`` over the cumulative patch counts. The chunked attention becomes one attention call with a
block-diagonal mask (a frame attends to itself only, as the chunks did). Token-wise: each token learns from
cumulative sums where its group starts and how far the position has advanced before it.

Route and rewrite patches: eager code keeps the originals.
"""

from __future__ import annotations

import torch

from ...kit import calls_original


def _total(ends) -> int:
    """The last of cumulative counts (0 for none), as a size: unbacked under export, since it is data."""
    total = ends[-1].item() if ends.shape[0] else 0
    torch._check(total >= 0)
    return total


def _firsts(counts, group):
    """For items laid out group after group (``counts[g]`` items in group g): the index of the first item of each
    entry of ``group`` (an exclusive cumulative sum, gathered)."""
    return (counts.cumsum(0) - counts)[group]


def _locate(counts):
    """For items laid out group after group (``counts[g]`` items in group g): each item's group and its index in
    that group, by ``searchsorted`` over the cumulative counts (no loop over the groups)."""
    ends = counts.cumsum(0)
    item = torch.arange(_total(ends), device=counts.device)
    group = torch.searchsorted(ends, item, right=True)
    return group, item - (ends - counts)[group]


def _patch_layout(grid_thw, spatial_merge_size):
    """Every patch's image, frame, row and column (in patches), for patches laid out image after image, frame
    after frame and, inside a frame, block-major over ``merge x merge`` blocks (block row, block column, row in
    block, column in block): decoding a patch's index within its frame in that order gives its (row, column)."""
    frames, rows, columns = grid_thw[:, 0], grid_thw[:, 1], grid_thw[:, 2]
    if isinstance(spatial_merge_size, int):
        merge = torch.full_like(rows, spatial_merge_size)
    else:
        merge = spatial_merge_size.to(device=rows.device, dtype=rows.dtype)
    frame_size = rows * columns
    # The patch count is the grid's data: an unbacked size under export, which the attention rewrite below
    # equates with the hidden states' length (the upstream code implies it: it adds one to the other).
    image, in_image = _locate(frames * frame_size)
    in_frame = in_image % frame_size[image]
    m = merge[image]
    blocks_per_row = columns[image] // m
    row = (in_frame // (m * m * blocks_per_row)) * m + (in_frame // m) % m
    column = ((in_frame // (m * m)) % blocks_per_row) * m + in_frame % m
    return image, in_image // frame_size[image], row, column


def packed_position_ids(grid_thw, spatial_merge_size, include_temporal=False, kwargs=None):
    """``transformers.vision_utils.get_vision_position_ids`` (5.23) without the loop over images: the (row,
    column) of every patch (and its frame first, with ``include_temporal``) from ``_patch_layout``."""
    if kwargs is not None and (given := kwargs.pop("position_ids", None)) is not None:
        return given
    _, frame, row, column = _patch_layout(grid_thw, spatial_merge_size)
    return torch.stack([frame, row, column] if include_temporal else [row, column], dim=-1)


def packed_window_index(grid_thw, spatial_merge_size, window_size, patch_size, kwargs=None):
    """``transformers.vision_utils.get_vision_window_index`` (5.23, Qwen2.5-VL's windowed attention) without the
    loop over ``grid_thw.tolist()``.

    Upstream cuts each frame's merged-token grid into ``side x side`` windows (padding every side to the next
    multiple, a whole empty window where it divides) and lists the tokens window by window, row-major inside a
    window; the window bounds are the cumulative window sizes (times the patches per token), repeated bounds of
    empty windows removed. Here every token gets its window's global number and its place inside it, one sort
    orders them, and a scatter counts each window."""
    if kwargs is not None:
        given = kwargs.pop("window_index", None), kwargs.pop("cu_window_seqlens", None)
        if given[0] is not None and given[1] is not None:
            return given
    side = window_size // spatial_merge_size // patch_size
    frames = grid_thw[:, 0]
    rows, columns = grid_thw[:, 1] // spatial_merge_size, grid_thw[:, 2] // spatial_merge_size
    frame_size = rows * columns
    image, in_image = _locate(frames * frame_size)  # per merged token
    frame, in_frame = in_image // frame_size[image], in_image % frame_size[image]
    row, column = in_frame // columns[image], in_frame % columns[image]
    across, down = columns // side + 1, rows // side + 1  # windows per row and per column, the padding's
    windows = frames * down * across
    window_ends = windows.cumsum(0)
    window = ((window_ends - windows)[image] + frame * (down * across)[image] + (row // side) * across[image]
              + column // side)
    index = torch.argsort(window * side * side + (row % side) * side + column % side)
    sizes = torch.zeros(_total(window_ends), dtype=torch.long, device=grid_thw.device)
    sizes = sizes.scatter_add(0, window, torch.ones_like(window))
    bounds = torch.cat([sizes.new_zeros(1), sizes.cumsum(0) * spatial_merge_size**2]).to(torch.int32)
    return index, torch.unique_consecutive(bounds)


def packed_frame_index(grid_thw, kwargs=None):
    """``get_vision_frame_index`` of Kimi-K2.5 (5.23) without the loop over ``grid_thw.tolist()``: each patch's
    row of the temporal table, 0 for a single-frame clip (an image), its frame + 1 in a clip of several."""
    if kwargs is not None and (given := kwargs.pop("frame_index", None)) is not None:
        return given
    frames, frame_size = grid_thw[:, 0], grid_thw[:, 1] * grid_thw[:, 2]
    image, in_image = _locate(frames * frame_size)
    return in_image // frame_size[image] + (frames > 1).to(in_image.dtype)[image]


def packed_temporal_merge_index(grid_thw, kernel_height, kernel_width, kwargs=None):
    """``get_vision_temporal_merge_index`` of Kimi-K2.5 (5.23) without the loop over ``grid_thw.tolist()``: for
    every merged token (image after image, row-major) the ``[frames, kernel_height * kernel_width]`` patches it
    pools, as their indices in the packed sequence. Upstream concatenates the images' blocks along the tokens, so
    every clip has the same frame count (else it fails): read once from the data, the others checked equal."""
    if kwargs is not None and (given := kwargs.pop("temporal_merge_index", None)) is not None:
        return given
    frames, rows, columns = grid_thw[:, 0], grid_thw[:, 1], grid_thw[:, 2]
    clip = frames * rows * columns
    image, merged = _locate((rows // kernel_height) * (columns // kernel_width))
    width = columns[image]
    row, column = merged // (width // kernel_width), merged % (width // kernel_width)
    count = frames[0].item()
    torch._check(count >= 1)
    torch._check_tensor_all(frames == count)  # no message: a message callable stops strict export
    frame = torch.arange(count, device=grid_thw.device)[None, :, None]
    patch = torch.arange(kernel_height * kernel_width, device=grid_thw.device)[None, None, :]
    start = _firsts(clip, image)[:, None, None]
    return (start + frame * (rows * columns)[image][:, None, None]
            + (row[:, None, None] * kernel_height + patch // kernel_width) * width[:, None, None]
            + column[:, None, None] * kernel_width + patch % kernel_width)


def window_rows_stated(forward):
    """``MuseSparkVisionModel.forward`` and ``MuseGlimmerVisionModel.forward`` (5.23): they reorder the patches with
    ``hidden_states[window_index, :]``, and the index's length is read from the grid (data). Every patch is
    reordered, so the index is as long as the patches: stated (``runtime.same_first_size``), which keeps the
    hidden states' length the input's."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        "hidden_states[window_index, :]":
        "hidden_states[__autopatch_rt.same_first_size(window_index, hidden_states), :]",
    })


def packed_pixel_shuffle_index(grid_thw, merge_size, kwargs=None):
    """``get_vision_pixel_shuffle_index`` of Muse Spark and Muse Glimmer (5.23) without the loop over
    ``grid_thw.tolist()``: upstream lists, frame after frame, each ``merge x merge`` block's patches (blocks
    row-major, row-major inside a block) as their indices in the packed sequence. Here every patch computes the
    slot it lands in, and one scatter writes each patch's index to its slot: the same index."""
    if kwargs is not None and (given := kwargs.pop("pixel_shuffle_index", None)) is not None:
        return given
    frames, rows, columns = grid_thw[:, 0], grid_thw[:, 1], grid_thw[:, 2]
    frame_size = rows * columns
    image, in_image = _locate(frames * frame_size)
    patch = torch.arange(image.shape[0], device=grid_thw.device)
    size, width = frame_size[image], columns[image]
    row, column = (in_image % size) // width, (in_image % size) % width
    block = (row // merge_size) * (width // merge_size) + column // merge_size
    slot = (patch - in_image + (in_image // size) * size + block * merge_size * merge_size
            + (row % merge_size) * merge_size + column % merge_size)
    return torch.empty_like(patch).scatter(0, slot, patch)


def rot_pos_emb_4x(self, grid_thw):
    """``rot_pos_emb`` of 4.x Qwen2-VL-style vision towers (Qwen2-VL and Qwen2.5-VL share one source, Qwen3-VL's
    fills a preallocated table in its loop): a loop over the images for the positions, and a frequency table as
    long as the largest grid side (a length read from the data). The positions of ``packed_position_ids``, times
    the frequencies: each entry is the table's ``position * inv_freq``."""
    positions = packed_position_ids(grid_thw, self.spatial_merge_size)
    inv_freq = self.rotary_pos_emb.inv_freq
    return (positions.to(inv_freq.dtype)[..., None] * inv_freq).flatten(1)


def glm4v_rot_pos_emb_4x(self, grid_thw):
    """4.x ``Glm4vVisionModel.rot_pos_emb``: Qwen2-VL's loop and frequency table, returning the (row, column)
    positions too (the tower resamples its learned positions at them). ``rot_pos_emb_4x`` and the positions of
    ``packed_position_ids``, the same integers as upstream's."""
    return rot_pos_emb_4x(self, grid_thw), packed_position_ids(grid_thw, self.spatial_merge_size)


def glm4v_tower_lengths_4x(tower_forward):
    """A rewriter for 4.x ``Glm4vVisionModel.forward``: it hands its position embeddings each frame's patch count
    as ``.tolist()`` (the number of images fixed). Rewritten from the source: the tensor of those counts, which
    ``glm4v_position_embedding_4x`` reads as data; and the positions (counted from the grid: an unbacked size
    under export) stated as many as the patches, which upstream implies (the embeddings add one to the other)."""
    from ...kit import substitute_expressions

    return substitute_expressions(tower_forward, {
        "rotary_pos_emb, image_type_ids = self.rot_pos_emb(grid_thw)":
            "rotary_pos_emb, image_type_ids = self.rot_pos_emb(grid_thw)\n"
            "torch._check(image_type_ids.shape[0] == hidden_states.shape[0])",
        "seqlens = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()": "seqlens = cu_seqlens[1:] - cu_seqlens[:-1]",
    })


#: 4.x GLM-4V's per-patch target size, one frame after the other in a loop over the frames' patch counts.
_GLM_TARGETS = ("target_{axis} = torch.cat([image_shapes[i, {column}].repeat(lengths[i]) for i in range(len(lengths))])"
                ".to(device=device, dtype=torch.float32)")


def glm4v_position_embedding_4x(embeddings_forward):
    """A rewriter for 4.x ``Glm4vVisionEmbeddings.forward``: each patch's target size (the grid it resamples the
    learned positions to) is repeated frame by frame in a loop over the frames' lengths. Rewritten from the
    source: each patch finds its frame by ``searchsorted`` over the cumulative lengths and takes ``image_shapes``
    at that frame's index, as upstream does (its i-th frame reads the i-th row: one-frame images, as GLM-4V's
    processor makes them). A run-time check keeps upstream's refusal of lengths that do not add up to the
    patches (there, the addition of the embeddings fails)."""
    from ...kit import substitute_expressions

    frame = ("__autopatch_ends = lengths.cumsum(0)\n"
             "torch._check_tensor_all(lengths.sum() == total_seq, "
             "lambda: 'autopatch: the frames hold another number of patches than the embeddings')\n"
             "__autopatch_frame = torch.searchsorted(__autopatch_ends, torch.arange(total_seq, "
             "device=__autopatch_ends.device, dtype=__autopatch_ends.dtype), right=True)\n")
    return substitute_expressions(embeddings_forward, {
        _GLM_TARGETS.format(axis="h", column=1):
            frame + "target_h = image_shapes[__autopatch_frame, 1].to(device=device, dtype=torch.float32)",
        _GLM_TARGETS.format(axis="w", column=2):
            "target_w = image_shapes[__autopatch_frame, 2].to(device=device, dtype=torch.float32)",
    })


def qwen2_5_vl_window_index_4x(self, grid_thw):
    """4.x ``Qwen2_5_VisionTransformerPretrainedModel.get_window_index``: the windows listed by a loop over the
    images, their bounds as a Python list. ``packed_window_index``'s order and bounds (a tensor: the caller's
    ``torch.tensor`` and ``unique_consecutive`` keep it as it is)."""
    return packed_window_index(grid_thw, self.spatial_merge_size, self.window_size, self.patch_size)


def _linspace_at(index, steps, end: float):
    """``torch.linspace(0, end, steps)[index]`` for a tensor of ``steps``, the way torch computes it (float32:
    the first half counts up from 0, the second half down from ``end``; one step is ``[0]``)."""
    step = end / (steps - 1).clamp(min=1).to(torch.float32)
    value = torch.where(index < steps // 2, index * step, end - step * (steps - 1 - index))
    return torch.where(steps == 1, torch.zeros_like(value), value)


def qwen3_vl_position_grid_4x(self, grid_thw):
    """4.x ``Qwen3VLVisionModel.fast_pos_embed_interpolate``: resamples the learned ``side x side`` position grid
    to each image bilinearly (``linspace`` corners-aligned sample points), in a loop over the images that reads
    their sizes with ``.tolist()``. The same four taps and weights for every patch at once, from its image's
    size and its (row, column), summed in upstream's order; patches come out in the tower's block-major order."""
    side = self.num_grid_per_side
    image, _, row, column = _patch_layout(grid_thw, self.config.spatial_merge_size)
    taps, weights = [], []
    for index, size in ((row, grid_thw[image, 1]), (column, grid_thw[image, 2])):
        at = _linspace_at(index, size, float(side - 1))
        low = at.int()
        taps.append((low, (low + 1).clip(max=side - 1)))
        weights.append((1 - (at - low), at - low))
    embed = self.pos_embed
    total = None
    for h in (0, 1):
        for w in (0, 1):
            term = embed(taps[0][h] * side + taps[1][w]) * (weights[0][h] * weights[1][w]).to(embed.weight.dtype)[:, None]
            total = term if total is None else total + term
    return total


#: The chunked attention of the shared Qwen2-VL-style vision attention (one source, the fingerprint checks it).
_CHUNKS = (
    "splits = [torch.split(tensor, lengths.tolist(), dim=2) for tensor in (query_states, key_states, value_states)]"
)
_PER_CHUNK = (
    "attn_outputs = [attention_interface(self, q, k, v, attention_mask={mask}, scaling=self.scaling, "
    "dropout=0.0 if not self.training else self.attention_dropout, is_causal=False, **kwargs)[0] "
    "for q, k, v in zip(*splits)]"
)


def _one_chunk(attention_forward, per_chunk: str, mask: str = "None", length: str = "seq_length", check: str = ""):
    """``attention_forward`` with its per-frame chunks one chunk: the split becomes the whole q/k/v, the per-chunk
    call ``per_chunk`` (``{mask}`` where it passes ``mask``) gets the block-diagonal mask from ``cu_seqlens``, and
    the rotary table's length is stated equal to the sequence's ``length`` (both count the patches), before
    ``check``."""
    from ...kit import substitute_expressions

    return substitute_expressions(attention_forward, {
        "cos, sin = position_embeddings": f"cos, sin = position_embeddings\ntorch._check(cos.shape[0] == {length})"
        + (f"\n{check}" if check else ""),
        _CHUNKS: "splits = [(query_states,), (key_states,), (value_states,)]",
        per_chunk.format(mask=mask): per_chunk.format(mask="__autopatch_rt.block_diagonal_mask(cu_seqlens, q)"),
    })


def packed_attention_one_call(attention_forward):
    """A rewriter for the vision attention forward shared by Qwen2-VL-style towers (5.23): its non-flash path
    splits q/k/v per frame with ``lengths.tolist()`` and attends chunk by chunk. Rewritten from the source: one
    chunk (the whole sequence) with a block-diagonal mask built from ``cu_seqlens``, and the rotary table's
    length stated equal to the sequence (both count the patches). The flash path, which takes ``cu_seqlens``
    itself, is unchanged."""
    return _one_chunk(attention_forward, _PER_CHUNK)


#: The same per-chunk call in the loop form of that forward (PaddleOCR-VL's and Video-LLaMA-3's towers, one source),
#: which also collects each chunk's attention map.
_PER_CHUNK_LOOP = (
    "attn_output, attn_weight = attention_interface(self, q, k, v, attention_mask={mask}, scaling=self.scaling, "
    "dropout=0.0 if not self.training else self.attention_dropout, is_causal=False, **kwargs)"
)


def packed_attention_loop_one_call(attention_forward):
    """``packed_attention_one_call`` for the loop form of the vision attention forward (PaddleOCR-VL's tower,
    5.23), which also lists each chunk's attention map. The output is the same; the maps (eager attention only,
    read when a caller asks for attentions) come as one map of the whole sequence, zero between frames, where
    upstream lists one map per frame."""
    return _one_chunk(attention_forward, _PER_CHUNK_LOOP)


#: LFM3-VL's per-chunk call (the loop form, the caller's attention mask passed to every chunk, no dropout).
_PER_CHUNK_MASKED = (
    "attn_output, attn_weight = attention_interface(self, q, k, v, attention_mask={mask}, scaling=self.scaling, "
    "dropout=0.0, is_causal=False, **kwargs)"
)


def masked_attention_loop_one_call(attention_forward):
    """``packed_attention_loop_one_call`` for LFM3-VL's vision attention (5.23), whose chunks take the caller's
    ``attention_mask``. Its tower passes none; the rewrite checks so, since a mask would have to be combined with
    the block-diagonal one."""
    return _one_chunk(attention_forward, _PER_CHUNK_MASKED, mask="attention_mask", length="input_shape[0]",
                      check="torch._check(attention_mask is None)")


#: HunYuan-VL's per-chunk call: no mask argument (its tower's ``attention_mask=None`` comes through ``**kwargs``),
#: no dropout.
_PER_CHUNK_KWARGS = (
    "attn_outputs = [attention_interface(self, q, k, v, {mask}scaling=self.scaling, is_causal=False, **kwargs)[0] "
    "for q, k, v in zip(*splits)]"
)


def kwargs_mask_attention_one_call(attention_forward):
    """``packed_attention_one_call`` for HunYuan-VL's vision attention (5.23), which has no rotary table (its
    tower adds learned positions before the layers: no length to state) and whose per-chunk call takes the
    tower's ``attention_mask=None`` through ``**kwargs``. That entry is taken out, checked None (a mask would have
    to be combined with the block-diagonal one), where the chunk lengths were computed; the one call gets the
    block-diagonal mask."""
    from ...kit import substitute_expressions

    return substitute_expressions(attention_forward, {
        "lengths = cu_seqlens[1:] - cu_seqlens[:-1]": "torch._check(kwargs.pop('attention_mask', None) is None)",
        _CHUNKS: "splits = [(query_states,), (key_states,), (value_states,)]",
        _PER_CHUNK_KWARGS.format(mask=""): _PER_CHUNK_KWARGS.format(
            mask="attention_mask=__autopatch_rt.block_diagonal_mask(cu_seqlens, q), "),
    })


def lfm3_vl_tower_grid_tensor(tower_forward):
    """A rewriter for ``Lfm3VlVisionModel.forward`` (5.23): it reads ``grid_thw.tolist()`` once to hand its
    convolution layers each frame's size, which fixes the number of images and their sizes. Rewritten from the
    source: the layers get the grid tensor (``lfm3_vl_conv_packed`` reads it as data)."""
    from ...kit import substitute_expressions

    return substitute_expressions(tower_forward, {"grid_thw_list = grid_thw.tolist()": "grid_thw_list = grid_thw"})


def lfm3_vl_conv_packed(self, hidden_states, grid_thw, **kwargs):
    """``Lfm3VlVisionShortConv.forward`` (5.23) without the loop over images: upstream rasters each image's frames
    to their grid, convolves them depthwise (zero padding) and goes back to the patches' block-major order. Here
    every patch sums its ``k x k`` neighbours in the same frame, found by their place in the packed sequence, with
    the kernel's weights (the convolution's cross-correlation); a neighbour outside the frame counts zero, as the
    padding does. ``grid_thw`` is the tensor (``lfm3_vl_tower_grid_tensor``) or upstream's list."""
    if not isinstance(grid_thw, torch.Tensor):
        grid_thw = torch.tensor(grid_thw, device=hidden_states.device)
    input_gate, output_gate, conv_input = self.in_proj(hidden_states).chunk(3, dim=-1)
    gated = input_gate * conv_input
    merge, kernel = self.spatial_merge_size, self.spatial_conv.weight  # kernel: [channels, 1, k, k]
    side, pad = kernel.shape[-1], self.spatial_conv.padding[0]
    image, frame, row, column = _patch_layout(grid_thw, merge)
    rows, columns = grid_thw[image, 1], grid_thw[image, 2]
    frame_first = _firsts(grid_thw.prod(-1), image) + frame * rows * columns
    total = None
    for dy in range(side):
        for dx in range(side):
            r, c = row + dy - pad, column + dx - pad
            inside = (r >= 0) & (r < rows) & (c >= 0) & (c < columns)
            r, c = r.clamp(min=0) % rows, c.clamp(min=0) % columns  # any place in the frame: masked out below
            neighbour = frame_first + ((r // merge) * (columns // merge) + c // merge) * merge * merge + (
                r % merge) * merge + c % merge
            term = gated[neighbour] * inside[:, None].to(gated.dtype) * kernel[:, 0, dy, dx]
            total = term if total is None else total + term
    return self.out_proj(output_gate * total)


def paddleocr_projector_packed(self, image_features, image_grid_thw):
    """``PaddleOCRProjector.forward`` (5.23) without the loop over ``image_grid_thw.tolist()`` sizes: upstream
    normalizes each image's patches (laid out frame by frame, row-major), cuts them into ``m1 x m2`` blocks and
    projects each block's concatenated patches. Here every merged token gathers its block's patches from the packed
    sequence at once (the same order: block row, block column, then the patches row-major within the block); the
    norm and the projection act per row, so applying them to all images at once changes nothing."""
    m1, m2 = self.merge_kernel_size
    features = self.pre_norm(image_features)
    frames, rows, columns = image_grid_thw[:, 0], image_grid_thw[:, 1], image_grid_thw[:, 2]
    image, merged = _locate(frames * (rows // m1) * (columns // m2))
    blocks_per_row, width = columns[image] // m2, columns[image]
    blocks_per_frame = rows[image] // m1 * blocks_per_row
    frame, in_frame = merged // blocks_per_frame, merged % blocks_per_frame
    first = _firsts(frames * rows * columns, image) + frame * rows[image] * width  # the block's frame's first patch
    row = (in_frame // blocks_per_row)[:, None, None] * m1 + torch.arange(m1, device=features.device)[:, None]
    column = (in_frame % blocks_per_row)[:, None, None] * m2 + torch.arange(m2, device=features.device)
    index = first[:, None, None] + row * width[:, None, None] + column
    blocks = features[index.reshape(-1)].reshape(index.shape[0], m1 * m2 * features.shape[-1])
    return self.linear_2(self.act(self.linear_1(blocks)))


def video_llama_3_unshuffle_packed(self, hidden_states, grid_thw, merge_sizes):
    """``VideoLlama3VisionModel.pixel_unshuffle`` (5.23) without the loop over ``grid_thw.tolist()`` sizes: upstream
    lays each image's patches (block-major, as the tower ran them) back on their grid and shrinks every frame by the
    image's merge size with bilinear interpolation. At that exact factor m its sample point falls midway between a
    block's two middle rows and columns (on the middle one for odd m), so a merged token is the mean of those up to
    four patches, its block's ``(m - 1) // 2``-th and ``m // 2``-th; computed for every merged token at once, in
    the interpolation's order (columns first, then rows)."""
    frames, rows, columns = grid_thw[:, 0], grid_thw[:, 1], grid_thw[:, 2]
    merge = merge_sizes.to(grid_thw.dtype)
    image, merged = _locate(frames * (rows // merge) * (columns // merge))
    m = merge[image]
    first = _firsts(frames * rows * columns, image) + merged * m * m  # a merged token's block: m*m patches in a row
    low, high = (m - 1) // 2, m // 2
    top = 0.5 * hidden_states[first + low * m + low] + 0.5 * hidden_states[first + low * m + high]
    bottom = 0.5 * hidden_states[first + high * m + low] + 0.5 * hidden_states[first + high * m + high]
    return 0.5 * top + 0.5 * bottom


def video_llama_3_image_features(get_image_features):
    """``get_image_features`` of Video-LLaMA-3 (5.23) with its per-image split (``.tolist()`` sizes, each image's
    own merge size) one element holding every image's features: its caller concatenates them at once."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {
        "split_sizes = image_grid_thw.prod(dim=1) // (image_merge_sizes**2)": "pass",
        "torch.split(image_embeds, split_sizes.tolist())": "(image_embeds,)",
    })


#: The per-image feature counts, as Python ints (``tower``: the model's attribute holding its vision tower).
_SPLIT_SIZES = "split_sizes = (image_grid_thw.prod(-1) // self.{tower}.spatial_merge_size ** 2).tolist()"


def _features_one_element(get_image_features, features: str, tower: str = "visual", split_sizes: str = ""):
    """``get_image_features`` with its per-image ``torch.split(<features>, split_sizes)`` one element, and the
    statement computing ``split_sizes`` (Qwen2-VL's through ``self.<tower>`` unless given) removed."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {
        split_sizes or _SPLIT_SIZES.format(tower=tower): "pass",
        f"torch.split({features}, split_sizes)": f"({features},)",
    })


def packed_image_features(get_image_features):
    """A rewriter for ``get_image_features`` of Qwen2-VL-style models (5.23): the merged features are split per
    image with ``.tolist()`` sizes, which fixes the number of images; the caller's first act is
    ``torch.cat(pooler_output, dim=0)``. Rewritten from the source: one element holding every image's features,
    which concatenates to the same tensor."""
    return _features_one_element(get_image_features, "vision_outputs.pooler_output")


def packed_image_features_4x(get_image_features):
    """The same for 4.x ``Qwen2VLModel.get_image_features``, which returns the split tuple itself."""
    return _features_one_element(get_image_features, "image_embeds")


def hyperclovax_features_one_element(get_image_features):
    """The same for ``HyperCLOVAXVisionV2Model.get_image_features`` (5.13+), whose tower is ``self.vision_model``
    and whose split features are ``image_embeds``."""
    return _features_one_element(get_image_features, "image_embeds", tower="vision_model")


def adapted_image_features(get_image_features):
    """The same for ``get_image_features`` of Muse Spark and Muse Glimmer (5.23), which adapt, project and norm
    the tower's output before splitting it (``vision_features``) by the config's merge size."""
    return _features_one_element(get_image_features, "vision_features", split_sizes=(
        "split_sizes = (image_grid_thw.prod(-1) // self.config.vision_config.merge_size**2).tolist()"))


def paddleocr_image_features(get_image_features):
    """The same for PaddleOCR-VL's ``get_image_features`` (5.23), which projects the tower's output
    (``image_embeds``) and splits it by the vision config's merge size."""
    return _features_one_element(get_image_features, "image_embeds", split_sizes=(
        "split_sizes = (image_grid_thw.prod(-1) // self.config.vision_config.spatial_merge_size**2).tolist()"))


def lfm3_vl_image_features(get_image_features):
    """The same for LFM3-VL's ``get_image_features`` (5.23), which projects the tower's output
    (``image_features``) and splits it through ``self.vision_tower``."""
    return _features_one_element(get_image_features, "image_features", tower="vision_tower")


def ernie4_5_vl_image_features(get_image_features):
    """The same for ERNIE 4.5 VL's ``get_image_features`` (5.23), which resamples the tower's output
    (``image_embeds``) and splits it through ``self.vision_tower``."""
    return _features_one_element(get_image_features, "image_embeds", tower="vision_tower")


def projector_image_features(get_image_features):
    """The same for Cosmos3-Edge's ``get_image_features`` (5.23), which splits its projector's output
    (``image_embeds``) by the projector's merge size."""
    return _features_one_element(get_image_features, "image_embeds", split_sizes=(
        "split_sizes = (image_grid_thw.prod(-1) // self.projector.spatial_merge_size**2).tolist()"))


def dots3_note_image_features(get_image_features):
    """The same for dots.ocr 3's ``get_image_features`` (5.23), which splits the tower's output in place with the
    tensor's own ``split`` method, its sizes read through ``self.vision_tower``."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {
        _SPLIT_SIZES.format(tower="vision_tower"): "pass",
        "outputs.pooler_output.split(split_sizes)": "(outputs.pooler_output,)",
    })


def inkling2_image_features(get_image_features):
    """The same for Inkling 2's ``get_image_features`` (5.23), which splits the tower's merged output in place by
    each image's token count, with no ``split_sizes`` statement."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {
        "image_outputs.pooler_output.split(image_grid_thw.prod(-1).tolist())": "(image_outputs.pooler_output,)",
    })


def hunyuan_vl_image_features(get_image_features):
    """The same for HunYuan-VL's ``get_image_features`` (5.23), which splits the tower's merged output
    (``pooler_output[0]``) by each image's token count: its merged rows, each followed by a newline token, between
    a begin and an end token."""
    return _features_one_element(get_image_features, "image_outputs.pooler_output[0]", split_sizes=(
        "split_sizes = (merged_h * (merged_w + 1) + 2).tolist()"))


def kernel_merged_image_features(get_image_features):
    """The same for Kimi-K2.5's ``get_image_features`` (5.23), which projects the tower's merged output and splits
    it by the merge kernel's area (``image_embeds``)."""
    return _features_one_element(get_image_features, "image_embeds", split_sizes=(
        "split_sizes = (image_grid_thw.prod(-1) // merge_kernel_size).tolist()"))


def packed_deepstack_image_features(get_image_features, features: str = "image_embeds"):
    """The same for Qwen3-VL-style ``get_image_features`` (5.23), which also splits each deepstack layer's
    features per image (its caller concatenates those too)."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {
        _SPLIT_SIZES.format(tower="visual"): "pass",
        f"torch.split({features}, split_sizes)": f"({features},)",
        "torch.split(feat, split_sizes)": "(feat,)",
    })


def packed_deepstack_outputs_image_features(get_image_features):
    """The same for Qwen3-Omni-MoE's thinker, which splits the tower's output in place
    (``vision_outputs.pooler_output``)."""
    return packed_deepstack_image_features(get_image_features, "vision_outputs.pooler_output")


def packed_interpolation_starts(interpolation_indices_and_weights):
    """A rewriter for ``vision_utils.get_vision_interpolation_indices_and_weights`` (5.23): loop-free already,
    but each image's first patch is ``F.pad(counts.cumsum(0)[:-1], (1, 0))``, and padding a tensor one shorter
    than the number of images makes torch fix that number. ``cumsum - counts`` is the same exclusive sum."""
    from ...kit import substitute_expressions

    return substitute_expressions(interpolation_indices_and_weights, {
        "F.pad(counts.cumsum(0)[:-1], (1, 0))": "counts.cumsum(0) - counts",
    })


#: The messages of get_placeholder_mask's two checks, formatted before the check runs.
_FEATURE_MESSAGES = tuple(
    f'f"{kind.title()} features and {kind} tokens do not match, tokens: {{n_{kind}_tokens}}, features: '
    f'{{{kind}_features.shape[0]}}"'
    for kind in ("image", "video")
)


def packed_placeholder_check(get_placeholder_mask):
    """A rewriter for ``get_placeholder_mask`` of Qwen2-VL-style models (5.23), for strict export: the message
    of each ``torch_compilable_check`` is an f-string of the feature count, formatted before the call. Dynamo
    turns a symbolic size into text by fixing it (guard ``Eq(patches // 4, <traced>)``), so the program refuses
    every other image size, and the export does not say so. transformers discards the message while tracing;
    rewritten from the source, it is a lambda, formatted only if a check fails in eager code."""
    from ...kit import substitute_expressions

    lazy = {message: f"lambda: {message}" for message in _FEATURE_MESSAGES}
    return substitute_expressions(get_placeholder_mask, lazy)


def placeholder_check_4x(get_placeholder_mask):
    """A rewriter for 4.x ``Qwen2VLModel.get_placeholder_mask``: it compares ``inputs_embeds[mask].numel()`` (a
    data-dependent size) with the features' in a Python ``if`` and raises. Rewritten from the source: the same
    condition as ``torch._check_tensor_all`` on the token count, a runtime assertion in the program (as 5.x)."""
    from ...kit import substitute_expressions

    checks = {}
    for kind, noun in (("image", "Image"), ("video", "Videos")):
        mask, count, features = f"special_{kind}_mask", f"n_{kind}_tokens", f"{kind}_features"
        checks[
            f"if {features} is not None and inputs_embeds[{mask}].numel() != {features}.numel():\n"
            f"    raise ValueError(f'{noun} features and {kind} tokens do not match: tokens: {{{count}}}, "
            f"features {{{features}.shape[0]}}')"
        ] = (
            f"if {features} is not None:\n"
            f"    torch._check_tensor_all({count} * inputs_embeds.shape[-1] == {features}.numel(), "
            f"lambda: '{noun} features and {kind} tokens do not match')"
        )
    return substitute_expressions(get_placeholder_mask, checks)


#: dots.ocr 3's message of its one check (features of any modality against their placeholder tokens).
_MULTIMODAL_MESSAGE = ('f"Multimodal features and placeholder tokens do not match, tokens: {n_tokens}, features: '
                       '{features.shape[0]}"')


def multimodal_placeholder_check(get_placeholder_mask):
    """``packed_placeholder_check`` for dots.ocr 3's ``get_placeholder_mask`` (5.23), one check for every modality
    whose message is an f-string of the feature count: rewritten from the source, a lambda, the same check, its
    message formatted only if it fails in eager code."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_placeholder_mask, {_MULTIMODAL_MESSAGE: f"lambda: {_MULTIMODAL_MESSAGE}"})


def placeholder_count_check(get_placeholder_mask):
    """``multimodal_placeholder_check`` for Inkling 2's copy of dots.ocr 3's ``get_placeholder_mask`` (5.23), whose
    check also counts the placeholders' embedding values by selecting them (``inputs_embeds[special_mask].numel()``,
    a data-dependent size): equated with the features' size, which Inkling 2 reads from its input (one image token
    per block of pixels), torch's range check fails (``tgt_bound ... not a subset of src_bound``). Rewritten from
    the source: the same count, placeholder tokens times the width (the mask is expanded over it), and the message
    a lambda."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_placeholder_mask, {
        "inputs_embeds[special_mask].numel()": "n_tokens * inputs_embeds.shape[-1]",
        _MULTIMODAL_MESSAGE: f"lambda: {_MULTIMODAL_MESSAGE}",
    })


def _latest(flags, values):
    """Per position, ``values`` at the latest position at or before it (same row) where ``flags`` holds; -1 if none."""
    return torch.where(flags, values, torch.full_like(values, -1)).cummax(dim=1).values


def qwen2_vl_rope_index(self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None,
                        attention_mask=None, **kwargs):
    """``Qwen2VLModel.get_rope_index`` (5.x) for every token at once (``_rope_index``)."""
    return _rope_index(self, input_ids, mm_token_type_ids, image_grid_thw, video_grid_thw, attention_mask)


def qwen2_5_vl_rope_index(self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None,
                          second_per_grid_ts=None, attention_mask=None, **kwargs):
    """``Qwen2_5_VLModel.get_rope_index`` (5.23): Qwen2-VL's, with a video's frames spaced ``tokens_per_second *
    second_per_grid_ts[video]`` apart on the time axis (1 second per grid when not given), images' by 1."""
    seconds = second_per_grid_ts
    if video_grid_thw is not None and seconds is None:
        seconds = torch.ones(video_grid_thw.shape[0], device=input_ids.device, dtype=torch.long)
    interval = None if seconds is None else self.config.vision_config.tokens_per_second * seconds
    return _rope_index(self, input_ids, mm_token_type_ids, image_grid_thw, video_grid_thw, attention_mask,
                       intervals=(None, interval))


def ernie4_5_vl_rope_index(self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None,
                           attention_mask=None, **kwargs):
    """``Ernie4_5_VLMoeModel.get_rope_index`` (5.23): Qwen2-VL's, except that a video's frames are merged
    ``temporal_merge_size`` at a time (the resampler pairs them), so its grid has that many times fewer."""
    if video_grid_thw is not None:
        merge = self.config.vision_config.temporal_merge_size
        video_grid_thw = torch.cat([video_grid_thw[:, :1] // merge, video_grid_thw[:, 1:]], dim=1)
    return _rope_index(self, input_ids, mm_token_type_ids, image_grid_thw, video_grid_thw, attention_mask)


def qwen2_vl_rope_index_4x(self, input_ids=None, image_grid_thw=None, video_grid_thw=None, attention_mask=None):
    """``Qwen2VLModel.get_rope_index`` (4.x) for every token at once: the 4.x rules of ``_rope_index``, the kinds
    of tokens read from the image and video placeholder ids (each run follows a vision-start token, as the
    processor writes them)."""
    return _rope_index(self, input_ids, _kinds_4x(self.config, input_ids), image_grid_thw, video_grid_thw,
                       attention_mask, v4=True)


@calls_original
def qwen2_5_omni_rope_index(original, self, input_ids=None, image_grid_thw=None, video_grid_thw=None,
                            attention_mask=None, use_audio_in_video=False, audio_seqlens=None, second_per_grids=None):
    """Qwen2.5-Omni's thinker ``get_rope_index`` (5.23) for a prompt of text and images: Qwen2.5-VL's 4.x walk
    (vision-start tokens, each group advancing past its largest index, dropped tokens at 1), an image's frames
    ``position_id_per_seconds`` apart, and deltas over the tokens the mask keeps (upstream measures the masked
    row). Audio and video interleave by time chunks of their own: those prompts, and text alone (loop-free
    upstream already), take the original. Upstream fails on an audio-start token without audio lengths; so does
    the program (a run-time check), never a silent position."""
    if image_grid_thw is None or video_grid_thw is not None or audio_seqlens is not None or use_audio_in_video:
        return original(self, input_ids, image_grid_thw, video_grid_thw, attention_mask, use_audio_in_video,
                        audio_seqlens, second_per_grids)
    kept = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask == 1
    audio_start = (input_ids == self.config.audio_start_token_id) & kept
    torch._check_tensor_all(~audio_start.any(), lambda: "autopatch: an audio-start token without audio_seqlens "
                                                        "(upstream fails on it too)")
    # Upstream's time index is (arange(frames) * 1 * position_id_per_seconds).long(): an int or a float spacing.
    per_second = torch.full(image_grid_thw[:, :1].shape[:1], self.config.position_id_per_seconds,
                            device=input_ids.device)
    return _rope_index(self, input_ids, _kinds_4x(self.config, input_ids), image_grid_thw, None, attention_mask,
                       intervals=(per_second, None), v4=True, kept_deltas=True)


@calls_original
def qwen3_omni_rope_index(original, self, input_ids=None, image_grid_thw=None, video_grid_thw=None,
                          attention_mask=None, use_audio_in_video=False, audio_seqlens=None, second_per_grids=None):
    """Qwen3-Omni-MoE's thinker ``get_rope_index`` (5.23): Qwen2.5-Omni's positions for text and images, in
    float, with the tokens the mask drops at 0. Its time index is not truncated: with a whole
    ``position_id_per_seconds`` the truncation of ``_rope_index`` changes nothing; another spacing, prompts with
    audio or video, text alone, and no mask (upstream indexes it) take the original."""
    per_second = self.config.position_id_per_seconds
    if (image_grid_thw is None or video_grid_thw is not None or audio_seqlens is not None or use_audio_in_video
            or attention_mask is None or per_second != int(per_second)):
        return original(self, input_ids, image_grid_thw, video_grid_thw, attention_mask, use_audio_in_video,
                        audio_seqlens, second_per_grids)
    position_ids, deltas = qwen2_5_omni_rope_index(original, self, input_ids, image_grid_thw, None, attention_mask)
    kept = (attention_mask == 1).to(position_ids.device)
    return torch.where(kept, position_ids, 0).float(), deltas.float()


def _kinds_4x(config, input_ids):
    """4.x has no token-kind input: 1 for the image placeholder id, 2 for the video one, 0 for text.

    4.x counts a row's images and videos by the vision-start tokens followed by a placeholder, and gives the rest
    text positions. So a run of placeholders counts only after a vision-start token (as a processor writes
    them); a row whose runs all lack one is text throughout, as in eager. A row where some runs have one and
    others not, 4.x pairs the grids with the runs in an order of its own: the program refuses such a row."""
    kinds = (input_ids == config.image_token_id).long() + 2 * (input_ids == config.video_token_id).long()
    start_id = getattr(config, "vision_start_token_id", None)
    if start_id is None:
        return kinds
    vision = kinds > 0
    before = torch.nn.functional.pad(input_ids[:, :-1], (1, 0), value=-1)
    run_starts = vision & ~torch.nn.functional.pad(vision[:, :-1], (1, 0), value=False)
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    own_start = torch.cummax(torch.where(run_starts, positions, 0), dim=1).values  # where each token's run starts
    opened = torch.gather(before == start_id, 1, own_start) & vision
    mixed = opened.any(-1) & (vision & ~opened).any(-1)
    torch._check_tensor_all(~mixed,
                            lambda: "autopatch: some image/video placeholder runs follow a vision-start token and "
                                    "others do not; 4.x pairs them with the grids in an order of its own")
    return torch.where(opened, kinds, 0)


def qwen2_5_vl_rope_index_4x(self, input_ids=None, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                             attention_mask=None):
    """4.x ``Qwen2_5_VLModel.get_rope_index``: Qwen2-VL's 4.x rules, with the time axis spaced by
    ``second_per_grid_t * tokens_per_second``, where 4.x turns ``second_per_grid_t`` into an integer first (0.5 s
    counts as 0) and takes 0 for images (all of an image's frames share one time) and 1 for videos without
    ``second_per_grid_ts``."""
    per_second = self.config.vision_config.tokens_per_second
    intervals = [None, None]
    if image_grid_thw is not None:
        intervals[0] = torch.zeros_like(image_grid_thw[:, 0])
    if video_grid_thw is not None:
        seconds = (torch.ones_like(video_grid_thw[:, 0]) if second_per_grid_ts is None
                   else second_per_grid_ts.to(device=video_grid_thw.device, dtype=torch.long))
        intervals[1] = seconds * per_second
    return _rope_index(self, input_ids, _kinds_4x(self.config, input_ids), image_grid_thw, video_grid_thw,
                       attention_mask, intervals=tuple(intervals), v4=True)


def qwen3_vl_rope_index_4x(self, input_ids=None, image_grid_thw=None, video_grid_thw=None, attention_mask=None):
    """4.x ``Qwen3VLModel.get_rope_index``: Qwen2-VL's 4.x rules, with each video frame a group of its own (as
    5.x, ``_one_frame_grids``)."""
    return _rope_index(self, input_ids, _kinds_4x(self.config, input_ids), image_grid_thw,
                       _one_frame_grids(video_grid_thw), attention_mask, v4=True)


def glm4v_rope_index_4x(self, input_ids=None, image_grid_thw=None, video_grid_thw=None, attention_mask=None):
    """4.x ``Glm4vModel.get_rope_index``: Qwen3-VL's 4.x rules (each video frame a group of its own, dropped
    tokens at 1, deltas over the whole row), the kinds GLM's way: image placeholders are video frames between a
    video-start and a video-end token (the state its walk keeps over the tokens the mask keeps), images
    elsewhere; the video placeholder id and vision-start tokens play no part."""
    config = self.config
    kept = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask == 1
    kept = kept.to(input_ids.device)
    column = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    in_video = (_latest((input_ids == config.video_start_token_id) & kept, column)
                > _latest((input_ids == config.video_end_token_id) & kept, column))
    kinds = (input_ids == config.image_token_id).long() * (1 + in_video.long())
    return _rope_index(self, input_ids, kinds, image_grid_thw, _one_frame_grids(video_grid_thw),
                       kept.long() if attention_mask is not None else None, v4=True)


def _rope_index(self, input_ids, mm_token_type_ids, image_grid_thw, video_grid_thw, attention_mask,
                intervals=(None, None), v4=False, kept_deltas=False):
    """Qwen2-VL-style ``get_rope_index`` for every token at once. Returns the same ``position_ids
    [3, batch, seq]`` and ``mrope_position_deltas [batch, 1]``.

    Upstream, per sample and over the tokens the attention mask keeps: runs of one modality (0 text, 1 image,
    2 video) are groups; a text token takes the running position on all three axes and advances it by one; an
    image or video group takes the next grid of its kind (in order over the batch), places its tokens at the
    running position plus their (frame, row, column) in the merged grid, and advances the position by
    ``max(rows, columns) // merge``. Tokens the mask drops get 0. As upstream, one group is one image or video.
    ``intervals`` (images', videos'): per grid, the time-axis spacing of its frames (None: 1); the time index is
    ``int(frame * interval)``. 4.x (``v4``): a group advances the position past its largest index (the last
    frame's time, rows, columns); dropped tokens get 1; the deltas count every position of the row, dropped ones
    included (``kept_deltas``: the kept tokens only, as 5.x)."""
    merge = self.config.vision_config.spatial_merge_size
    batch, length = input_ids.shape
    device = input_ids.device
    kinds = mm_token_type_ids.to(device=device, dtype=torch.long)
    kept = torch.ones_like(kinds, dtype=torch.bool) if attention_mask is None else attention_mask.to(device).bool()
    column = torch.arange(length, device=device).expand(batch, length)
    # A kept token opens a group when no kept token precedes it or the previous kept one is of another kind.
    previous = torch.where(column == 0, -1, _latest(kept, column).roll(1, dims=1))
    opens = kept & ((previous < 0) | (kinds.gather(1, previous.clamp(min=0)) != kinds))
    grids = torch.zeros(batch, length, 3, dtype=torch.long, device=device)
    interval = None  # per token: the time-axis spacing of its frames (1 where no interval is given)
    for kind, grid_thw, kind_interval in ((1, image_grid_thw, intervals[0]), (2, video_grid_thw, intervals[1])):
        if grid_thw is None:
            continue
        # The grid each token's group takes: groups of this kind counted in batch-major order.
        ordinal = ((opens & (kinds == kind)).flatten().cumsum(0).view(batch, length) - 1).clamp(min=0)
        of_kind = grid_thw.to(device=device, dtype=torch.long)[ordinal]
        grids = torch.where((kept & (kinds == kind))[..., None], of_kind, grids)
        if kind_interval is not None:
            spacing = kind_interval.to(device)[ordinal]
            interval = torch.where(kinds == kind, spacing, torch.ones_like(spacing) if interval is None else interval)
    text, vision = kept & (kinds == 0), kept & (kinds != 0)
    rows, columns = (grids[..., 1] // merge).clamp(min=1), (grids[..., 2] // merge).clamp(min=1)
    group_advance = torch.maximum(grids[..., 1], grids[..., 2]) // merge
    if v4:  # past the last frame's time too
        last = grids[..., 0] - 1
        if interval is not None:
            last = (last * interval).long()
        group_advance = torch.maximum(group_advance, last + 1)
    advance = torch.where(text, 1, torch.where(opens & vision, group_advance, 0))
    before = advance.cumsum(dim=1) - advance  # the running position when the token is reached
    group_start = before - torch.where(opens, 0, group_advance)
    rank = kept.long().cumsum(dim=1) - 1
    offset = rank - _latest(opens, rank)  # index of the token inside its group
    frame = offset // (rows * columns)
    if interval is not None:  # as upstream: arange(frames) * interval, truncated
        frame = (frame * interval).long()
    vision_ids = group_start + torch.stack([frame, (offset // columns) % rows, offset % columns])
    dropped = 1 if v4 else 0
    position_ids = torch.where(vision, vision_ids, torch.where(text, before, dropped)).to(input_ids.dtype)
    # 4.x without any grid takes another branch upstream, whose maximum counts the dropped tokens' 1 too.
    text_only_4x = v4 and image_grid_thw is None and video_grid_thw is None
    largest = (position_ids if text_only_4x else position_ids.masked_fill(~kept, 0)).amax(dim=(0, 2))
    deltas = (largest + 1 - (length if v4 and not kept_deltas else kept.sum(dim=1))).unsqueeze(1)
    return position_ids, deltas


def qwen3_vl_rope_index(self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None,
                        attention_mask=None, **kwargs):
    """``Qwen3VLModel.get_rope_index`` (5.23): Qwen2-VL's, except that timestamps separate a video's frames in
    the text, so each frame is a group of its own: the video grids are split into one-frame grids first."""
    return _rope_index(self, input_ids, mm_token_type_ids, image_grid_thw, _one_frame_grids(video_grid_thw),
                       attention_mask)


def _one_frame_grids(video_grid_thw):
    """Qwen3-VL's videos as one grid per frame (timestamps in the text separate the frames)."""
    if video_grid_thw is None:
        return None
    frames = torch.repeat_interleave(video_grid_thw, video_grid_thw[:, 0], dim=0)
    return torch.cat([torch.ones_like(frames[:, :1]), frames[:, 1:]], dim=1)
