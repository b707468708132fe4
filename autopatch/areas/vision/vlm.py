"""Vision-language models: keep the image batch symbolic.

LlavaModel.get_image_features ends with ``list(image_features)``: turning a ``[images, patches, dim]`` tensor
into a Python list needs its length, so torch.export specialises the image batch to the traced value.  The
only consumer, LlavaModel.forward, immediately does ``torch.cat(image_features, dim=0)``; the replacement hands
it a one-element list holding the features already flattened to ``[images * patches, dim]``, which
concatenates to the same tensor with the batch left symbolic.

LlavaModel.get_placeholder_mask (4.x) compares ``inputs_embeds[mask].numel()`` (a data-dependent size) with the
feature count in a Python ``if``; the replacement states the same condition with ``torch._check_tensor_all``, which
export keeps as a runtime assertion. Eight more 4.x VLMs carry the very same method (one fingerprint).

FuyuModel.get_image_features (4.x) embeds the images one by one in a Python loop over the batch; the replacement
embeds them all at once and hands back one list element, which FuyuModel.forward concatenates as before.

Route patches: eager code keeps the originals.
"""

from __future__ import annotations

import ast
import functools
import sys

import torch

from ... import kit
from ...kit import installed


def _select_features(self, image_outputs, vision_feature_layer, vision_feature_select_strategy):
    """The projected image features ``[images, patches, dim]``, as both 4.x and 5.x compute them."""
    if isinstance(vision_feature_layer, int):
        selected = image_outputs.hidden_states[vision_feature_layer]
        if vision_feature_select_strategy == "default":
            selected = selected[:, 1:]
    else:
        pool = [image_outputs.hidden_states[layer] for layer in vision_feature_layer]
        if vision_feature_select_strategy == "default":  # drop the CLS position of every selected layer
            pool = [hidden[:, 1:] for hidden in pool]
        selected = torch.cat(pool, dim=-1)
    return self.multi_modal_projector(selected)


def _one_tensor(image_features):
    """One list element with every image's patches, instead of one element per image (fixed count)."""
    return [image_features.reshape(-1, image_features.shape[-1])]


