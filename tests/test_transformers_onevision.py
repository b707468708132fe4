"""transformers.vision.llava_onevision_anyres (and, on 4.x, .llava_onevision_placeholder_mask): LLaVA-OneVision's
images, tiled as LLaVA-NeXT's, then each image's kept grid of tokens shrunk bilinearly when it holds more than
``anyres_max_N`` tiles' worth (``ratio > 1.1``), to a size computed from the data; with ``batch_num_images``, the
images of a multi-image sample are not tiled (their thumbnail and one newline).

transformers does all of it in Python, image by image, from ``image_sizes.tolist()``, so the export stops on the
sizes. Proven here:
  * the loop-free packing equals transformers' ``pack_image_features`` over image sizes of every shape, on both
    sides of the resampling threshold (bit for bit where not resampled, to float32 rounding where resampled), at
    the config class's own settings (its 36 pinpoints, 384-pixel tiles of 14-pixel patches, ``anyres_max_9``) and
    at the tiny model's, untiled images among them; the resampling taps equal F.interpolate's;
  * the export fails without the rows and, with them, the program matches eager on batches whose images have other
    sizes, grids, tile counts and resampled sizes than traced (images crossing the threshold side by side), padded
    text included, with and without ``batch_num_images``; and through ONNX.
"""

import copy

import pytest
import torch

import proving
from autopatch.models import tiny
from autopatch.rewrite import runtime
from proving import Proof

# Heights and widths of every kind: a pixel, one tile, just under/over a tile, past the largest pinpoint.
SIDES = (1, 100, 384, 385, 768, 1000, 2304, 5000)


def _modeling():
    from transformers.models.llava_onevision import modeling_llava_onevision

    return modeling_llava_onevision


def _rows():
    """The rows a prefill needs: the tiling rewrite, and on 4.x the placeholder check."""
    import transformers

    rows = ("transformers.vision.llava_onevision_anyres",)
    if int(transformers.__version__.split(".")[0]) < 5:
        rows += ("transformers.vision.llava_onevision_placeholder_mask",)
    return rows


def _real_config():
    from transformers import LlavaOnevisionConfig

    return LlavaOnevisionConfig()


def _upstream_pack(config, features, sizes, counts, newline):
    holder = type("Holder", (), {"config": config})()  # pack_image_features reads only self.config
    packed, lengths = _modeling().LlavaOnevisionModel.pack_image_features(
        holder, torch.split(features, counts.tolist()), sizes, image_newline=newline,
        vision_aspect_ratio=config.vision_aspect_ratio)
    return torch.cat(packed), lengths


@pytest.mark.parametrize("settings", ["config class", "tiny"])
@pytest.mark.parametrize("untiled", [False, True])
def test_packing_equals_transformers(settings, untiled):
    """Random tile features for a batch of images of all shapes (a third of them resampled): the thumbnail, the
    kept grid (shrunk where upstream shrinks it) and a newline per row, in transformers' order, and the same
    lengths as its ``pack_image_features``; the images not resampled bit for bit, the resampled ones to float32
    rounding (the kernel's order of operations depends on the CPU it dispatches to). ``untiled``: every other image
    belongs to a multi-image sample (one tile)."""
    config = _real_config() if settings == "config class" else tiny.tiny_config("llava_onevision")
    tile = config.vision_config.image_size
    scale = tile / 384
    sizes = torch.tensor([[max(1, int(h * scale)), max(1, int(w * scale))] for h in SIDES for w in SIDES])
    alone = torch.arange(len(sizes)) % 2 == 0 if untiled else None
    counts = runtime.onevision_tile_counts(sizes, config.image_grid_pinpoints, tile, alone)
    assert counts.tolist() == [
        _modeling().image_size_to_num_patches(s, config.image_grid_pinpoints, tile) if a else 1
        for s, a in zip(sizes, alone if untiled else [True] * len(sizes))]
    side = tile // config.vision_config.patch_size
    g = torch.Generator().manual_seed(0)
    features = torch.randn(int(counts.sum()), side * side, 8, generator=g)
    newline = torch.randn(8, generator=g)
    expected, expected_lengths = _upstream_pack(config, features, sizes, counts, newline)
    packed, lengths = runtime.onevision_pack(features, sizes, counts, config, newline, config.vision_aspect_ratio)
    assert lengths.tolist() == expected_lengths.tolist()
    torch.testing.assert_close(packed[0], expected, rtol=1e-6, atol=1e-6)
    tiled = counts > 1
    _, unshrunk = runtime.anyres_pack(features, sizes[tiled], counts[tiled], config, newline)
    resampled = torch.zeros_like(tiled)
    resampled[tiled] = lengths[tiled] < unshrunk
    same = torch.repeat_interleave(~resampled, lengths)
    assert torch.equal(packed[0][same], expected[same])
    # the regime that matters is there: images resampled and not
    assert resampled.sum() >= 5 and (~resampled).sum() >= 5


