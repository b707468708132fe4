"""transformers.vision.llava_*: a Llava prefill with pixel_values and a dynamic image batch.

5.x: get_image_features' list(image_features) specialises the image batch. 4.x: the same, and
get_placeholder_mask's Python comparison of a data-dependent size stops the export first. 5.0-5.11: the same, and
get_placeholder_mask's check on the size of a boolean selection trips torch's bounds. Fails without the
patches, exports with them and matches eager on other sizes, and eager is unchanged. The same for the VLMs that
share those methods (Gemma 3, Llava's family, Idefics), in strict mode too; the models are autopatch.models.vlms'."""

import copy
import dataclasses
from functools import partial

import pytest
import torch
import transformers
from packaging.version import Version

import autopatch
import proving
from autopatch import registry
from autopatch.dynamic_shapes import fit_to_signature
from autopatch.areas.vision.rows import (LLAVA_MESSAGE, PLACEHOLDER_MASK_4X_MORE, PLACEHOLDER_MASK_MODELS,
                                         PLACEHOLDER_MESSAGE_MODELS)
from autopatch.models import tiny, vlms
from conftest import requires
from proving import Proof

TF4 = Version(transformers.__version__) < Version("5")
#: transformers 5.0-5.11: get_placeholder_mask checks inputs_embeds[mask].numel() (the *_placeholder_mask_5_11 rows).
SELECTION_CHECK = Version("5") <= Version(transformers.__version__) < Version("5.12")
SELECTION_ERROR = "not a subset of src_bound"
DATA_DEPENDENT = "Could not guard on data-dependent expression"
CONSTANT = "specialized it to be a constant"
#: What the program's runtime check says to placeholders that do not match the image features.
REFUSED = "Runtime assertion failed|do not match"
#: transformers 5.3-5.12: Idefics' get_image_features is still 4.57's (its 4.x row takes it), Llava's not yet 5.23's.
EARLY_5 = Version("5") <= Version(transformers.__version__) < Version("5.13")
FEATURES = "transformers.vision.llava_image_features_5_12" if EARLY_5 else "transformers.vision.llava_image_features"
MASK = "transformers.vision.llava_placeholder_mask" + ("_5_11" if SELECTION_CHECK else "")

# What the export needs: 5.12 on only the image-features patch; 4.57.6 and 5.3.0 both (each alone still fails).
NEEDED = (FEATURES, MASK) if TF4 or SELECTION_CHECK else (FEATURES,)
# The error without the rest of NEEDED, by the rows of it selected.
if TF4:  # transformers 4.57.6
    WITHOUT = {(): DATA_DEPENDENT, (FEATURES,): DATA_DEPENDENT, (MASK,): CONSTANT}
elif SELECTION_CHECK:  # transformers 5.3.0
    WITHOUT = {(): "Constraints violated", (FEATURES,): SELECTION_ERROR, (MASK,): "Constraints violated"}
else:  # transformers 5.23.0 and 5.12.1
    WITHOUT = {(): CONSTANT}


def llava_sets():
    """Traced with 2 images, the other set 3, the third 4 (one image per sample), each with its own text length."""
    return vlms.prefill("llava", 2, 5), vlms.prefill("llava", 3, 7, seed=1), vlms.prefill("llava", 4, 3, seed=2)


def llava_case(selected=()):
    """Llava's prefill; ``selected``: the rows of NEEDED given in both halves, the others are the case's."""
    def build():
        traced, other, third = llava_sets()
        return vlms.build_llava(), traced, other, [other, third]

    return Proof("llava/prefill", build, rows=tuple(row for row in NEEDED if row not in selected),
                 fails_with=WITHOUT[selected], beside=("pytree", *selected), tolerance=dict(rtol=1e-5, atol=1e-5))


@pytest.mark.parametrize("selected", list(WITHOUT), ids=lambda rows: "+".join(rows) or "none")
def test_export_fails_without_the_patches(make_agent, selected):
    proving.fails_without(llava_case(selected), make_agent)