def _image_features_v5(
    self,
    pixel_values: torch.Tensor,
    vision_feature_layer=None,
    vision_feature_select_strategy=None,
    image_sizes=None,
    **kwargs,
):
    if image_sizes is not None:
        kwargs["image_sizes"] = image_sizes
    image_outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)
    image_features = _select_features(self, image_outputs, vision_feature_layer, vision_feature_select_strategy)
    if image_sizes is not None:  # per-image sizes: unchanged (the split sizes are data, as upstream)
        split_sizes = (
            (torch.as_tensor(image_sizes, device=image_features.device) // self.vision_tower.patch_size)
            .prod(dim=-1)
            .tolist()
        )
        image_outputs.pooler_output = torch.split(image_features.squeeze(0), split_sizes)
    else:
        image_outputs.pooler_output = _one_tensor(image_features)
    return image_outputs


def _image_features_v4(
    self,
    pixel_values: torch.FloatTensor,
    vision_feature_layer=None,
    vision_feature_select_strategy=None,
    **kwargs,
):
    if vision_feature_layer is None:
        vision_feature_layer = self.config.vision_feature_layer
    if vision_feature_select_strategy is None:
        vision_feature_select_strategy = self.config.vision_feature_select_strategy
    if vision_feature_select_strategy not in ["default", "full"]:
        raise ValueError(f"Unexpected select feature strategy: {self.config.vision_feature_select_strategy}")
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    image_outputs = self.vision_tower(pixel_values, output_hidden_states=True, **kwargs)
    image_features = _select_features(self, image_outputs, vision_feature_layer, vision_feature_select_strategy)
    if "image_sizes" in kwargs:  # per-image sizes: unchanged
        split_sizes = [
            (height // self.vision_tower.patch_size) * (width // self.vision_tower.patch_size)
            for height, width in kwargs["image_sizes"]
        ]
        return torch.split(image_features.squeeze(0), split_sizes)
    return _one_tensor(image_features)


def _image_features_body():
    """The body for the installed transformers. Importing modeling_llava when this module loads would run llava's
    own post-import hook while this module is half initialised (another VLM's hook, e.g. Gemma3's, may be what
    loads this module): built by kit.built_before_export instead."""
    from transformers.models.llava import modeling_llava as llava

    if not hasattr(llava, "select_hidden_states"):
        return _image_features_v4
    # transformers 5: the original is wrapped by decorators that fill the config defaults, ask the vision tower for
    # the selected hidden states only and honour return_dict; the replacement gets the same.
    return llava.merge_with_config_defaults(
        llava.can_return_tuple(llava.select_hidden_states("vision_feature_layer")(_image_features_v5)))


_image_features_for_installed_version = kit.built_before_export("transformers.models.llava.modeling_llava",
                                                                _image_features_body)


def llava_image_features(self, *args, **kwargs):
    """LlavaModel.get_image_features for the installed transformers (4.x or 5.x above)."""
    return _image_features_for_installed_version()(self, *args, **kwargs)


# What `autopatch diff` shows (inspect follows __wrapped__): the body for the installed version, chosen from the
# package metadata without importing transformers.
llava_image_features.__wrapped__ = (
    _image_features_v4 if (installed("transformers") or "5").startswith("4.") else _image_features_v5
)


def llava_features_one_tensor(get_image_features):
    """A rewriter for 5.3-5.12 ``LlavaModel.get_image_features`` (neither the 4.x nor the 5.23 body above):
    ``list(image_features)`` becomes the one-element list of ``llava_image_features``, from the function's own
    source."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {
        "list(image_features)": "[image_features.reshape(-1, image_features.shape[-1])]",
    })


def llava_placeholder_mask(self, input_ids, inputs_embeds, image_features):
    """LlavaModel.get_placeholder_mask (4.x) with its size check as ``torch._check_tensor_all``."""
    return _checked_mask(self, self.config.image_token_id, input_ids, inputs_embeds, image_features,
                         "Image features and image tokens do not match")


def chameleon_placeholder_mask(self, input_ids, inputs_embeds, image_features):
    """ChameleonModel.get_placeholder_mask (4.x): Llava's check, its image token read from the vocabulary
    mapping."""
    return _checked_mask(self, self.vocabulary_mapping.image_token_id, input_ids, inputs_embeds, image_features,
                         "Image features and image tokens do not match")


def llava_next_video_placeholder_masks(self, input_ids, inputs_embeds, image_features=None, video_features=None):
    """LlavaNextVideoModel.get_placeholder_mask (4.x): the image and the video masks, each size check as
    ``torch._check_tensor_all`` (as ``llava_placeholder_mask``)."""
    return tuple(_checked_mask(self, token_id, input_ids, inputs_embeds, features,
                               "Image or video features and their tokens do not match")
                 for token_id, features in ((self.config.image_token_id, image_features),
                                            (self.config.video_token_id, video_features)))


def _checked_mask(self, token_id, input_ids, inputs_embeds, features, message):
    """The placeholder mask of ``token_id`` (from the ids, or from the embeddings when there are none), expanded
    over the hidden size, and upstream's check that it has as many elements as ``features`` (skipped without
    features, as upstream skips it)."""
    if input_ids is None:
        embedding = self.get_input_embeddings()(torch.tensor(token_id, dtype=torch.long, device=inputs_embeds.device))
        mask = (inputs_embeds == embedding).all(-1)
    else:
        mask = input_ids == token_id
    if features is not None:
        # A tensor condition: export keeps it as an assertion on the program's inputs (a check on a plain SymInt
        # comparison is absorbed as a shape fact and not asserted at run time). The message is a constant: under
        # strict=True Dynamo cannot convert a message closure over tensors ("Can't convert torch._check*() message
        # closure"), and this replacement only runs while exporting, where the program's assertion names no values.
        torch._check_tensor_all(mask.sum() * inputs_embeds.shape[-1] == features.numel(), lambda: message)
    return mask.unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)


def placeholder_check_on_token_count(get_placeholder_mask):
    """A rewriter for the ``get_placeholder_mask`` of 5.0-5.11 (one source in Llava, Gemma3 and most VLMs built on
    them). Its check ``inputs_embeds[special_image_mask].numel() == image_features.numel()`` sizes a boolean
    selection: export names that size u0 and solves the image batch from it as u0 / (tokens * hidden) in floating
    point, whose upper bound rounds past u0's own (torch 2.13: ``tgt_bound ... not a subset of src_bound``). The same
    condition on the token count, as 5.12 writes it, needs no selection."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_placeholder_mask, {
        "inputs_embeds[special_image_mask].numel() == image_features.numel()":
        "n_image_tokens * inputs_embeds.shape[-1] == image_features.numel()",
    })