@pytest.mark.parametrize("in_size,out_size", [(100, 77), (135, 123), (162, 99), (243, 100), (57, 41), (24, 12)])
def test_resampling_taps_equal_interpolate(in_size, out_size):
    """Each output column's two source columns and weights reproduce F.interpolate's bilinear resampling of an
    identity (the weight every input has in every output), to float32 rounding."""
    identity = torch.eye(in_size).reshape(1, in_size, 1, in_size)
    expected = torch.nn.functional.interpolate(identity, [1, out_size], mode="bilinear")[0, :, 0, :]
    index = torch.arange(out_size)
    first, second, weight0, weight1 = runtime._linear_taps(index, torch.tensor(in_size), torch.tensor(out_size))
    weights = torch.zeros(in_size, out_size)
    weights[first, index] += weight0
    weights[second, index] += weight1
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-6)


def _prefill(model, samples, text, seed):
    """A prefill of ``samples``, each a list of image sizes (height, width): every image's tiles padded to the
    most any image has (as the processor pads them), its placeholders as many as its packed features, ``text``
    tokens around each sample's images, the shorter samples left-padded. A sample of several images passes
    ``batch_num_images`` (upstream then does not tile them)."""
    config = model.config
    g = torch.Generator().manual_seed(seed)
    tile = config.vision_config.image_size
    image_sizes = torch.tensor([size for sample in samples for size in sample])
    extra = {}
    alone = None
    if any(len(sample) > 1 for sample in samples):
        extra["batch_num_images"] = torch.tensor([len(sample) for sample in samples])
        alone = runtime.onevision_alone(image_sizes, extra["batch_num_images"])
    counts = runtime.onevision_tile_counts(image_sizes, config.image_grid_pinpoints, tile, alone)
    pixels = torch.zeros(len(image_sizes), int(counts.max()), 3, tile, tile)
    for i, count in enumerate(counts.tolist()):
        pixels[i, :count] = torch.randn(count, 3, tile, tile, generator=g)
    with torch.no_grad():
        out = model.model.get_image_features(pixel_values=pixels, image_sizes=image_sizes, **extra)
    features = out.pooler_output if hasattr(out, "pooler_output") else out
    tokens = iter(len(f) for f in features)
    rows = []
    for sample in samples:
        words = torch.randint(3, 100, (text,), generator=g)
        pieces = [words[:2]]
        for _ in sample:
            pieces.append(torch.full((next(tokens),), _image_token(config)))
        rows.append(torch.cat(pieces + [words[2:]]))
    length = max(len(row) for row in rows)
    ids = torch.full((len(samples), length), getattr(config, "pad_token_id", None) or 0)
    mask = torch.zeros(len(samples), length, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, -len(row):] = row
        mask[i, -len(row):] = 1
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels, "image_sizes": image_sizes, **extra}


def _image_token(config):
    token = getattr(config, "image_token_id", None)
    return config.image_token_index if token is None else token


