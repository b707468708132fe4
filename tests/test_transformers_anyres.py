"""transformers.vision.llava_next_anyres, .llava_next_video_anyres (and, on 4.x, their placeholder checks):
LLaVA-NeXT's "anyres" images, each resized to one of the config's grid pinpoints and cut into tiles.

transformers chooses each image's pinpoint in Python from ``image_sizes.tolist()`` and keeps, splits and unpads the
tiles image by image, so the export stops on the sizes (``IntTrueDiv(56, u0) < IntTrueDiv(112, u1)``). The rows
compute the same with tensor operations. Proven here:
  * the loop-free choice, tile counts and packing equal transformers' own functions exactly, over image sizes of
    every shape (portrait, landscape, square, past the largest pinpoint, a pixel wide) at the real LLaVA-NeXT
    settings (the config class's pinpoints, 336-pixel tiles of 14-pixel patches) and at the tiny model's;
  * the export fails without the rows and, with them, the program matches eager on batches whose images have
    other sizes, grids and tile counts than traced (every image of a batch its own), padded text included.
"""

import copy

import pytest
import torch

import proving
from autopatch.models import tiny
from autopatch.rewrite import runtime
from proving import Proof

MODELS = [("llava_next", "LlavaNextModel"), ("llava_next_video", "LlavaNextVideoModel")]

# Heights and widths of every kind: tiny, one tile, just under/over a tile or a pinpoint, far past the largest.
SIDES = (1, 13, 55, 56, 57, 100, 111, 112, 113, 167, 168, 200, 335, 336, 337, 500, 671, 672, 673, 1000, 1008, 2048)


def _rows(model_type):
    """The rows a prefill needs: the tiling rewrite, and on 4.x the placeholder check."""
    import transformers

    rows = (f"transformers.vision.{model_type}_anyres",)
    if int(transformers.__version__.split(".")[0]) < 5:
        rows += (f"transformers.vision.{model_type}_placeholder_mask",)
    return rows


def _modeling(model_type):
    import importlib

    return importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")


@pytest.mark.parametrize("pinpoints,tile", [
    ([[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]], 336),  # LlavaNextConfig's own
    ([[56, 112], [112, 56], [112, 112], [168, 56], [56, 168]], 56),  # the tiny model's (the same, scaled)
])
def test_tile_choice_equals_transformers_for_every_image_shape(pinpoints, tile):
    modeling = _modeling("llava_next")
    sizes = torch.tensor([[h, w] for h in SIDES for w in SIDES])
    expected_counts = [modeling.image_size_to_num_patches(s, pinpoints, tile) for s in sizes]
    expected_grids = [modeling.get_anyres_image_grid_shape(s, pinpoints, tile) for s in sizes]
    assert runtime.anyres_tile_counts(sizes, pinpoints, tile).tolist() == expected_counts
    chosen = runtime._best_pinpoints(sizes, pinpoints)
    assert (chosen // tile).tolist() == [list(g) for g in expected_grids]


def _image_config(model_type, pinpoints, tile, patch):
    """A model config whose packing reads the given pinpoints and tile/patch sizes (nothing else is built)."""
    config = tiny.tiny_config(model_type)
    config.image_grid_pinpoints = pinpoints
    config.vision_config.image_size = tile
    config.vision_config.patch_size = patch
    return config


@pytest.mark.parametrize("model_type,owner", MODELS)
@pytest.mark.parametrize("pinpoints,tile,patch", [
    ([[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]], 336, 14),
    ([[56, 112], [112, 56], [112, 112], [168, 56], [56, 168]], 56, 14),
])
def test_packing_equals_transformers_bit_for_bit(model_type, owner, pinpoints, tile, patch):
    """Random tile features for a batch of images of all shapes: the thumbnail, the unpadded grid and a newline
    per row, in transformers' order, equal to its ``pack_image_features`` exactly, and the same lengths."""
    config = _image_config(model_type, pinpoints, tile, patch)
    owner_class = getattr(_modeling(model_type), owner)
    g = torch.Generator().manual_seed(0)
    sizes = torch.tensor([[h, w] for h in SIDES[::3] for w in SIDES[1::3]])
    counts = runtime.anyres_tile_counts(sizes, pinpoints, tile)
    side = tile // patch
    features = torch.randn(int(counts.sum()), side * side, 8, generator=g)
    newline = torch.randn(8, generator=g)
    holder = type("Holder", (), {"config": config})()  # pack_image_features reads only self.config
    expected, expected_lengths = owner_class.pack_image_features(
        holder, torch.split(features, counts.tolist()), sizes, "default", image_newline=newline)
    packed, lengths = runtime.anyres_pack(features, sizes, counts, config, newline)
    assert lengths.tolist() == expected_lengths.tolist()
    assert torch.equal(packed[0], torch.cat(expected))


def _prefill(model, sizes, text, seed):
    """A prefill of one image per sample, the ``sizes`` given (height, width): each image's tiles padded to the
    most any image has (as the processor pads them), its placeholders as many as its packed features, the text
    ``text`` tokens around them, the shorter samples left-padded."""
    config = model.config
    g = torch.Generator().manual_seed(seed)
    tile = config.vision_config.image_size
    image_sizes = torch.tensor(sizes)
    counts = runtime.anyres_tile_counts(image_sizes, config.image_grid_pinpoints, tile)
    pixels = torch.zeros(len(sizes), int(counts.max()), 3, tile, tile)
    for i, count in enumerate(counts.tolist()):
        pixels[i, :count] = torch.randn(count, 3, tile, tile, generator=g)
    with torch.no_grad():
        features = model.model.get_image_features(pixel_values=pixels, image_sizes=image_sizes)
    features = features.pooler_output if hasattr(features, "pooler_output") else features
    tokens = [len(f) for f in features]
    length = max(tokens) + text
    ids = torch.full((len(sizes), length), getattr(config, "pad_token_id", None) or 0)
    mask = torch.zeros(len(sizes), length, dtype=torch.long)
    for i, n in enumerate(tokens):
        row = torch.randint(3, 100, (text,), generator=g)
        sample = torch.cat([row[:2], torch.full((n,), _image_token(config)), row[2:]])
        ids[i, -len(sample):] = sample
        mask[i, -len(sample):] = 1
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels, "image_sizes": image_sizes}