def placeholder_message_lazy(get_placeholder_mask):
    """A rewriter for the 5.12+ ``get_placeholder_mask`` of Llava's family, Llama 4 and Video-LLaVA, for strict
    export: each ``torch_compilable_check``'s message is an f-string of the feature count, formatted before the
    check runs. Dynamo turns the symbolic count into text by fixing the image batch (``attention_mask.size()[0]``
    specialized to the traced batch). Each such message becomes a lambda, which transformers' check formats only
    if it fails in eager code."""
    from ...kit import NotRewritable, source_of, substitute_expressions

    messages = {ast.unparse(call.args[1]) for call in ast.walk(ast.parse(source_of(get_placeholder_mask)))
                if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "torch_compilable_check"
                and len(call.args) > 1 and isinstance(call.args[1], ast.JoinedStr)}
    if not messages:
        raise NotRewritable("no torch_compilable_check with an f-string message in get_placeholder_mask")
    return substitute_expressions(get_placeholder_mask, {message: f"lambda: {message}" for message in messages})


def granite_docling_features_one_element(get_image_features):
    """A rewriter for ``GraniteDoclingModel.get_image_features`` (5.23): the pooled features and each deepstack
    layer's are split per sample by ``.tolist()`` of the tile counts, which fixes the batch; forward's first act on
    them is ``torch.cat``. One element each instead, holding every sample's features."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {
        "split_sizes = (tiles_per_sample * tokens_per_tile).tolist()": "pass",
        "torch.split(image_outputs.pooler_output, split_sizes)": "(image_outputs.pooler_output,)",
        "[torch.split(features, split_sizes) for features in image_outputs.deepstack_features]":
        "[(features,) for features in image_outputs.deepstack_features]",
    })


def ovis2_indicators_by_where(forward):
    """A rewriter for ``Ovis2Model.forward`` (5.12+): each visual indicator token's embedding is written with
    ``if mask.any(): inputs_embeds[mask] = feature``, a branch on the data. ``torch.where`` writes the same values
    where the mask holds and leaves the rest, for any mask (none: unchanged, as the skipped branch)."""
    from ...kit import substitute_expressions

    feature = "visual_indicator_features[i].to(inputs_embeds.device, inputs_embeds.dtype)"
    return substitute_expressions(forward, {
        f"if mask.any():\n    inputs_embeds[mask] = {feature}":
        f"inputs_embeds = torch.where(mask[..., None], {feature}, inputs_embeds)",
    })


def gemma4_features_one_element(get_image_features):
    """A rewriter for ``Gemma4Model.get_image_features`` and ``Gemma4UnifiedModel.get_image_features`` (5.23): the
    pooled features (every image's non-padding tokens, one after another) are split per image by ``.tolist()`` of
    the counts, which fixes the number of images; forward's first act on them is ``torch.cat``. One element
    instead, the same tensor once concatenated (forward still checks its size against the image tokens)."""
    from ...kit import source_of, substitute_expressions

    counts = ("non_pad_mask.sum(dim=-1) // k_squared" if "k_squared" in source_of(get_image_features)
              else "non_pad_mask.sum(dim=-1)")  # Gemma 4 pools k x k patches per token; Unified does not
    return substitute_expressions(get_image_features, {
        f"split_sizes = ({counts}).tolist()": "pass",
        "torch.split(pooler_output, split_sizes)": "(pooler_output,)",
    })


def fuyu_image_features(self, pixel_values, **kwargs):
    """FuyuModel.get_image_features (4.x) without its loop over the images: every image's patches embedded at
    once, as one list element of ``[images * patches, hidden]`` (what ``torch.cat`` of the per-image list gives)."""
    projection = self.vision_embed_tokens
    embeddings = projection(pixel_values.to(projection.weight.dtype))
    return [embeddings.reshape(-1, embeddings.shape[-1])]


def idefics_image_features(get_image_features):
    """A rewriter for 5.x Idefics2/Idefics3 ``get_image_features`` (rewrite mode: gets the original; SmolVLM has
    the same code but returns the per-sample list in its output, so no row uses it there).

    Two expressions fix the image batch to the traced size: ``image_features.split(counts.tolist())`` (a list of
    Python ints) and ``pixel_attention_mask.view(batch_size * num_images, ...)`` (export records that product
    equal to the mask's first size as a guard, so other image counts are refused). The features become one
    ``[images * tokens, dim]`` list element, which the caller concatenates to the same tensor (as for Llava), and
    the mask is flattened over its first two dims, the same reshape with no size named."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {
        "[f.reshape(-1, f.shape[-1]) for f in image_features.split(num_real_images_per_batch.tolist())]":
        "[image_features.reshape(-1, image_features.shape[-1])]",
        "pixel_attention_mask.view(batch_size * num_images, *pixel_attention_mask.shape[2:])":
        "pixel_attention_mask.flatten(0, 1)",
    })


