"""transformers.vision.pixtral_patches(_4x), .<model>_patch_merger, .<model>_merged_features(_4x) and, on 4.x,
.mistral3_placeholder_mask: vision-language models on Pixtral's tower (Mistral 3, LightOnOCR, Mistral Large 4).

Pixtral takes a batch of images padded to the largest, with each image's own size in ``image_sizes``; the tower
cuts each image's patches out in a Python loop, and the projector merges 2x2 blocks image by image, so the export
stopped on the sizes (``u1*u3 + u5*u7 > 1``). Proven here:
  * the rewritten tower and the loop-free merger give transformers' own results exactly, for batches of images of
    every shape (portrait, landscape, sizes that leave a partial merge block);
  * the export fails without the rows and, with them, the program matches eager (every leaf) on batches of other
    sizes and numbers of images than traced, padded text included; onnxruntime too.
"""

import importlib

import pytest
import torch

import proving
from autopatch.areas.vision import vlm
from autopatch.models import tiny
from conftest import requires
from proving import Proof

# (model type, class prefix, transformers versions that have it)
MODELS = [
    pytest.param("mistral3", "Mistral3", id="mistral3"),
    pytest.param("lighton_ocr", "LightOnOcr", id="lighton_ocr", marks=requires("transformers>=5")),
    pytest.param("mistral_large4", "MistralLarge4", id="mistral_large4", marks=requires("transformers>=5.13")),
]


def _major():
    import transformers

    return int(transformers.__version__.split(".")[0])


def _flat_positions():
    """Up to 5.12 Pixtral numbers positions row * max_width + column (position_ids_in_meshgrid)."""
    import transformers
    from packaging.version import Version

    return Version(transformers.__version__) < Version("5.13")


def _rows(model_type):
    tower = "transformers.vision.pixtral_patches" + ("_flat_positions" if _flat_positions() else "")
    features = f"transformers.vision.{model_type}_merged_features" + ("_4x" if _major() < 5 else "")
    rows = (tower, f"transformers.vision.{model_type}_patch_merger", features)
    return rows + (("transformers.vision.mistral3_placeholder_mask",) if _major() < 5 else ())


def _build(model_type):
    torch.manual_seed(0)
    return tiny.build(tiny.architecture(model_type, "vlm"))


def _images(sizes, seed):
    """Images of the given (height, width), padded with zeros to the largest of the batch, as the processor pads."""
    g = torch.Generator().manual_seed(seed)
    height, width = max(h for h, _ in sizes), max(w for _, w in sizes)
    pixels = torch.zeros(len(sizes), 3, height, width)
    for i, (h, w) in enumerate(sizes):
        pixels[i, :, :h, :w] = torch.randn(3, h, w, generator=g)
    return pixels, torch.tensor(sizes)


# Sizes in pixels (the tiny tower: 14-pixel patches, at most 56 a side, merged 2x2): odd patch counts leave a
# partial block that the merge drops (a side of one patch has no block at all: transformers' own unfold refuses it).
BATCHES = ([(56, 28), (42, 56), (28, 42)], [(28, 56)], [(56, 56), (28, 56), (56, 42), (42, 42)])


def test_the_tower_gives_transformers_results_exactly():
    from transformers.models.pixtral import modeling_pixtral

    model = _build("mistral3")
    tower = model.model.vision_tower
    forward = type(tower).forward
    rewritten = (vlm.pixtral_patches_loop_free_flat if _flat_positions() else vlm.pixtral_patches_loop_free)(forward)
    assert isinstance(tower, modeling_pixtral.PixtralVisionModel)
    for seed, sizes in enumerate(BATCHES):
        pixels, image_sizes = _images(sizes, seed)
        with torch.no_grad():
            expected = tower(pixels, image_sizes=image_sizes, output_hidden_states=True)
            got = rewritten(tower, pixels, image_sizes=image_sizes, output_hidden_states=True)
        proving.assert_same_outputs(got.last_hidden_state, expected.last_hidden_state, rtol=0, atol=0)
        for g, e in zip(got.hidden_states, expected.hidden_states):
            torch.testing.assert_close(g, e, rtol=0, atol=0)