def test_exported_prefill_matches_eager_on_other_image_batches(make_agent):
    traced, other, _ = llava_sets()
    shapes = autopatch.guess_dynamic_shapes(traced, other)
    assert shapes["pixel_values"] == {0: torch.export.Dim.DYNAMIC}  # the image batch, and only it
    program, _ = proving.exports_with(llava_case(), make_agent)  # at 3 and 4 images, other text lengths
    used = autopatch.last_export_report()["patches"]
    assert all(used.get(patch_id) == 1 for patch_id in NEEDED)
    # The runtime check that replaced the Python comparison still rejects mismatched placeholders.
    bad = dict(other, input_ids=other["input_ids"].clone())
    bad["input_ids"][:, 1] = 0  # one placeholder less per sample than image features
    with pytest.raises(RuntimeError, match=REFUSED):
        program.module()(**bad)


def test_eager_is_unchanged_and_the_features_concatenate_the_same(make_agent):
    model = vlms.build_llava()
    llava = model.model
    _, other, _ = llava_sets()
    with torch.no_grad():
        before = model(**other).logits
        reference = llava.get_image_features(other["pixel_values"])
    own = make_agent(registry.PATCHES, ",".join(("pytree", *NEEDED)))
    with torch.no_grad():
        assert torch.equal(model(**other).logits, before)  # outside export: the originals
    own.disable()
    from autopatch.areas.vision import vlm as transformers_vision

    features = transformers_vision.llava_image_features
    if EARLY_5:  # a rewrite of the version's own source
        features = transformers_vision.llava_features_one_tensor(type(llava).get_image_features)
    with torch.no_grad():
        replaced = features(llava, other["pixel_values"])
    if not TF4:
        reference, replaced = reference.pooler_output, replaced.pooler_output
    assert len(reference) == 3 and len(replaced) == 1
    assert torch.equal(torch.cat(replaced, dim=0), torch.cat(reference, dim=0))
    if TF4 or SELECTION_CHECK:
        embeds = llava.get_input_embeddings()(other["input_ids"])
        features = torch.cat(reference, dim=0)
        placeholder_mask = transformers_vision.llava_placeholder_mask
        if SELECTION_CHECK:
            placeholder_mask = transformers_vision.placeholder_check_on_token_count(type(llava).get_placeholder_mask)
        mask = placeholder_mask(llava, other["input_ids"], embeds, features)
        assert torch.equal(mask, llava.get_placeholder_mask(other["input_ids"], embeds, features))
        with pytest.raises(Exception, match="do not match"):  # the rewritten check still refuses a mismatch
            placeholder_mask(llava, other["input_ids"], embeds, features[1:])


# --- Gemma 3's VLM, Llava's family and Fuyu: each case traced at 2 images, run at 1 and 4 -------------------------

GEMMA3_MASK = "transformers.vision.gemma3_placeholder_mask" + ("_5_11" if SELECTION_CHECK else "")


def prefill_case(name, model, prefill, rows, fails_with):
    """A one-image-per-sample prefill: ``prefill(batch, text_len, seed)``'s sets for ``model()``."""
    def build():
        return model(), prefill(2, 5, 1), prefill(3, 7, 2), [prefill(1, 3, 3), prefill(4, 8, 4)]

    return Proof(f"{name}/prefill", build, rows=rows, fails_with=fails_with)


def gemma3_case():
    return prefill_case("gemma3", vlms.build_gemma3, vlms.gemma3_prefill, (GEMMA3_MASK,),
                        SELECTION_ERROR if SELECTION_CHECK else DATA_DEPENDENT)


def vlm_case(name):
    """Llava's family before 5.12: the shared placeholder mask (Fuyu on 4.x: its image loop too)."""
    if SELECTION_CHECK:
        kinds, error = ("placeholder_mask_5_11",), SELECTION_ERROR
    else:
        kinds = ("placeholder_mask", "image_features") if name == "fuyu" else ("placeholder_mask",)
        error = DATA_DEPENDENT
    return prefill_case(name, partial(vlms.build, name), partial(vlms.prefill, name),
                        tuple(f"transformers.vision.{name}_{kind}" for kind in kinds), error)


def assert_refuses_missing_placeholders(program, bad):
    with pytest.raises(RuntimeError, match=REFUSED):
        program.module()(**bad)