# --- 4.x Idefics2 / Idefics3 / SmolVLM ----------------------------------------------------------------------------


def navit_position_embeddings(self, pixel_values, patch_attention_mask):
    """``<Idefics2|Idefics3|SmolVLM>VisionEmbeddings.forward`` (4.x) without its Python loop over the images.

    The loop computes, per image, bucketed fractional coordinates for the ``h x w`` patches its mask keeps and
    writes them into the kept positions; ``torch.arange(nb_patches_h)`` there has a data-dependent length. The
    same arithmetic runs here on every position of the padded grid at once, and positions outside the kept
    ``h x w`` rectangle get 0, as in the original. Row-major writing into "the kept positions" equals placing by
    coordinates when the kept patches are the top-left rectangle, which is what the processors produce; the
    program checks that at run time and refuses any other mask."""
    batch_size, _, height, width = pixel_values.shape
    patches = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
    side = self.num_patches_per_side
    boundaries = torch.arange(1 / side, 1.0, 1 / side, device=pixel_values.device)
    rows, cols = patch_attention_mask.shape[1], patch_attention_mask.shape[2]
    kept_h = patch_attention_mask[:, :, 0].sum(dim=1)  # [batch]
    kept_w = patch_attention_mask[:, 0, :].sum(dim=1)
    h = torch.arange(rows, device=pixel_values.device, dtype=pixel_values.dtype)
    w = torch.arange(cols, device=pixel_values.device, dtype=pixel_values.dtype)
    rectangle = (h[None, :, None] < kept_h[:, None, None]) & (w[None, None, :] < kept_w[:, None, None])
    torch._check_tensor_all(
        (rectangle == patch_attention_mask).all(),
        lambda: "autopatch: the patch attention mask must keep a top-left rectangle of patches per image",
    )
    bucket_h = torch.bucketize(h[None, :] / kept_h[:, None] * (1 - 1e-6), boundaries, right=True)
    bucket_w = torch.bucketize(w[None, :] / kept_w[:, None] * (1 - 1e-6), boundaries, right=True)
    positions = (bucket_h[:, :, None] * side + bucket_w[:, None, :]).reshape(batch_size, -1)
    positions = torch.where(patch_attention_mask.reshape(batch_size, -1), positions, torch.zeros_like(positions))
    return patches + self.position_embedding(positions)


