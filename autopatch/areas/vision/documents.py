"""Document models' image-text joins (UDOP), without per-sample Python lists.

UDOP adds to each OCR token the embedding of the image patch under its box centre, then appends to the text the
patches no token covers, sample by sample (a boolean selection per sample, padded back to the number of patches):
the count differs per sample, so upstream builds Python lists, which fix the batch and make the count a value
torch cannot trace ("The tensor has a non-zero number of elements, but its data is not allocated yet"). One
sort puts every sample's uncovered patches first, in patch order; the places past each sample's count
get the padding upstream appends (zeros). The same rows, in the same order.
"""

from __future__ import annotations

import torch


def udop_combine_embeddings(image_embeddings, inputs_embeds, bbox, visual_bbox, attention_mask=None,
                            num_patches=14, max_len=0, image_size=224, patch_size=16):
    """``combine_image_text_embeddings`` of UDOP (4.57 and 5.x), batched. The text side is upstream's: each
    token gets the patch embedding under its box centre (none for empty or full-page boxes)."""
    from transformers.models.udop import modeling_udop

    side = num_patches
    points_x = torch.clip(torch.floor((bbox[:, :, 0] + bbox[:, :, 2]) / 2.0 * side).long(), 0, side - 1)
    points_y = torch.clip(torch.floor((bbox[:, :, 1] + bbox[:, :, 3]) / 2.0 * side).long(), 0, side - 1) * side
    ocr_points = points_x + points_y
    bbox = bbox.to(torch.float32 if bbox.device.type == "mps" else torch.float64)
    target_seg = (bbox.mean(-1) == 0.0) | (bbox.mean(-1) == 1.0)
    repeated_vision_embeds = torch.gather(
        image_embeddings, 1, ocr_points.unsqueeze(-1).repeat(1, 1, image_embeddings.size(-1)))
    repeated_vision_embeds[target_seg] = 0.0
    inputs_embeds += repeated_vision_embeds

    uncovered = torch.ones_like(image_embeddings[:, :, 0], dtype=torch.bool).scatter(1, ocr_points, False)
    # uncovered patches first, each group in patch order: one sort of unique keys (a stable sort has no ONNX form)
    places = torch.arange(uncovered.shape[1], device=uncovered.device)
    order = torch.argsort((~uncovered).long() * uncovered.shape[1] + places, dim=1)
    kept = torch.gather(uncovered, 1, order)  # True for the first `count` places of each sample

    def compact(values):  # [B, P, ...] -> each sample's uncovered rows, then zeros
        index = order.reshape(*order.shape, *(1,) * (values.dim() - 2)).expand(*order.shape, *values.shape[2:])
        picked = torch.gather(values, 1, index)
        return torch.where(kept.reshape(*kept.shape, *(1,) * (values.dim() - 2)), picked, torch.zeros_like(picked))

    if visual_bbox is None:
        visual_bbox = modeling_udop.get_visual_bbox(image_size=image_size, patch_size=patch_size)
        visual_bbox = visual_bbox.unsqueeze(0).repeat(image_embeddings.size(0), 1, 1).to(image_embeddings.device)
    # upstream pads each sample to max_len (the number of patches when 0) and cuts it there
    width = image_embeddings.size(1) if max_len == 0 else max_len - inputs_embeds.size(1)
    vision_patches, visual_bbox = (_fit(compact(values), width) for values in (image_embeddings, visual_bbox))
    inputs_embeds = torch.cat([inputs_embeds, vision_patches], 1)
    bbox = torch.cat([bbox, visual_bbox], 1)
    if attention_mask is not None:
        attention_mask = torch.cat([attention_mask, _fit(kept.to(attention_mask.dtype), width)], 1)
    return inputs_embeds, bbox, attention_mask


def _fit(values, width):
    """``values`` ([B, P, ...]) cut or zero-padded to ``width`` along dim 1, as upstream's ``pad_sequence``."""
    if width <= values.size(1):
        return values[:, :width]
    pad = values.new_zeros(values.size(0), width - values.size(1), *values.shape[2:])
    return torch.cat([values, pad], 1)