@pytest.mark.requires("transformers<5.12")
def test_gemma3_vlm_needs_the_placeholder_patch_before_5_12(make_agent):
    program, _ = proving.prove(gemma3_case(), make_agent)
    bad = vlms.gemma3_prefill(2, 6, 5)
    bad["input_ids"][:, 1] = 0  # one placeholder less per image: the runtime check still refuses it
    assert_refuses_missing_placeholders(program, bad)


@pytest.mark.requires("transformers>=5.12")
def test_gemma3_vlm_exports_with_the_cache_registration_alone_from_5_12(make_agent):
    proving.exports_with(dataclasses.replace(gemma3_case(), rows=()), make_agent)


@pytest.mark.requires("transformers<5.12")
@pytest.mark.parametrize("name", vlms.NAMES)
def test_vlm_placeholder_mask_fails_without_and_matches_eager_with_it(make_agent, name):
    program, _ = proving.prove(vlm_case(name), make_agent)
    bad = vlms.prefill(name, 2, 6, 5)
    bad["input_ids"][bad["input_ids"] == vlms.IMAGE_TOKEN] = 0  # no placeholders left: the runtime check refuses
    assert_refuses_missing_placeholders(program, bad)


@pytest.mark.requires("transformers<5")
def test_fuyu_needs_its_image_features_patch_too(make_agent):
    case = vlm_case("fuyu")
    mask, features = case.rows
    built = case.build()
    proving.fails_without(dataclasses.replace(case, rows=(features,), beside=("pytree", mask), fails_with=CONSTANT),
                          make_agent, built)
    model = built[0]
    original = transformers.models.fuyu.modeling_fuyu.FuyuModel.get_image_features
    from autopatch.areas.vision.vlm import fuyu_image_features

    patches = vlms.prefill("fuyu", 3, 4, 6)["image_patches"]
    with torch.no_grad():  # the one-element list concatenates to the per-image loop's result
        one_list = fuyu_image_features(model.model, patches)
        assert torch.equal(torch.cat(original(model.model, patches)), torch.cat(one_list))


# --- 5.x Idefics2 / Idefics3 / SmolVLM: several images per sample -----------------------------------------------

def _idefics_rows(name):
    """What each version needs: 5.23 one rewrite of get_image_features; 5.12 (loop-free positions already) the mask
    reshape of 4.57's get_image_features; 4.57 the loop-free patch positions, the mask reshape and, per model,
    Idefics2's full-mask test or SmolVLM's merger check."""
    if EARLY_5:
        return (f"transformers.vision.{name}_image_features_4x",)
    if not TF4:
        return (f"transformers.vision.{name}_image_features",)
    extra = {"idefics2": ("transformers.vision.idefics2_full_patch_mask",),
             "smolvlm": ("transformers.vision.smolvlm_merger_check",)}.get(name, ())
    return (f"transformers.vision.{name}_patch_positions", f"transformers.vision.{name}_image_features_4x", *extra)


def idefics_case(name):
    """Traced at 2 and 3 images per sample; run at other batches, text lengths and images per sample (one image:
    the traced view of the pixel mask would have refused it)."""
    def build():
        runs = [vlms.idefics_prefill(1, 3, 1, 3), vlms.idefics_prefill(4, 8, 2, 4)]
        return vlms.build_idefics(name), vlms.idefics_prefill(2, 5, 2, 1), vlms.idefics_prefill(3, 7, 3, 2), runs

    return Proof(f"{name}/prefill", build, rows=_idefics_rows(name), fails_with=DATA_DEPENDENT if TF4 else CONSTANT)


# SmolVLM on 5.x returns its per-sample image features in the output: not shipped there (see the registry).
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.requires("transformers<5")) if n == "smolvlm"
                                  else n for n in vlms.IDEFICS])
def test_idefics_fails_without_its_rows_and_matches_eager_with_them(make_agent, name):
    case = idefics_case(name)
    if EARLY_5:
        # 5.3-5.12 export without the rows, but the program keeps the traced view of the pixel mask and refuses the
        # first run set's one image per sample.
        case = dataclasses.replace(case, fails_with="Guard failed", fails_at_run=True)
    proving.prove(case, make_agent)  # every output compared, image features included