#: 4.x get_image_features views the pixel mask as ``batch_size * num_images``: export records the product equal
#: to the mask's first size, so another number of images per sample is refused. flatten(0, 1) is the same reshape.
_MASK_VIEW = {"pixel_attention_mask.view(batch_size * num_images, *pixel_attention_mask.shape[2:])":
              "pixel_attention_mask.flatten(0, 1)"}


def idefics_image_features_4x(get_image_features):
    """A rewriter for 4.x Idefics2/Idefics3 ``get_image_features``: the mask view above."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, _MASK_VIEW)


def smolvlm_image_features_4x(get_image_features):
    """A rewriter for 4.x SmolVLM ``get_image_features``: the mask view above, and ``if not any(real_images_inds):
    real_images_inds[0] = True`` (Python's any() reads every flag) as the tensor expression 5.x uses."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {
        **_MASK_VIEW,
        "if not any(real_images_inds):\n    real_images_inds[0] = True":
        "real_images_inds[0] = real_images_inds[0] | ~torch.any(real_images_inds)",
    })


def idefics2_full_patch_mask(transformer_forward):
    """A rewriter for 4.x Idefics2VisionTransformer.forward: ``if not torch.any(~patch_attention_mask): mask = None``
    reads the mask. Its other branch (the 4D additive mask, zeros where every patch is kept) attends exactly as no
    mask does, so while tracing the test is False: always the 4D mask, as Idefics3 does."""
    from ...kit import substitute_expressions

    return substitute_expressions(transformer_forward, {
        "not torch.any(~patch_attention_mask)":
        "False if __autopatch_rt.is_traced_tensor(patch_attention_mask) else not torch.any(~patch_attention_mask)",
    })


def smolvlm_merger_check(inputs_merger):
    """A rewriter for 4.x SmolVLMModel.inputs_merger: the ``if not torch.all(...): raise`` check on image token
    counts becomes ``torch._check_tensor_all`` (a runtime assertion in the program), as 5.x has it."""
    from ...kit import substitute_expressions

    return substitute_expressions(inputs_merger, {
        "if not torch.all(num_image_tokens % patch_size == 0):\n"
        "    raise ValueError('At least one sample has <image> tokens not divisible by patch_size.')":
        "torch._check_tensor_all(num_image_tokens % patch_size == 0, "
        "lambda: 'At least one sample has <image> tokens not divisible by patch_size.')",
    })


#: LLaVA-NeXT's get_image_features (4.57 and 5.x; LLaVA-NeXT-Video's too): what fixes the images' sizes and count
#: to the traced ones, and the loop-free computation each becomes (``autopatch.rewrite.runtime``'s anyres helpers).
_ANYRES_TILES = {
    "[pix_val[:num_patch] for pix_val, num_patch in zip(pixel_values, image_num_patches)]":
        "[__autopatch_rt.anyres_tiles(pixel_values, image_num_patches)]",
    "torch.split(image_features, image_num_patches, dim=0)": "image_features",
}
_ANYRES_SUBSTITUTIONS = {
    "image_num_patches = [image_size_to_num_patches(image_size=imsize, grid_pinpoints="
    "self.config.image_grid_pinpoints, patch_size=self.config.vision_config.image_size) for imsize in image_sizes]":
        "image_num_patches = __autopatch_rt.anyres_tile_counts(image_sizes, self.config.image_grid_pinpoints, "
        "self.config.vision_config.image_size)",
    **_ANYRES_TILES,
}
_ANYRES_PACK = ("__autopatch_rt.anyres_pack(image_features, image_sizes, image_num_patches, self.config, "
                "self.image_newline)")