def _image_token(config):
    token = getattr(config, "image_token_id", None)
    return config.image_token_index if token is None else token


def case(model_type):
    def build_case():
        model = tiny.build(tiny.architecture(model_type, "vlm"))
        # traced: two landscape-ish images of different grids; second set: three of other shapes; runs: a portrait
        # past the largest pinpoint, a square, a sliver, a single image, four at once
        traced = _prefill(model, [[40, 100], [56, 56]], 5, 0)
        other = _prefill(model, [[150, 30], [100, 100], [20, 160]], 7, 1)
        runs = [_prefill(model, [[400, 90], [56, 57], [3, 200]], 6, 2), _prefill(model, [[111, 112]], 4, 3),
                _prefill(model, [[60, 60], [168, 50], [30, 170], [112, 56]], 9, 4)]
        return model, traced, other, runs

    return Proof(f"{model_type}/prefill", build_case, rows=_rows(model_type), beside=("all",),
                 fails_with="data-dependent|IntTrueDiv|Ne\\(u")


@pytest.mark.parametrize("model_type", [m for m, _ in MODELS])
def test_export_stops_on_the_image_sizes_without_the_rows(make_agent, model_type):
    proving.fails_without(case(model_type), make_agent)


@pytest.mark.parametrize("model_type", [m for m, _ in MODELS])
def test_program_matches_eager_on_images_of_other_sizes_with_the_rows(make_agent, model_type):
    proving.exports_with(case(model_type), make_agent)


def test_eager_is_unchanged_outside_an_export(make_agent):
    """The rows act only while the thread exports: eager features are transformers' per-image list."""
    make_agent()
    model = tiny.build(tiny.architecture("llava_next", "vlm"))
    inputs = _prefill(model, [[40, 100], [150, 30]], 5, 0)
    with torch.no_grad():
        out = model.model.get_image_features(pixel_values=inputs["pixel_values"], image_sizes=inputs["image_sizes"])
    features = out.pooler_output if hasattr(out, "pooler_output") else out
    assert len(features) == 2  # one element per image, as transformers returns them
    with torch.no_grad():
        copy.deepcopy(model)(**inputs)


def test_onnx_matches_eager_on_images_of_other_sizes(make_agent, onnx_extra):
    """Converted from the same two sets, onnxruntime runs batches of other image shapes, every leaf compared."""
    model, traced, other, runs = case("llava_next").build()
    make_agent()
    proving.assert_onnx_runs_match(proving.export_onnx(model, traced, other), model, runs[:2], rtol=1e-4, atol=1e-5)