@pytest.mark.requires("transformers<5")
@pytest.mark.parametrize("name", vlms.IDEFICS)
def test_each_idefics_row_is_needed_on_4x(make_agent, name):
    case = idefics_case(name)
    model, traced, other, _ = case.build()
    # The mask reshape is needed only for another number of images per sample, which the program refuses.
    built = model, traced, other, [vlms.idefics_prefill(2, 4, 1, 7)]
    for missing in case.rows:
        without = dataclasses.replace(case, rows=(missing,), beside=("pytree", *(r for r in case.rows if r != missing)),
                                      fails_with="data-dependent|specialized|Guard failed", fails_at_run=True)
        proving.fails_without(without, make_agent, built)


# --- SAM: measured, nothing to patch ------------------------------------------------------------------------------

def test_sam_mask_decoder_needs_no_patch(agent):
    """Issue 5 asked whether SAM's mask decoder needs a rewrite: measured on 4.57.6 and 5.23.0, it exports with
    no patch (dynamic batch and number of points) and matches eager. This keeps that claim checked."""
    assert not agent.active
    model = vlms.build_sam()
    program = proving.export(model, vlms.sam_inputs(2, 3, 0), vlms.sam_inputs(3, 5, 1))
    for batch, points, seed in ((4, 2, 2), (1, 7, 3)):
        inputs = vlms.sam_inputs(batch, points, seed)
        with torch.no_grad():
            proving.assert_same_outputs(program.module()(**inputs), model(**inputs))  # scores, masks and the rest


# --- strict=True (5.12+): the check's eagerly formatted message, and output hooks installed on a first call ------

HOOKS_ROW = "transformers.output_capturing.hooks_before_trace"
#: name: (the model, its prefill(batch, text_len, seed)).
STRICT_VLMS = {"llava": (vlms.build_llava, partial(vlms.prefill, "llava")),
               "gemma3": (vlms.build_gemma3, vlms.gemma3_prefill),
               "paligemma": (partial(vlms.build, "paligemma"), vlms.paligemma_padded_prefill),
               **{name: (partial(vlms.build, name), partial(vlms.prefill, name))
                  for name in vlms.NAMES if name != "paligemma"}}


def strict_case(name, row, fails_with, runs=((1, 3, 3), (4, 8, 4))):
    """``name``'s prefill exported strict, every default patch beside ``row``; run at ``runs`` (batch, text length,
    seed)."""
    model, prefill = STRICT_VLMS[name]

    def build():
        return model(), prefill(2, 5, 1), prefill(3, 7, 2), [prefill(*sizes) for sizes in runs]

    return Proof(f"{name}/prefill-strict", build, rows=(row,), fails_with=fails_with, beside=("all",), strict=True)


#: Llava's 5.12+ get_placeholder_mask is the source of 15 models (LLAVA_MESSAGE), and the row rewrites it the same
#: way in each (the fingerprints, checked at install, say the code is the same). What a rewrite computes is proven
#: whole, both halves, on four of them built four ways (Llava, Gemma 3, PaliGemma's padded prefill, the catalogue's
#: DeepSeek-VL). Whether the row is *needed* depends on the model around the same code (DeepSeek-VL-Hybrid's 5.12.1
#: strict prefill exports without it), so on every other model of that source the export is shown to fail without
#: it. Models of a source of their own (Llama 4, Video-LLaVA, Chameleon, T5Gemma 2, DeepSeek-VL-Hybrid) are proven
#: whole.
MESSAGE_PROVEN_WHOLE = ("llava", "gemma3", "paligemma", "deepseek_vl")


def _prove_message_row(case, name, make_agent):
    """Both halves of ``case``, or only the need where the row's code is proven whole on another model."""
    row = proving.row(case.rows[0])
    if row.fingerprints == LLAVA_MESSAGE and name not in MESSAGE_PROVEN_WHOLE:
        proving.fails_without(case, make_agent)
    else:
        proving.prove(case, make_agent)