def anyres_image_features(get_image_features):
    """A rewriter for LLaVA-NeXT's ``get_image_features``: each image's tile count and grid come from
    ``image_sizes.tolist()`` through Python's ``select_best_resolution``, and the tiles are kept, split and packed
    image by image, so a program would only take the traced image sizes and number of images (the export stops on
    ``IntTrueDiv(56, u0) < IntTrueDiv(112, u1)``). Rewritten from the source: the same choice, tiles and packing
    for all images at once, from the sizes as data; the features come back as one list element, which the caller
    concatenates to the same tensor."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {**_ANYRES_SUBSTITUTIONS, (
        "self.pack_image_features(image_features, image_sizes, vision_feature_select_strategy="
        "vision_feature_select_strategy, image_newline=self.image_newline)"): _ANYRES_PACK})


def anyres_image_features_video(get_image_features):
    """The same for LLaVA-NeXT-Video's, which passes the feature strategy to ``pack_image_features`` by position."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, {**_ANYRES_SUBSTITUTIONS, (
        "self.pack_image_features(image_features, image_sizes, vision_feature_select_strategy, "
        "image_newline=self.image_newline)"): _ANYRES_PACK})


#: LLaVA-OneVision's get_image_features (4.57 and 5.x): LLaVA-NeXT's tiles (``_ANYRES_TILES``), besides which images
#: are tiled at all (``batch_num_images``, iterated in Python) and its own packing (``runtime.onevision_pack``).
_ONEVISION_SUBSTITUTIONS = {
    "if batch_num_images is None:\n"
    "    need_patching = [True] * len(image_sizes)\n"
    "else:\n"
    "    need_patching = [n == 1 for n in batch_num_images for _ in range(n)]":
        "need_patching = __autopatch_rt.onevision_alone(image_sizes, batch_num_images)",
    "image_num_patches = [image_size_to_num_patches(image_size=imsize, grid_pinpoints="
    "self.config.image_grid_pinpoints, patch_size=self.config.vision_config.image_size) if should_patch else 1 "
    "for imsize, should_patch in zip(image_sizes, need_patching)]":
        "image_num_patches = __autopatch_rt.onevision_tile_counts(image_sizes, self.config.image_grid_pinpoints, "
        "self.config.vision_config.image_size, need_patching)",
    **_ANYRES_TILES,
    "self.pack_image_features(image_features, image_sizes, image_newline=self.image_newline, "
    "vision_aspect_ratio=vision_aspect_ratio)":
        "__autopatch_rt.onevision_pack(image_features, image_sizes, image_num_patches, self.config, "
        "self.image_newline, vision_aspect_ratio)",
}


def onevision_image_features(get_image_features):
    """A rewriter for LLaVA-OneVision's ``get_image_features``: LLaVA-NeXT's per-image tile choice and packing
    (see ``anyres_image_features``), plus a bilinear resampling of each large image's grid to a size read from the
    data and, with ``batch_num_images``, untiled images for multi-image samples. Rewritten from the source: the
    same tiles, packing and resampling (F.interpolate's bilinear taps and weights) for all images at once; the
    features come back as one list element, which the caller concatenates to the same tensor."""
    from ...kit import substitute_expressions

    return substitute_expressions(get_image_features, _ONEVISION_SUBSTITUTIONS)


