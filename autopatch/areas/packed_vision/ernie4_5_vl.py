"""ERNIE 4.5 VL MoE (transformers 5.23): Qwen2-VL's packed tower (its attention source, vision_utils' positions),
then a resampler of its own that merges 2 x 2 blocks of patches into a token and pairs each frame with the next
(``_temporal_slicing``). That pairing lists every image's token offsets in a Python loop over the grid's rows
(``range(0, temporal_size, 2)`` over a tensor's value): the number of images is fixed and its frame counts read.

The replacement below lists the same offsets for every output token at once, with ``packed.py``'s helpers. (The
attention, the per-image feature split and the rope index are ``packed.py``'s rewrites, as for Qwen2-VL.)
"""

from __future__ import annotations

import torch

from .packed import _locate


def temporal_pairs(self, hidden_states, grid_thw):
    """``Ernie4_5_VLMoeVariableResolutionResamplerModel._temporal_slicing`` without the loop over images.

    Upstream, per image or video of ``t`` frames of ``s`` merged tokens (``s = h * w / merge**2``): the frame pairs
    (0, 1), (2, 3), ... (``t // 2`` of them, an odd last frame left out), or (0, 0) for a one-frame image; each
    pair's two frames are put side by side, token by token. So an output token is (image, pair, place in frame),
    and its two inputs are the image's offset plus frame ``2 * pair`` (and that plus one when ``t > 1``) times
    ``s``, plus the place. The output count is data (one per input token for images).
    """
    merge = self.spatial_merge_size
    grid = grid_thw.to(device=hidden_states.device, dtype=torch.long)
    frames = grid[:, 0]
    frame_size = grid[:, 1] * grid[:, 2] // (merge * merge)
    pairs = torch.where(frames > 1, frames // 2, torch.ones_like(frames))
    image, in_image = _locate(pairs * frame_size)
    place = in_image % frame_size[image]
    first_frame = 2 * (in_image // frame_size[image])
    offset = (frames * frame_size).cumsum(0) - frames * frame_size
    first = offset[image] + first_frame * frame_size[image] + place
    second = first + (frames[image] > 1).long() * frame_size[image]
    return torch.cat([hidden_states.index_select(0, first), hidden_states.index_select(0, second)], dim=-1)