@pytest.mark.parametrize("model_type,prefix", [pytest.param(*p.values, marks=p.marks, id=p.id) for p in MODELS])
def test_the_merger_gives_transformers_results_exactly(model_type, prefix):
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    model = _build(model_type)
    merger = next(m for m in model.modules() if isinstance(m, getattr(module, f"{prefix}PatchMerger")))
    patch = merger.patch_size
    g = torch.Generator().manual_seed(0)
    for sizes in ([(56, 28), (42, 56), (42, 28), (28, 42)], [(70, 98)], [(28, 28), (98, 42)]):
        tokens = sum((h // patch) * (w // patch) for h, w in sizes)
        features = torch.randn(tokens, merger.merging_layer.in_features // merger.spatial_merge_size ** 2,
                               generator=g)
        with torch.no_grad():
            expected = merger(features, torch.tensor(sizes))
            got = vlm.patch_merger(merger, features, torch.tensor(sizes))
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def _prefill(model, sizes, text, seed):
    """One image per sample, each its own size; as many placeholders as its merged features, ``text`` tokens
    around them, shorter samples left-padded."""
    config = model.config
    g = torch.Generator().manual_seed(seed)
    pixels, image_sizes = _images(sizes, seed)
    with torch.no_grad():
        features = model.model.get_image_features(pixel_values=pixels, image_sizes=image_sizes)
    features = features.pooler_output if hasattr(features, "pooler_output") else features
    tokens = [len(f) for f in features]
    length = max(tokens) + text
    ids = torch.zeros(len(sizes), length, dtype=torch.long)
    mask = torch.zeros(len(sizes), length, dtype=torch.long)
    image_token = config.image_token_id if getattr(config, "image_token_id", None) is not None \
        else config.image_token_index
    for i, n in enumerate(tokens):
        words = torch.randint(20, 100, (text,), generator=g)
        sample = torch.cat([words[:2], torch.full((n,), image_token), words[2:]])
        ids[i, -len(sample):] = sample
        mask[i, -len(sample):] = 1
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels, "image_sizes": image_sizes}


def case(model_type):
    def build_case():
        model = _build(model_type)
        # the padded height and width differ between the two sets too, so that both are dynamic
        traced = _prefill(model, [(56, 28), (42, 42)], 5, 0)
        other = _prefill(model, [(28, 42), (42, 56), (42, 28)], 7, 1)
        runs = [_prefill(model, sizes, 6 + i, 2 + i) for i, sizes in enumerate(BATCHES)]
        return model, traced, other, runs

    return Proof(f"{model_type}/prefill", build_case, rows=_rows(model_type), beside=("all",),
                 fails_with="data-dependent|Ne\\(u|u1\\*u3")


@pytest.mark.parametrize("model_type,prefix", [pytest.param(*p.values, marks=p.marks, id=p.id) for p in MODELS])
def test_export_stops_on_the_image_sizes_without_the_rows(make_agent, model_type, prefix):
    proving.fails_without(case(model_type), make_agent)


@pytest.mark.parametrize("model_type,prefix", [pytest.param(*p.values, marks=p.marks, id=p.id) for p in MODELS])
def test_program_matches_eager_on_images_of_other_sizes_with_the_rows(make_agent, model_type, prefix):
    proving.exports_with(case(model_type), make_agent)


def test_onnx_matches_eager_on_images_of_other_sizes(make_agent, onnx_extra):
    """Converted from the same two sets, onnxruntime runs other batches of image sizes, every leaf compared."""
    model, traced, other, runs = case("mistral3").build()
    make_agent()
    proving.assert_onnx_runs_match(proving.export_onnx(model, traced, other), model, runs[:2], rtol=1e-4, atol=1e-5)