def merged_patches(image_features, image_sizes, patch_size, merge):
    """Mistral 3's patch merger before its linear layer, for all images at once: each image's patch grid
    (``height // patch_size`` by ``width // patch_size``) cut into ``merge`` x ``merge`` blocks (a partial block at
    the edge dropped, as ``unfold`` does), each block's patches concatenated channel-major (``unfold``'s order),
    blocks row by row, one image after the other: ``[blocks, dim * merge**2]``."""
    device = image_features.device
    sizes = torch.as_tensor(image_sizes, device=device)
    rows, cols = sizes[:, 0] // patch_size, sizes[:, 1] // patch_size
    first_patch = torch.cumsum(rows * cols, 0) - rows * cols
    block_cols = cols // merge
    blocks = (rows // merge) * block_cols
    image = torch.repeat_interleave(torch.arange(sizes.shape[0], device=device), blocks)
    local = torch.arange(image.shape[0], device=device) - (torch.cumsum(blocks, 0) - blocks)[image]
    block_row, block_col = local // block_cols[image], local % block_cols[image]
    offset = torch.arange(merge, device=device)
    row = block_row[:, None, None] * merge + offset[None, :, None]  # [blocks, merge, 1]
    col = block_col[:, None, None] * merge + offset[None, None, :]  # [blocks, 1, merge]
    source = first_patch[image][:, None, None] + row * cols[image][:, None, None] + col  # [blocks, merge, merge]
    gathered = image_features[source.flatten(1)]  # [blocks, merge**2, dim]
    return gathered.transpose(1, 2).flatten(1)


def patch_merger(self, image_features, image_sizes):
    """Mistral3PatchMerger.forward (and its copies in LightOnOCR and Mistral Large 4): the merge of each image's
    patch blocks without the loop over images and ``split`` by per-image counts (``merged_patches``), then the
    same linear layer."""
    return self.merging_layer(merged_patches(image_features, image_sizes, self.patch_size, self.spatial_merge_size))


#: Pixtral's forward (4.57 and 5.x): the per-image loop that cuts each image's patches out of the padded batch, what
#: flattens, positions and masks them, and the loop-free equivalents (``autopatch.rewrite.runtime``'s pixtral helpers).
_PIXTRAL_SUBSTITUTIONS = {
    "[embed[..., :size[0] // self.patch_size, :size[1] // self.patch_size] for embed, size in "
    "zip(patch_embeds, image_sizes)]": "__autopatch_rt.pixtral_patches(patch_embeds, image_sizes, self.patch_size)",
    "torch.cat([p.flatten(1).T for p in patch_embeds_list], dim=0).unsqueeze(0)":
        "__autopatch_rt.pixtral_sequence(patch_embeds_list)",
    "generate_block_attention_mask([p.shape[-2] * p.shape[-1] for p in patch_embeds_list], patch_embeds)":
        "__autopatch_rt.pixtral_block_mask(patch_embeds_list, patch_embeds)",
}
_PIXTRAL_POSITIONS = """
for patch in patch_embeds_list:
    hpos_ids, wpos_ids = torch.meshgrid(torch.arange(patch.shape[-2], device=patch.device),
                                        torch.arange(patch.shape[-1], device=patch.device), indexing="ij")
    position_ids.append(torch.stack([hpos_ids.flatten(), wpos_ids.flatten()], dim=-1))
"""


def pixtral_patches_loop_free(forward):
    """A rewriter for 5.13+ ``PixtralVisionModel.forward``: the images' patches are cut out, positioned and masked
    image by image from ``image_sizes`` (the export stops on ``u1*u3 + u5*u7 > 1``, a sum of per-image patch
    counts). Rewritten from the source: the padded batch stays whole and a mask of each image's own patches selects
    them, the same patches, (row, column) positions and per-image attention blocks in the same order."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        **_PIXTRAL_SUBSTITUTIONS,
        _PIXTRAL_POSITIONS.strip(): "position_ids.append(__autopatch_rt.pixtral_positions(patch_embeds_list))",
    })


def pixtral_patches_loop_free_flat(forward):
    """The same for 4.x to 5.12, whose positions are ``position_ids_in_meshgrid``'s ``row * max_width + column``."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        **_PIXTRAL_SUBSTITUTIONS,
        "position_ids_in_meshgrid(patch_embeds_list, max_width=self.config.image_size // self.config.patch_size)":
            "__autopatch_rt.pixtral_positions_flat(patch_embeds_list, self.config.image_size // "
            "self.config.patch_size)",
    })


#: The merged features ``[blocks, dim]`` as one element. Not ``squeeze(0)`` as the split reads them: on a count known
#: only from data, torch.onnx translates that squeeze into an ONNX Squeeze, which fails unless the count is 1.
_MERGED_WHOLE = "(image_features.reshape(-1, image_features.shape[-1]),)"