def test_llavas_message_source_is_proven_whole_on_models_of_that_source():
    """The models the split above relies on carry Llava's fingerprints, and the rest of that source are tested
    below, each at least for its need."""
    shared = {r.model for r in PLACEHOLDER_MESSAGE_MODELS if r.fingerprints == LLAVA_MESSAGE}
    assert set(MESSAGE_PROVEN_WHOLE) <= shared and len(shared) == 15, shared
    tested = set(STRICT_VLMS) | {p.values[0] for p in MESSAGE_ONLY}
    assert {r.model for r in PLACEHOLDER_MESSAGE_MODELS} == tested


@pytest.mark.requires("transformers>=5.12")
@pytest.mark.parametrize("name", list(STRICT_VLMS))
def test_strict_vlm_prefill_needs_the_lazy_placeholder_message(make_agent, name):
    """Nine VLMs share one 5.12+ get_placeholder_mask whose check formats the feature count into its message
    before it runs: Dynamo fixes the image batch to do so. With the row the strict program takes other image
    batches and text lengths, every output leaf as eager's (MESSAGE_PROVEN_WHOLE)."""
    _prove_message_row(strict_case(name, f"transformers.vision.{name}_placeholder_message", CONSTANT), name,
                       make_agent)


#: The other VLMs with such a 5.12+ check (Aria, DeepSeek-VL, Llama 4...), built by the tiny catalogue.
MESSAGE_ONLY = [pytest.param(row.model, marks=pytest.mark.requires(row.requires), id=row.model)
                for row in PLACEHOLDER_MESSAGE_MODELS if row.model not in dict(PLACEHOLDER_MASK_MODELS)]


def catalogue_case(name, row, fails_with, strict=False):
    """``name``'s prefill on the tiny catalogue's model with ``row`` (every default row beside)."""
    return proving.catalogue_prefill(name, (row,), fails_with, strict=strict)


@pytest.mark.parametrize("name", MESSAGE_ONLY)
def test_strict_prefill_of_more_vlms_needs_the_lazy_placeholder_message(make_agent, name):
    """The same row on the catalogue's tiny model, strict (MESSAGE_PROVEN_WHOLE)."""
    _prove_message_row(catalogue_case(name, f"transformers.vision.{name}_placeholder_message", CONSTANT, strict=True),
                       name, make_agent)


@pytest.mark.requires("transformers<5")
@pytest.mark.parametrize("name", [*(row.model for row in PLACEHOLDER_MASK_4X_MORE), "video_llava", "chameleon"])
def test_more_4x_vlms_need_llavas_placeholder_mask_row(make_agent, name):
    """Aria and Florence-2 share Llava's 4.x get_placeholder_mask, DeepSeek-VL, Janus and LFM2-VL the same check laid
    out otherwise (Video-LLaVA's for its videos too, Chameleon's on its vocabulary mapping's image token): its Python
    comparison of the placeholder count stops the export; with the row the catalogue's model matches eager at other
    image batches."""
    proving.prove(catalogue_case(name, f"transformers.vision.{name}_placeholder_mask", DATA_DEPENDENT), make_agent)


@pytest.mark.requires("transformers>=5.13")
@pytest.mark.parametrize("name", ["granite_docling", "hyperclovax_vision_v2"])
def test_features_split_by_tolist_fail_without_their_row_and_match_eager_with_it(make_agent, name):
    """Granite-Docling splits its tiles' features per sample, HyperCLOVAX-Vision V2 per image, by `.tolist()`
    sizes: the batch (the image count) is fixed without the row; with it other batches match eager."""
    proving.prove(catalogue_case(name, f"transformers.vision.{name}_features", "Constraints violated"), make_agent)