def _tiny_model():
    """The catalogue's tiny LLaVA-OneVision: 56-pixel tiles of 14-pixel patches (4 x 4 tokens), the config class's
    pinpoint layout (up to 6 x 6 tiles) scaled to them, ``anyres_max_9``: a grid of more than about 174 tokens is
    resampled: a 168 x 224 image (12 x 16 tokens) is, a 168 x 168 one (12 x 12) is not."""
    return tiny.build(tiny.architecture("llava_onevision", "vlm"))


def case(multi_image: bool):
    def build_case():
        model = _tiny_model()
        if multi_image:  # a sample of two untiled images beside samples of one tiled image
            traced = _prefill(model, [[[40, 100], [56, 56]], [[168, 224]]], 5, 0)
            other = _prefill(model, [[[150, 30]], [[100, 100], [20, 160], [60, 60]], [[224, 224]]], 7, 1)
            runs = [_prefill(model, [[[224, 168]], [[300, 40], [56, 57]], [[111, 112]], [[190, 190]]], 6, 2),
                    _prefill(model, [[[3, 200], [168, 168]]], 4, 3)]
        else:  # one image per sample, resampled (168 x 224 and larger here) or not, side by side
            traced = _prefill(model, [[[40, 100]], [[168, 224]]], 5, 0)
            other = _prefill(model, [[[150, 30]], [[100, 100]], [[224, 224]]], 7, 1)
            runs = [_prefill(model, [[[224, 168]], [[300, 40]], [[3, 200]], [[200, 120]]], 6, 2),
                    _prefill(model, [[[168, 168]]], 4, 3), _prefill(model, [[[230, 160]], [[56, 56]]], 3, 4)]
        return model, traced, other, runs

    name = "llava_onevision/prefill" + (" (batch_num_images)" if multi_image else "")
    return Proof(name, build_case, rows=_rows(), beside=("all",), fails_with="data-dependent|IntTrueDiv|Ne\\(u")


@pytest.mark.parametrize("multi_image", [False, True])
def test_export_stops_on_the_image_sizes_without_the_rows(make_agent, multi_image):
    proving.fails_without(case(multi_image), make_agent)


@pytest.mark.parametrize("multi_image", [False, True])
def test_program_matches_eager_on_images_of_other_sizes_with_the_rows(make_agent, multi_image):
    proving.exports_with(case(multi_image), make_agent)


def test_the_runs_cross_the_resampling_threshold():
    """The proof's run sets hold images upstream resamples and images it does not, in the same batch."""
    model, traced, _, runs = case(False).build()
    config, side = model.config, 4
    for inputs in (traced, runs[0]):
        counts = runtime.onevision_tile_counts(inputs["image_sizes"], config.image_grid_pinpoints, 56, None)
        features = torch.zeros(int(counts.sum()), side * side, 1)
        _, lengths = runtime.onevision_pack(features, inputs["image_sizes"], counts, config, None, "anyres_max_9")
        _, unshrunk = runtime.anyres_pack(features, inputs["image_sizes"], counts, config, None)
        assert (lengths < unshrunk).any() and (lengths == unshrunk).any()


def test_eager_is_unchanged_outside_an_export(make_agent):
    """The rows act only while the thread exports: eager features are transformers' per-image list."""
    make_agent()
    model = _tiny_model()
    inputs = _prefill(model, [[[40, 100]], [[336, 300]]], 5, 0)
    with torch.no_grad():
        out = model.model.get_image_features(pixel_values=inputs["pixel_values"], image_sizes=inputs["image_sizes"])
    features = out.pooler_output if hasattr(out, "pooler_output") else out
    assert len(features) == 2  # one element per image, as transformers returns them
    with torch.no_grad():
        copy.deepcopy(model)(**inputs)


def test_onnx_matches_eager_on_images_of_other_sizes(make_agent, onnx_extra):
    """Converted from the same two sets, onnxruntime runs batches of other image shapes (resampled and not),
    every leaf compared."""
    model, traced, other, runs = case(False).build()
    make_agent()
    proving.assert_onnx_runs_match(proving.export_onnx(model, traced, other), model, runs[:2], rtol=1e-4, atol=1e-5)