#: How Mistral 3 and its kin split the merged features per image (a list of Python ints, one per image: it fixes
#: the number of images), by version and model; the caller concatenates the split, so one element does.
_MERGED_SPLITS = {
    "mistral3": ("split_sizes = (torch.as_tensor(image_sizes, device=image_features.device) // downsample_ratio)"
                 ".prod(dim=-1).tolist()", "torch.split(image_features.squeeze(0), split_sizes)", _MERGED_WHOLE),
    "mistral3_4x": ("split_sizes = [height // downsample_ratio * (width // downsample_ratio) for height, width in "
                    "image_sizes]", "torch.split(image_features.squeeze(0), split_sizes)", _MERGED_WHOLE),
    "lighton_ocr": ("split_sizes = [height // downsample_ratio * (width // downsample_ratio) for height, width in "
                    "image_sizes]", "torch.split(image_features, split_sizes)", "(image_features,)"),
}


def _merged_features_one_element(get_image_features, kind: str):
    from ...kit import substitute_expressions

    sizes, split, whole = _MERGED_SPLITS[kind]
    return substitute_expressions(get_image_features, {sizes: "pass", split: whole})


def merged_features_one_element(get_image_features):
    """A rewriter for 5.x ``Mistral3Model.get_image_features`` (Mistral Large 4's is the same): the features split
    per image with ``.tolist()`` sizes become one element holding all of them (the caller concatenates)."""
    return _merged_features_one_element(get_image_features, "mistral3")


def merged_features_one_element_4x(get_image_features):
    """The same for 4.x, whose split sizes come from a Python loop over ``image_sizes``."""
    return _merged_features_one_element(get_image_features, "mistral3_4x")


def lighton_features_one_element(get_image_features):
    """The same for LightOnOCR's (5.x), which splits the projected features without a leading batch dim."""
    return _merged_features_one_element(get_image_features, "lighton_ocr")


@kit.calls_original
def emu3_image_tokens_masked(original, self, pixel_values, image_sizes, **kwargs):
    """``Emu3Model.get_image_features`` (5.23) for images (video, 5-d pixels, keeps the original): the VQ codes of
    each image are cropped to its own size, ``int(size / factor)`` rows and columns, in a loop over the images
    (a float per image: the export stops on it), and each kept row ends with an end-of-line token. The same
    tokens for all images at once: the codes mapped to BPE ids with an end-of-line column, and a mask of each
    image's kept rows and columns (the end-of-line column always) selects them in the same order. Returns the
    encoder's output and the features as one element (forward concatenates them); ``image_tokens``, the per-image
    crops, is not built (None), nor are the VQ encoder's recorded outputs (forward asks for none)."""
    if pixel_values.ndim != 4:
        return original(self, pixel_values, image_sizes, **kwargs)
    vq = self.vqmodel
    frames = pixel_values.unsqueeze(1).repeat(1, vq.config.temporal_downsample_factor, 1, 1, 1)
    hidden_states = vq.encoder(frames.to(vq.dtype))
    quantized = vq.quant_conv(hidden_states.permute(0, 2, 1, 3, 4)).permute(0, 2, 1, 3, 4)
    codes = vq.quantize(quantized).squeeze(1)  # [images, rows, columns]
    images, rows, columns = codes.shape
    mapping = self.vocabulary_mapping
    bpe = mapping.img2bpe_mapping_tensor.to(codes.device)[codes]
    end_of_line = torch.full((images, rows, 1), mapping.eol_token_id, dtype=bpe.dtype, device=bpe.device)
    bpe = torch.cat([bpe, end_of_line], dim=-1)
    # int(size / factor) of a positive size is its floor division.
    kept_rows = (image_sizes[:, 0] // vq.vision_spatial_factor).to(bpe.device)[:, None, None]
    kept_columns = (image_sizes[:, 1] // vq.vision_spatial_factor).to(bpe.device)[:, None, None]
    row = torch.arange(rows, device=bpe.device)[None, :, None]
    column = torch.arange(columns + 1, device=bpe.device)[None, None, :]
    kept = (row < kept_rows) & ((column < kept_columns) | (column == columns))
    features = self.get_input_embeddings()(bpe[kept])
    output = sys.modules[type(self).__module__].Emu3VQVAEModelOutput
    return output(last_hidden_state=hidden_states, pooler_output=(features,))