def _emu3_cropped(model, inputs, shrink):
    """``inputs`` with image ``i`` cropped by ``shrink[i]`` (rows, columns) of VQ tokens, as an Emu3 processor
    sizes a smaller image inside the padded pixel batch: its size in pixels, and its placeholders (rows x
    (columns + 1), contiguous) cut to match, the rest of the row text."""
    inputs = copy.deepcopy(inputs)
    factor = model.model.vqmodel.vision_spatial_factor
    for image, (rows, columns) in enumerate(shrink):
        height, width = (int(v) // factor for v in inputs["image_sizes"][image])
        inputs["image_sizes"][image] = torch.tensor([(height - rows) * factor, (width - columns) * factor])
        places = (inputs["input_ids"][image] == model.config.image_token_id).nonzero().flatten()
        inputs["input_ids"][image, places[(height - rows) * (width - columns + 1):]] = 5
    return inputs


@pytest.mark.requires("transformers>=5.13")  # the row's versions
def test_emu3_image_tokens_fail_without_their_row_and_match_eager_with_it(make_agent):
    """Emu3 crops each image's VQ codes to its own size in a loop of float sizes: the export stops without the
    row; with it other batches match eager, and so do runs whose images are smaller than the pixel batch (cropped
    rows and columns, fewer placeholders)."""
    case = catalogue_case("emu3", "transformers.vision.emu3_image_tokens", DATA_DEPENDENT)

    def build():
        model, traced, other, runs = case.build()
        cropped = [_emu3_cropped(model, runs[-1], [(1, 0), (0, 1), (1, 2)]),
                   _emu3_cropped(model, runs[0], [(2, 3)])]
        return model, traced, other, [*runs, *cropped]

    proving.prove(dataclasses.replace(case, build=build), make_agent)


@pytest.mark.requires("transformers>=5.13")
def test_emu3_image_tokens_equal_upstream_on_cropped_images():
    """The loop-free tokens' embeddings against upstream's per-image crops, image by image sizes differing."""
    from autopatch.areas.vision.vlm import emu3_image_tokens_masked
    from autopatch.models import tiny

    arch = tiny.architecture("emu3", "vlm")
    model = tiny.build(arch)
    inputs = _emu3_cropped(model, tiny.inputs(model, arch, "prefill", 2), [(0, 0), (1, 0), (0, 3), (2, 1)])
    upstream = type(model.model).get_image_features
    with torch.no_grad():
        expected = upstream(model.model, inputs["pixel_values"], inputs["image_sizes"]).pooler_output
        got = emu3_image_tokens_masked(upstream, model.model, inputs["pixel_values"], inputs["image_sizes"])
    assert len(expected) == 4 and torch.equal(torch.cat(expected), torch.cat(got.pooler_output))


def _naflex_grids(model, inputs, grids):
    """``inputs`` with image ``i`` given the patch grid ``grids[i]`` (rows, columns: even, at most the padded
    length) inside the padded patch batch, as SigLIP 2's processor lays out a smaller or oblong image: its
    spatial shape, a pixel mask of its first rows x columns patches, and its placeholders cut to the merged
    tokens (contiguous), the rest of the row text."""
    inputs = copy.deepcopy(inputs)
    factor = model.config.downsample_factor
    for image, (rows, columns) in enumerate(grids):
        inputs["spatial_shapes"][image] = torch.tensor([rows, columns])
        inputs["pixel_attention_mask"][image] = torch.arange(inputs["pixel_attention_mask"].shape[1]) < rows * columns
        places = (inputs["input_ids"][image] == model.config.image_token_id).nonzero().flatten()
        inputs["input_ids"][image, places[rows * columns // factor**2:]] = 5
    return inputs


#: LFM2-VL's rows, each where it applies: 5.13+'s, and 4.x's (the same replacements for 4.x's sources; its 4.x
#: placeholder check is Llava's row, test_more_4x_vlms_need_llavas_placeholder_mask_row).
LFM2_VL_ROWS = (
    *(pytest.param(row, marks=requires("transformers>=5.13"))
      for row in ("transformers.vision.siglip2_positions", "transformers.vision.lfm2_vl_features")),
    *(pytest.param(row, marks=requires("transformers<5"))
      for row in ("transformers.vision.siglip2_positions_4x", "transformers.vision.lfm2_vl_features_4x")),
)


@pytest.mark.parametrize("row", LFM2_VL_ROWS)
def test_lfm2_vl_fails_without_each_row_and_matches_eager_with_them(make_agent, row):
    """LFM2-VL loops over its images twice (SigLIP 2's position resampling, its own block folding): without either row
    the image count is fixed (the export says so, or, without the folding row, the program refuses other batches:
    'Guard failed'; 4.x's resampling reads its sizes as data); with both, other batches match eager, and so do images
    with other grids inside the padded patch batch (2 x 4, 4 x 2, 2 x 2 of the traced 4 x 4)."""
    case = dataclasses.replace(catalogue_case("lfm2_vl", row, "Constraints violated|Guard failed|" + DATA_DEPENDENT),
                               fails_at_run=True)

    def build():
        model, traced, other, runs = case.build()
        oblong = [_naflex_grids(model, runs[-1], [(2, 4), (4, 2), (2, 2)]), _naflex_grids(model, runs[0], [(2, 2)])]
        return model, traced, other, [*runs, *oblong]

    proving.prove(dataclasses.replace(case, build=build, beside=("all",)), make_agent)


@pytest.mark.parametrize("version", [pytest.param("5.13+", marks=requires("transformers>=5.13")),
                                     pytest.param("4.x", marks=requires("transformers<5"))])
def test_siglip2_positions_equal_upstream_over_random_grids(version):
    """The loop-free resampling against SigLIP 2's own (``version``'s, where a row applies) over random grids
    (shrunk, enlarged, oblong, one row or one column) and padded lengths, for grids of 16 (the tiny tower's) and 5
    positions a side."""
    from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings

    from autopatch.areas.vision.naflex import siglip2_positions_resampled

    upstream = Siglip2VisionEmbeddings.resize_positional_embeddings
    g = torch.Generator().manual_seed(0)
    for side in (16, 5):
        table = torch.randn(side, side, 12, generator=g)
        for _ in range(40):
            shapes = torch.randint(1, 33, (int(torch.randint(1, 5, (1,), generator=g)), 2), generator=g)
            length = int((shapes[:, 0] * shapes[:, 1]).max()) + int(torch.randint(0, 5, (1,), generator=g))
            torch.testing.assert_close(siglip2_positions_resampled(upstream, table, shapes, length),
                                       upstream(table, shapes, length), rtol=1e-5, atol=1e-5)


@pytest.mark.requires("transformers>=5.12")  # the row's versions
def test_ovis2_indicators_fail_without_their_row_and_match_eager_with_it(make_agent):
    """Ovis2 writes its visual indicator tokens' embeddings under a branch on the data: the export stops without
    the row; with it other image batches and texts match eager."""
    case = catalogue_case("ovis2", "transformers.vision.ovis2_indicators", DATA_DEPENDENT)

    def with_indicators(model, inputs, seed):
        """Indicator tokens (Ovis2's processor puts them around images) on text positions, as the catalogue's text
        has none: two in every sample but the first, which keeps none (the case upstream's branch skips)."""
        inputs = copy.deepcopy(inputs)
        ids = inputs["input_ids"]
        indicators = torch.tensor(model.model.visual_indicator_token_ids)
        g = torch.Generator().manual_seed(seed)
        for row in range(1, ids.shape[0]):
            text = (ids[row] != model.config.image_token_id).nonzero().flatten()
            chosen = text[torch.randperm(len(text), generator=g)[:2]]
            ids[row, chosen] = indicators[torch.randint(len(indicators), (len(chosen),), generator=g)]
        return inputs

    def build():
        model, traced, other, runs = case.build()
        return (model, with_indicators(model, traced, 0), with_indicators(model, other, 1),
                [with_indicators(model, run, 2 + k) for k, run in enumerate(runs)])

    proving.prove(dataclasses.replace(case, build=build), make_agent)


def _gemma4_short_image(inputs, tokens):
    """Sample 0's image 6 patches wide and 3 tall (the catalogue's are 6 x 6): its last 18 patches padding, as the
    processor pads a wide image (positions -1, zero pixels), and ``tokens`` image tokens in the text instead of
    the full image's (the rest become text tokens)."""
    inputs = copy.deepcopy(inputs)
    inputs["image_position_ids"][0, 18:] = -1
    inputs["pixel_values"][0, 18:] = 0
    image = (inputs["mm_token_type_ids"][0] == 1).nonzero().flatten()
    inputs["input_ids"][0, image[tokens:]] = 7  # a text token where the image tokens it no longer has were
    inputs["mm_token_type_ids"][0, image[tokens:]] = 0
    return inputs


@pytest.mark.requires("transformers>=5.13")
@pytest.mark.parametrize("name", ["gemma4", "gemma4_unified"])
def test_gemma4_features_fail_without_their_row_and_match_eager_with_it(make_agent, name):
    """Gemma 4 (and Gemma 4 Unified's tower-free embedder) split the pooled image features per image by
    `.tolist()` of each image's non-padding patch count: the number of images is fixed without the row; with it
    other image batches match eager, also when an image has padding patches (fewer tokens than the others)."""
    case = catalogue_case(name, f"transformers.vision.{name}_features", "Constraints violated")

    def build():
        model, traced, other, runs = case.build()
        tokens = 2 if name == "gemma4" else 18  # the short image's: pooled 3 x 3 per token, or one per patch
        return model, traced, other, [*runs, *(_gemma4_short_image(run, tokens) for run in runs)]

    proving.prove(dataclasses.replace(case, build=build), make_agent)


@pytest.mark.requires("transformers>=5.12")
def test_strict_export_of_a_model_never_called_before(make_agent):
    """A Llava exported straight after it is built: its vision tower installs its output hooks on its first call,
    under a lock Dynamo cannot enter. The row installs them when the export starts, as that first call would."""
    case = strict_case("llava", HOOKS_ROW, "Unsupported context manager", runs=((4, 8, 4),))
    proving.fails_without(case, make_agent)  # each half builds its own model, never called before
    proving.exports_with(case, make_agent)


NESTED_ROWS = ("transformers.output_capturing.nested_collectors",
               "transformers.output_capturing.nested_collectors_reset")


@pytest.mark.requires("transformers>=5.12")
@pytest.mark.parametrize("hidden_states", [False, True], ids=["plain", "hidden_states"])
def test_strict_export_of_nested_capturing_models(make_agent, hidden_states):
    """GIT's model runs its vision tower (a capture_outputs model of its own) and then its text layers, whose
    hooks read the collector: under Dynamo the tower's exit had cleared it, and the hooks' fallback (the
    ContextVar) stops a strict export. With the rows the outer collector is restored: the strict program matches
    eager at other batches and lengths, the text layers' hidden states included when they are asked for."""
    case = catalogue_case("git", NESTED_ROWS[0], "Unsupported method call", strict=True)
    sets = []

    def build():
        model, *inputs = case.build()
        if hidden_states:
            inputs = [{**one, "output_hidden_states": True} for one in inputs[:2]] + [
                [{**one, "output_hidden_states": True} for one in inputs[2]]]
        sets[:] = inputs[:2]
        return model, *inputs

    def shapes(model):  # the flag travels in forward's **kwargs
        return fit_to_signature(model, autopatch.guess_dynamic_shapes(*sets))

    proving.prove(dataclasses.replace(case, build=build, rows=NESTED_ROWS, shapes=shapes), make_agent)


def test_udop_prefill_fails_without_its_row_and_matches_eager_with_it(make_agent):
    """UDOP (the catalogue's, boxes drawn at random) appends each sample's uncovered image patches to its text
    through per-sample Python lists: without the row the export stops; with it other batches and text lengths
    (other covered patches) match eager, every output leaf."""
    proving.prove(catalogue_case("udop", "transformers.vision.udop_combine_embeddings", "not allocated"), make_agent)


def test_udop_prefill_converts_to_onnx_and_matches_eager(make_agent, onnx_extra):
    """The row sorts unique keys (a stable sort has no ONNX translation): the same prefill through
    torch.onnx.export and onnxruntime matches eager at the other batches and text lengths, every output leaf."""
    model, traced, other, runs = catalogue_case("udop", "transformers.vision.udop_combine_embeddings", "").build()
    make_agent()
    proving.assert_onnx_runs_match(proving.export_onnx(model, traced, other), model, runs, rtol=1e-4, atol=1e-5)
