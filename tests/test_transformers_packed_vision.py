"""transformers.vision.<model>_*_packed and <model>_rope_index: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V and Qwen3.5
prefills (5.23), models of their sources (Qwen3-VL-MoE, Qwen3.5-MoE, Cohere's Compass, GLM-4V-MoE,
GLM-OCR, GLM-4.6V, Cosmos3-Omni, EXAONE 4.5, and the catalogue's Muse Spark, Muse Glimmer, Kimi-K2.5 and
the Qwen2.5-Omni and Qwen3-Omni-MoE thinkers), PaddleOCR-VL, Video-LLaMA-3 and LFM3-VL (towers packed the same
way, each reading the grid image by image in code of its own), GLM-5-Next and dots.ocr 3 (GLM-OCR's tower attention,
proven on their features and placeholder check), ERNIE 4.5 VL MoE (Qwen2-VL's tower, a resampler and text and
vision experts of its own), Cosmos3-Edge (a tower of its own, every row its own), Inkling 2 (PaddleOCR-VL's
attention, a placeholder count of its own) and Inkling (that count alone), the catalogue's HunYuan-VL (a tower of
its own, every row its own), Nemotron-H-Omni (its RADIO tower's rows and its feature merge's), and the three Qwen
models', Qwen3-VL-MoE's, GLM-4V's and GLM-4V-MoE's on 4.57 (``*_4x`` rows),
whose images are packed into one patch sequence, exported with the number of images, their sizes, the batch and the
text length all dynamic.

Upstream reads image_grid_thw and the token kinds in Python four times (vision positions, per-frame attention
chunks, per-image feature split, the language model's 3-axis positions; Qwen2.5-VL also lists attention windows
per image, Qwen3-VL pads a tensor sized by the image count, 4.57 checks the placeholder count in a Python if, and
4.57's GLM-4V hands its position embeddings the frames' lengths as a list, repeated in a loop).
Each row is needed (the export fails with any one left out; for a model made of another's very sources, without
its rows, the fingerprints showing they are the same); with all of them the program matches eager on
batches with other images, grids and lengths, in both export modes, and eager is unchanged. The models and their
inputs are autopatch.models.packed_vlms'."""

import dataclasses
import functools
import random
import re

import pytest
import torch
from torch.export import Dim

import proving
from autopatch import registry
from autopatch.areas.packed_vision import rows as packed_rows
from autopatch.areas.packed_vision import hunyuan_vl
from autopatch.areas.packed_vision import packed as packed
from autopatch.models import packed_vlms
from autopatch.models.packed_vlms import IMAGE, MERGE, NAMES_4, NAMES_5, VIDEO, VIDEO_END, VIDEO_START, VISION_START
from conftest import requires, run_py
from proving import Proof

V5, V4 = requires("transformers>=5.13"), requires("transformers<5")
#: 5.23's models, and 4.57's ("<model>_4x"), each run where its transformers is installed.
MODELS = [*(pytest.param(m, marks=V5) for m in NAMES_5), *(pytest.param(m, marks=V4) for m in NAMES_4)]
# Without a row. (Without the gated delta row: its chunk loop's guards solve the traced length, "a specialized
# value"; without Inkling 2's placeholder count, torch's range check of the selected values' count.)
FAILS = "data-dependent|specialized it to be a constant|specialized value|not a subset of src_bound"


#: The rows of a 5.23 model's tower (``transformers.vision.<tower>_<row>``), another model's for BORROWED_TOWERS.
TOWER_ROWS = ("patch_positions_packed", "attention_packed")
#: The models of the table (PACKED_VISION_MODELS); the others' rows are all their own (OWN_ROWS).
TABLE_MODELS = frozenset(row.model for row in packed_rows.PACKED_VISION_MODELS)


def _rows(model):
    """The rows a non-strict export of ``model`` needs."""
    if model in NAMES_4:
        name = model[:-3]
        own = tuple(row.name for row in packed_rows.OWN_ROWS_4X if row.model == name)
        return tuple(f"transformers.vision.{name}_{row}_4x" for row in (
            "rot_pos_emb", "attention_packed", "image_features_packed", "placeholder_check", "rope_index", *own)
        ) + TEXT_NEEDS_4X.get(model, ())
    own = tuple(f"transformers.vision.{model}_{row.name}" for row in packed_rows.OWN_ROWS if row.model == model)
    if model not in TABLE_MODELS:  # a tower of its own (Cosmos3-Edge): its own rows are all it needs
        return own
    tower = packed_rows.BORROWED_TOWERS.get(model, model)  # GLM-4.6V and Cosmos3-Omni: another model's tower
    rows = [f"transformers.vision.{tower}_{row}" for row in TOWER_ROWS]
    rows += [f"transformers.vision.{model}_{row}" for row in ("image_features_packed", "rope_index")
             if not (row == "rope_index" and model in packed_rows.NO_ROPE_INDEX)]
    if model in packed_rows.WINDOWED_MODELS:
        rows.append(f"transformers.vision.{model}_windows_packed")
    if tower in packed_rows.INTERPOLATION_MODELS:
        rows.append(f"transformers.vision.{tower}_interpolation_packed")
    rows += own
    if model in packed_rows.GATED_DELTA_TEXT:  # their text models' linear-attention layers
        rows.append(f"transformers.{model}.gated_delta_scan")
    rows += packed_rows.TEXT_NEEDS.get(model, ())  # ERNIE 4.5 VL's text and vision experts
    return tuple(rows)


#: 4.57's text models that need a row of their own: GLM-4V-MoE's experts (Glm4vMoeTextMoE.moe, GLM-4-MoE's source).
TEXT_NEEDS_4X = {"glm4v_moe_4x": ("transformers.moe.glm4v_moe",)}


def _strict_rows(model):
    """What strict=True needs on top (Qwen2.5-VL and 4.57: nothing; the export test shows it)."""
    if model in packed_rows.PLACEHOLDER_CHECK_STRICT:
        return (f"transformers.vision.{model}_placeholder_check_packed",)
    return ()


def _selected(rows):
    """The pytree family (the prefill returns a DynamicCache) and ``rows``."""
    return ",".join(("pytree", *rows))


#: Strict=True of the models with linear-attention text stops in their text model's cache (Dynamo: 'DynamicLayer'
#: object has no attribute 'dtype', README, known limits): their strict cases export the prefill without a cache
#: (config.use_cache off).
NO_CACHE_WHEN_STRICT = packed_rows.GATED_DELTA_TEXT


#: Rows a model's text model needs beside (in both halves): EXAONE 4.5's, LFM3's and Inkling 2's sliding-window
#: layers fill their cache.
TEXT_ROWS = {"exaone4_5": ("transformers.cache.sliding_update",), "lfm3_vl": ("transformers.cache.sliding_update",),
             "inkling2": ("transformers.cache.sliding_update",),
             "qwen3_vl_moe_4x": ("torch.min_max_by_range",)}  # 4.57's experts: a guard on min(.., 64 * seq)


def packed_case(model, rows, beside=("pytree",), strict=False):
    """``model``'s prefill traced at two images and run at other images, grids, batches and lengths, with every
    size the packing reads dynamic (packed_vlms.dynamic_shapes)."""
    beside = (*beside, *TEXT_ROWS.get(model, ()))

    def build():
        others = packed_vlms.others(model)
        module = packed_vlms.build(model)
        if strict and model in NO_CACHE_WHEN_STRICT:
            module.config.use_cache = module.config.text_config.use_cache = False
        return module, packed_vlms.traced(model), others[0], others

    return Proof(f"{model}/prefill", build, rows=rows, fails_with=FAILS, beside=beside, strict=strict,
                 shapes=lambda _: packed_vlms.dynamic_shapes(model), tolerance=dict(rtol=1e-4, atol=1e-4))


#: Models whose every row patches the very source (same fingerprints) of a model proven row by row: each row's
#: need is that model's; their own test shows the export fails without their rows, and checks the fingerprints.
SAME_SOURCES = {"qwen3_vl_moe": "qwen3_vl", "qwen3_5_moe": "qwen3_5", "cohere_compass": "qwen3_vl",
                "cosmos3_omni": "qwen3_vl", "qwen3_vl_moe_4x": "qwen3_vl_4x", "glm4v_moe_4x": "glm4v_4x"}

#: Of those, the rows unlike their model's (another fingerprint, or none there: a text model's own), left out one
#: at a time as every row of the other models: 4.57's Qwen3-VL-MoE rope index (its docstring names the MoE model),
#: GLM-4V-MoE's experts.
OWN_OF_SAME_SOURCES = {"qwen3_vl_moe_4x": ("transformers.vision.qwen3_vl_moe_rope_index_4x",),
                       "glm4v_moe_4x": ("transformers.moe.glm4v_moe",)}


#: Of the models, those whose tower rows and placeholder check are GLM-4V's very sources (fingerprints, asserted
#: below): their strict=True export is GLM-4V's (Dynamo traces the same functions, as the strict refusal without
#: the placeholder row, shown on GLM-4V's). Not GLM-OCR: its tower attention is another source.
STRICT_SAME_AS = {"glm4v_moe": "glm4v", "glm46v": "glm4v"}


def _left_out(model):
    """The rows of ``model`` its test leaves out one at a time."""
    return OWN_OF_SAME_SOURCES.get(model, ()) if model in SAME_SOURCES else _rows(model)


#: Rows proven elsewhere on the same function: the gated delta rule's (tests/test_transformers_ssm.py, its chunked
#: prefill, on Qwen3-Next's copy of the function Qwen3.5's text model calls; an export without it is 30 s).
PROVEN_ELSEWHERE = ("gated_delta_scan",)

#: (transformers 4, strict, fingerprints) -> the first row left out with that one patched source, in this file's
#: order. Most of these models copy Qwen2-VL's tower code verbatim (24 rows patch its one position function):
#: leaving each copy out in each model ran the same failing trace of the same function on the same dynamic grids
#: again (50 exports on 5.23, 8 on 4.57). A later row of that source is not left out; it is still needed where it
#: is: its model's export test counts its hits (the function runs there, patched). Filled as the tables below are
#: collected.
_FIRST_OF_SOURCE = {}


def _left_out_first(row, v4=False, strict=False):
    """Whether ``row`` is the first of its source left out in this file (on 4.57 if ``v4``; in a strict export's
    refusal if ``strict``, a failure of another kind)."""
    prints = proving.row(row).fingerprints
    if len(prints) != 1:  # none, or several accepted sources: no proof it is the same function as another's
        return True
    return _FIRST_OF_SOURCE.setdefault((v4, strict, prints), row) == row


@pytest.mark.parametrize("model, left_out", [
    pytest.param(p.values[0], row, marks=p.marks, id=f"{p.values[0]}-{row.rsplit('.', 1)[1]}")
    for p in MODELS for row in _left_out(p.values[0])
    if not row.endswith(PROVEN_ELSEWHERE) and _left_out_first(row, p.values[0] in NAMES_4)])
def test_export_fails_with_any_row_left_out(make_agent, model, left_out):
    others = tuple(row for row in _rows(model) if row != left_out)
    proving.fails_without(packed_case(model, (left_out,), beside=("pytree", *others)), make_agent)


@pytest.mark.parametrize("model", [pytest.param(m, marks=V4 if m in NAMES_4 else V5) for m in SAME_SOURCES])
def test_rows_of_the_same_sources_are_needed_as_their_models(make_agent, model):
    """Row by row, the same fingerprints as the rows of the model they copy (whose rows the test above leaves out
    one at a time), but for their own (OWN_OF_SAME_SOURCES: another fingerprint or no such row there, left out
    above too); and without any of them the export fails."""
    model_rows, proven_rows = _rows(model), _rows(SAME_SOURCES[model])
    name, proven_name = model.removesuffix("_4x"), SAME_SOURCES[model].removesuffix("_4x")
    counterparts = {r: re.sub(rf"\.{name}([._])", rf".{proven_name}\1", r, count=1) for r in model_rows}
    own = OWN_OF_SAME_SOURCES.get(model, ())
    assert sorted(c for c in counterparts.values() if c in proven_rows) == sorted(proven_rows)
    for r, c in counterparts.items():
        same = c in proven_rows and proving.row(r).fingerprints == proving.row(c).fingerprints
        assert same != (r in own), r
    proving.fails_without(packed_case(model, model_rows), make_agent)


@pytest.mark.parametrize("model", [pytest.param(m, marks=V5) for m in packed_rows.PLACEHOLDER_CHECK_STRICT
                                   if m in NAMES_5 and m not in SAME_SOURCES  # the catalogue's (Qwen3-Omni): below
                                   and _left_out_first(_strict_rows(m)[0], strict=True)])
def test_strict_program_refuses_other_image_sizes_without_the_placeholder_row(make_agent, model):
    """Dynamo fixes the patch count while formatting a check's message; the export itself does not fail, the
    program refuses the first run set (other images). Once per source of the check (Qwen2-VL's, shared by
    Qwen3-VL, Qwen3.5, LFM3-VL, Cosmos3-Edge; GLM-4V's, by its MoE, GLM-OCR, GLM-4.6V: _FIRST_OF_SOURCE); each
    model's row counts hits in its own exports above."""
    case = packed_case(model, _strict_rows(model), beside=("pytree", *_rows(model)), strict=True)
    proving.fails_without(dataclasses.replace(case, fails_with="Guard failed", fails_at_run=True), make_agent)


# Strict=True of the models of another's very sources: their rows are that model's (same fingerprints, asserted
# above), whose strict export is proven here, so only their own non-strict export runs (Dynamo traces the same
# functions; their placeholder rows likewise). STRICT_SAME_AS likewise: GLM-4V's strict export proves their tower
# and placeholder rows.
@pytest.mark.parametrize("model, strict", [
    pytest.param(p.values[0], strict, marks=p.marks, id=f"{p.values[0]}-{'strict' if strict else 'non-strict'}")
    for p in MODELS for strict in (False, True)
    if not (strict and p.values[0] in (*SAME_SOURCES, *STRICT_SAME_AS))])
def test_exported_prefill_matches_eager_on_other_images_and_lengths(make_agent, model, strict):
    """Non-strict, beside every default patch (what EXPORT_PATCHES=1 installs: their interplay on the same code
    is what users get; it found two faults of the broadcasting patch with data-dependent sizes, Qwen2.5-VL's
    sym_ite of an int and a size and Qwen3-VL's of two that torch's range analysis cannot bound); strict, beside
    the pytree registrations only: the model's rows are all it needs."""
    beside = ("pytree",) if strict else ("all",)
    proving.exports_with(packed_case(model, (*_rows(model), *_strict_rows(model)), beside=beside, strict=strict),
                         make_agent)


@pytest.mark.parametrize("model", [pytest.param(m, marks=V5) for m in STRICT_SAME_AS])
def test_strict_same_as_models_share_their_models_tower_and_placeholder_rows(model):
    """What lets their strict export be GLM-4V's: the same placeholder check, and the same tower rows
    (fingerprints)."""
    proven = STRICT_SAME_AS[model]
    checks = packed_rows.PLACEHOLDER_CHECK_STRICT
    assert checks[model] == checks[proven]
    tower = packed_rows.BORROWED_TOWERS.get(model, model)
    for row in TOWER_ROWS:
        ours, theirs = (proving.row(f"transformers.vision.{name}_{row}") for name in (tower, proven))
        assert ours.fingerprints == theirs.fingerprints, (ours.id, theirs.id)


@pytest.mark.parametrize("model", MODELS)
def test_eager_is_unchanged_with_the_rows_installed(make_agent, model):
    module = packed_vlms.build(model)
    inputs = packed_vlms.others(model)[0]
    with torch.no_grad():
        before = module(**inputs).logits
    make_agent(registry.PATCHES, _selected((*_rows(model), *_strict_rows(model))))
    with torch.no_grad():
        assert torch.equal(module(**inputs).logits, before)  # outside export: the originals


@V5
@pytest.mark.parametrize("include_temporal", [False, True])
def test_patch_positions_equal_upstream(include_temporal):
    from transformers import vision_utils

    grids = torch.tensor([[1, 4, 4], [2, 4, 6], [3, 8, 2], [1, 2, 10]])
    for merge in (MERGE, torch.tensor([2, 2, 1, 2])):  # one merge size, or one per image
        expected = vision_utils.get_vision_position_ids(grids, merge, include_temporal)
        assert torch.equal(packed.packed_position_ids(grids, merge, include_temporal), expected)


def _random_batches(model, seed, count=60):
    """Random batches for the rope-index tests: text runs, images and videos (several per sample, in any order,
    each after a vision-start token; Qwen3-VL's video frames each after timestamp text and a vision-start token, as
    its processor writes them; 4.57 GLM-4V's as ``glm4v_4x``, below), left padding. Yields (ids, kinds, mask,
    image_grid or None, video_grid or None, grids by kind)."""
    rng = random.Random(seed)
    for _ in range(count):
        samples, grids = [], {1: [], 2: []}
        for _ in range(rng.randint(1, 3)):
            tokens = [5] * rng.randint(1, 3)
            for _ in range(rng.randint(0, 3)):
                kind = rng.choice((1, 2))
                grid = (rng.randint(1, 4), MERGE * rng.randint(1, 3), MERGE * rng.randint(1, 3))
                grids[kind].append(grid)
                placeholder, frame = (IMAGE if kind == 1 else VIDEO), grid[1] * grid[2] // MERGE**2
                if model == "glm4v_4x":  # 4.57's GLM-4V: image placeholders, a video's frames between its start and
                    # end tokens, each after an image-start token, with a timestamp after it; a video id is text
                    frames = [grid[0] * frame] if kind == 1 else [frame] * grid[0]
                    tokens += [VIDEO_START] * (kind == 2) + [VIDEO] * (rng.random() < 0.2)
                    for count in frames:
                        tokens += [VISION_START] + [IMAGE] * count + [5] * rng.randint(kind - 1, 2)
                    tokens += [VIDEO_END] * (kind == 2) + [5] * rng.randint(1, 3)
                    continue
                tokens.append(VISION_START)
                if kind == 2 and model == "ernie4_5_vl":  # its resampler pairs a video's frames (an odd last one
                    # dropped): 2 to 4 frames, half as many tokens
                    grids[kind][-1] = grid = (rng.randint(2, 4), *grid[1:])
                    tokens += [placeholder] * (grid[0] // 2 * frame)
                elif kind == 2 and model == "qwen3_vl":  # a timestamp and a vision start before every frame but the first
                    tokens += [placeholder] * frame
                    for _ in range(grid[0] - 1):
                        tokens += [5] * rng.randint(1, 2) + [VISION_START] + [placeholder] * frame
                else:
                    tokens += [placeholder] * (grid[0] * frame)
                tokens += [5] * rng.randint(1, 3)
            samples.append(tokens)
        length = max(len(tokens) for tokens in samples) + rng.randint(0, 2)
        ids = torch.zeros(len(samples), length, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, tokens in enumerate(samples):
            ids[row, length - len(tokens):] = torch.tensor(tokens)
            mask[row, length - len(tokens):] = 1
        kinds = ((ids == IMAGE).int() + 2 * (ids == VIDEO).int())
        yield ids, kinds, mask, *(torch.tensor(grids[k]) if grids[k] else None for k in (1, 2)), grids


@pytest.mark.parametrize("model", [pytest.param(m, marks=V5) for m in NAMES_5 if m not in packed_rows.NO_ROPE_INDEX])
def test_rope_index_equals_upstream_on_mixed_batches(model):
    """The replacement of each 5.23 model against its own get_rope_index, with and without an attention mask."""
    rope = next((row.rope_index for row in packed_rows.PACKED_VISION_MODELS if row.model == model), None) or next(
        row.replacement for row in packed_rows.OWN_ROWS if (row.model, row.name) == (model, "rope_index"))
    replacement = getattr(packed, rope)  # GLM-4V: Qwen3-VL's, with its batches (a vision start before each frame)
    language = packed_vlms.build(model).model
    rng = random.Random(1)
    for ids, kinds, mask, image_grid, video_grid, grids in _random_batches(rope[:-len("_rope_index")], seed=0):
        extra = {}
        if model == "qwen2_5_vl" and video_grid is not None and rng.random() < 0.7:  # else 1 s per grid
            extra["second_per_grid_ts"] = torch.tensor([rng.choice((0.5, 1.0, 1.3)) for _ in grids[2]])
        for attention_mask in (mask, None):
            expected = language.get_rope_index(ids, kinds, image_grid, video_grid, attention_mask=attention_mask,
                                               **extra)
            got = replacement(language, ids, kinds, image_grid, video_grid, attention_mask=attention_mask, **extra)
            for e, g in zip(expected, got):
                assert e.dtype == g.dtype and torch.equal(e, g)


def test_block_diagonal_mask_attends_within_segments():
    from autopatch.rewrite import runtime

    like = torch.zeros(1, 4, 7, 8)
    mask = runtime.block_diagonal_mask(torch.tensor([0, 2, 3, 7], dtype=torch.int32), like)
    allowed = (mask[0, 0] == 0).int()
    segments = [0, 0, 1, 2, 2, 2, 2]
    assert allowed.tolist() == [[int(a == b) for b in segments] for a in segments]
    assert mask.shape == (1, 1, 7, 7)


def _random_grids(rng, count=100):
    """Random image grids: 1 to 4 images of 1 to 3 frames, 1 to 9 merged tokens a side."""
    for _ in range(count):
        yield torch.tensor([(rng.randint(1, 3), MERGE * rng.randint(1, 9), MERGE * rng.randint(1, 9))
                            for _ in range(rng.randint(1, 4))])


@V5
def test_window_index_equals_upstream():
    from transformers import vision_utils

    rng = random.Random(1)
    for grids in _random_grids(rng):
        window, patch = rng.choice(((16, 4), (24, 4), (32, 4), (112, 14)))
        expected = vision_utils.get_vision_window_index(grids, MERGE, window, patch)
        got = packed.packed_window_index(grids, MERGE, window, patch)
        for e, g in zip(expected, got):
            assert e.dtype == g.dtype and torch.equal(e, g)


@V5
def test_paddleocr_projector_equals_upstream():
    """Every image's blocks, gathered at once, are the blocks upstream cuts image by image (several frames too)."""
    projector = packed_vlms.build("paddleocr_vl").model.projector  # called outside export: upstream's forward
    for grids in _random_grids(random.Random(5), count=30):
        features = torch.randn(int(grids.prod(-1).sum()), projector.pre_norm.normalized_shape[0])
        with torch.no_grad():
            expected, got = projector(features, grids), packed.paddleocr_projector_packed(projector, features, grids)
        # The projection runs once over every image's blocks, not image by image: float rounding differs a little.
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@V5
def test_video_llama_3_unshuffle_equals_upstream():
    """Every merged token at once, from its block's middle patches, is upstream's per-image bilinear shrink: merge
    sizes 1 to 4 (odd ones sample the middle patch, even ones between two), several frames, mixed in one batch."""
    tower = packed_vlms.build("video_llama_3").model.vision_model
    rng = random.Random(6)
    for _ in range(30):
        merges = [rng.randint(1, 4) for _ in range(rng.randint(1, 4))]
        grids = torch.tensor([(rng.randint(1, 3), m * rng.randint(1, 5), m * rng.randint(1, 5)) for m in merges])
        hidden = torch.randn(int(grids.prod(-1).sum()), 8)
        expected = tower.pixel_unshuffle(hidden, grids, torch.tensor(merges))  # outside export: upstream's
        got = packed.video_llama_3_unshuffle_packed(tower, hidden, grids, torch.tensor(merges))
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


@V5
@pytest.mark.parametrize("kernel", [3, 5])  # the class default, and a wider one (padding 2)
def test_lfm3_vl_convolution_equals_upstream(kernel):
    """Every patch summing its neighbours in the packed sequence is upstream's per-image depthwise convolution
    (zero padding at every frame's edges), several frames and images in one batch."""
    from transformers.models.lfm3_vl.modeling_lfm3_vl import Lfm3VlVisionShortConv

    config = packed_vlms.build("lfm3_vl").config.vision_config
    config.conv_kernel_size = kernel
    torch.manual_seed(0)
    conv = Lfm3VlVisionShortConv(config, layer_idx=0).eval()
    for grids in _random_grids(random.Random(7), count=30):
        hidden = torch.randn(int(grids.prod(-1).sum()), config.hidden_size)
        with torch.no_grad():  # outside export: upstream's forward
            expected, got = conv(hidden, grids.tolist()), packed.lfm3_vl_conv_packed(conv, hidden, grids)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@V5
@pytest.mark.parametrize("side", [16, 5])  # the checkpoints' 16 x 16 reference grid, and an odd one
def test_cosmos3_edge_positions_equal_upstream(side):
    """Every patch's position embedding from the separable antialiased bilinear weights is upstream's per-image
    F.interpolate: images smaller than the reference grid (the filter widened), equal, and larger, with several
    frames, in one batch."""
    from transformers.models.cosmos3_edge.modeling_cosmos3_edge import Cosmos3EdgeVisionEmbeddings

    from autopatch.areas.packed_vision import cosmos3_edge

    rng = random.Random(9)
    torch.manual_seed(9)
    table = torch.randn(side, side, 8)
    for _ in range(30):
        grids = torch.tensor([(rng.randint(1, 2), MERGE * rng.randint(1, 20), MERGE * rng.randint(1, 20))
                              for _ in range(rng.randint(1, 3))])
        expected = Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings(table, grids, MERGE)
        # upstream resamples one axis, rounds, then the other: float rounding apart (2e-6 measured)
        torch.testing.assert_close(cosmos3_edge.positions_packed(table, grids, MERGE), expected, rtol=1e-5,
                                   atol=1e-5)


@V5
def test_ernie4_5_vl_temporal_pairs_equal_upstream():
    """Every merged token's frame pair, found at once, is upstream's per-image loop: one-frame images (a frame
    beside itself) and videos of 2 to 5 frames (pairs, an odd last frame left out) mixed in one batch."""
    from autopatch.areas.packed_vision import ernie4_5_vl

    resampler = packed_vlms.build("ernie4_5_vl_moe").model.resampler_model
    rng = random.Random(8)
    for _ in range(30):
        grids = torch.tensor([(rng.choice((1, 1, 2, 3, 4, 5)), MERGE * rng.randint(1, 3), MERGE * rng.randint(1, 3))
                              for _ in range(rng.randint(1, 4))])
        hidden = torch.randn(int(grids.prod(-1).sum()) // MERGE**2, 8)
        expected = resampler._temporal_slicing(hidden, grids)  # outside export: upstream's
        assert torch.equal(ernie4_5_vl.temporal_pairs(resampler, hidden, grids), expected)


@V5
def test_ernie4_5_vl_modality_experts_equal_upstream():
    """Both expert sets on every token, each keeping its modality's, give upstream's outputs and router logits:
    text and vision tokens mixed, text only (upstream's other branch), and no token types at all."""
    from autopatch.areas.moe import experts

    block = packed_vlms.build("ernie4_5_vl_moe").model.language_model.layers[1].mlp
    torch.manual_seed(3)
    hidden = torch.randn(3, 7, block.text_moe.hidden_dim)
    mixed = (torch.rand(3, 7) < 0.4).long() * torch.randint(1, 3, (3, 7))
    for types in (mixed, torch.zeros(3, 7, dtype=torch.long), None):
        with torch.no_grad():
            expected = block(hidden, types)  # outside export: upstream's
            got = experts.ernie4_5_vl_modality_experts(block, hidden, types)
        for e, g in zip(expected, got):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


# The door users take, once per transformers: a fresh interpreter, EXPORT_PATCHES=1, the default patches installed
# lazily as the model's modules are imported (each model's export beside every default patch is proven in-process
# above). Qwen3-VL and 4.57's Qwen2.5-VL: the models whose default-patch faults this found first.
ZERO_CODE = [pytest.param("qwen3_vl", marks=V5, id="5.x"), pytest.param("qwen2_5_vl_4x", marks=V4, id="4.x")]


@pytest.mark.parametrize("model", ZERO_CODE)
def test_zero_code_export_with_the_default_patches(model):
    """A plain torch.export.export of the model in a process started with EXPORT_PATCHES=1, run at other images,
    grids, batches and lengths against eager."""
    code = f"""
import torch
from autopatch.models import packed_vlms as m
model = m.build({model!r})
with torch.no_grad():
    program = torch.export.export(model, (), kwargs=m.traced({model!r}), dynamic_shapes=m.dynamic_shapes({model!r}))
    for inputs in m.others({model!r}):
        torch.testing.assert_close(program.module()(**inputs).logits, model(**inputs).logits, rtol=1e-4, atol=1e-4)
print("OK")
"""
    result = run_py(code, timeout=900, EXPORT_PATCHES="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1:] == ["OK"], result.stdout


def _row_4x(model):
    """The PACKED_VISION_MODELS_4X row of ``model`` (``<name>_4x``)."""
    return next(row for row in packed_rows.PACKED_VISION_MODELS_4X if row.model == model.removesuffix("_4x"))


#: The 4.57 models of rope indices that find images by vision-start tokens (GLM-4V's by the placeholder runs).
VISION_START_4X = [m for m in NAMES_4 if not m.startswith("glm")]


@pytest.mark.parametrize("model", [pytest.param(m, marks=V4) for m in NAMES_4])
def test_rope_index_4x_equals_upstream_on_mixed_batches(model):
    """4.57's rules (the kinds read from placeholder ids after vision-start tokens, GLM-4V's from video-start and
    end tokens around its frames, a group advancing past its largest index, dropped tokens at 1; Qwen2.5-VL's
    whole seconds per grid, images' frames at one time), with and without an attention mask."""
    name = model[:-3]
    replacement = getattr(packed, _row_4x(model).rope_index)
    language = packed_vlms.build(model).model
    rng = random.Random(3)
    batches = "glm4v_4x" if name.startswith("glm4v") else "qwen3_vl" if name.startswith("qwen3_vl") else name
    for ids, _, mask, image_grid, video_grid, grids in _random_batches(batches, seed=2):
        extra = {}
        if name == "qwen2_5_vl" and video_grid is not None and rng.random() < 0.7:  # else 1 s per grid
            extra["second_per_grid_ts"] = torch.tensor([rng.choice((0.5, 1.0, 1.3, 2.0)) for _ in grids[2]])
        for attention_mask in (mask, None):
            expected = language.get_rope_index(ids, image_grid, video_grid, attention_mask=attention_mask, **extra)
            got = replacement(language, ids, image_grid, video_grid, attention_mask=attention_mask, **extra)
            for e, g in zip(expected, got):
                assert e.dtype == g.dtype and torch.equal(e, g)


@pytest.mark.parametrize("model", [pytest.param(m, marks=V4) for m in VISION_START_4X])
def test_rope_index_4x_without_vision_start_tokens_gives_text_positions_as_upstream(model):
    """4.x counts images by their vision-start tokens: placeholders without one get text positions in eager, and
    the replacement gave them image positions (a program off by 2.5e-3 in the logits, measured on the sweep's
    tiny Qwen2-VL, whose prompts had no vision-start token). A row with some runs opened and others not is
    refused: 4.x pairs its grids with the runs in an order of its own."""
    name = model[:-3]
    replacement = getattr(packed, _row_4x(model).rope_index)
    language = packed_vlms.build(model).model
    name = "qwen3_vl" if name.startswith("qwen3_vl") else name  # its batches
    for ids, _, mask, image_grid, video_grid, _ in _random_batches(name, seed=5, count=20):
        bare = torch.where(ids == VISION_START, torch.full_like(ids, 5), ids)
        expected = language.get_rope_index(bare, image_grid, video_grid, attention_mask=mask)
        got = replacement(language, bare, image_grid, video_grid, attention_mask=mask)
        for e, g in zip(expected, got):
            assert torch.equal(e, g)
    ids, _, mask, image_grid, video_grid, _ = next(
        batch for batch in _random_batches(name, seed=6) if (batch[0][0] == VISION_START).sum() >= 2)
    mixed = ids.clone()
    mixed[0, (ids[0] == VISION_START).nonzero()[0]] = 5  # the first run of row 0 loses its vision start
    with pytest.raises(RuntimeError, match="some image/video placeholder runs follow a vision-start token"):
        replacement(language, mixed, image_grid, video_grid, attention_mask=mask)


@V4
def test_window_index_4x_equals_upstream():
    tower = packed_vlms.build("qwen2_5_vl_4x").model.visual
    for grids in _random_grids(random.Random(4)):
        index, bounds = tower.get_window_index(grids)
        got_index, got_bounds = packed.qwen2_5_vl_window_index_4x(tower, grids)
        assert torch.equal(got_index, index)
        assert got_bounds.tolist() == torch.tensor(bounds).unique_consecutive().tolist()  # as the caller uses them


@V4
def test_position_grid_4x_equals_upstream():
    """Qwen3-VL's learned positions resampled per image: the same taps (linspace computed as torch does) and
    weights, so the same embeddings, for grids of 1 to 18 patches a side on a 4x4 table."""
    tower = packed_vlms.build("qwen3_vl_4x").model.visual
    with torch.no_grad():
        for grids in _random_grids(random.Random(5)):
            expected = tower.fast_pos_embed_interpolate(grids)
            torch.testing.assert_close(packed.qwen3_vl_position_grid_4x(tower, grids), expected, rtol=0, atol=1e-6)


@V4
@pytest.mark.parametrize("model", [m for m in NAMES_4 if m not in SAME_SOURCES])
def test_rot_pos_emb_4x_equals_upstream(model):
    """The rotary table (and GLM-4V's positions beside it) for random grids."""
    tower = packed_vlms.build(model).model.visual
    replacement = getattr(packed, _row_4x(model).rot_pos_emb)
    for grids in _random_grids(random.Random(6), count=30):
        got, expected = replacement(tower, grids), tower.rot_pos_emb(grids)
        assert all(torch.equal(g, e) for g, e in zip(*(torch.utils._pytree.tree_leaves(x) for x in (got, expected))))
        assert type(got) is type(expected)


@V4
def test_glm4v_position_embedding_4x_equals_upstream():
    """4.57's GLM-4V resamples its learned positions to each frame's target size: rewritten, the patches find their
    frame by searchsorted and read the same row of the grid, for random grids of one-frame images (upstream reads
    the i-th frame's size from the grid's i-th row: an image of two frames fails there, as here; its videos come
    one row per frame)."""
    from transformers.models.glm4v.modeling_glm4v import Glm4vVisionEmbeddings

    embeddings = packed_vlms.build("glm4v_4x").model.visual.embeddings
    rewritten = packed.glm4v_position_embedding_4x(Glm4vVisionEmbeddings.forward)

    def both(grids):
        """Upstream's call and the rewritten one, on the tower's lengths and positions for ``grids``."""
        lengths = torch.repeat_interleave(grids[:, 1] * grids[:, 2], grids[:, 0])
        positions = packed.packed_position_ids(grids, MERGE)
        hidden = torch.randn(int(lengths.sum()), embeddings.embed_dim)
        return (lambda: embeddings(hidden, lengths.tolist(), grids, positions[:, 0], positions[:, 1]),
                lambda: rewritten(embeddings, hidden, lengths.int(), grids, positions[:, 0], positions[:, 1]))

    with torch.no_grad():
        for grids in _random_grids(random.Random(8), count=30):
            grids[:, 0] = 1
            expected, got = (run() for run in both(grids))
            assert torch.equal(got, expected)
        for run in both(torch.tensor([[2, 4, 4]])):
            with pytest.raises(IndexError):
                run()


# --- Muse Spark, Muse Glimmer and Kimi-K2.5: the tiny catalogue's, with loops of their own --------------------

MUSE_ROWS = ("patch_positions_packed", "attention_packed", "image_features_packed", "windows_packed",
             "interpolation_packed", "pixel_shuffle_packed", "window_rows")
KIMI_ROWS = ("patch_positions_packed", "attention_packed", "image_features_packed", "interpolation_packed",
             "frame_index_packed", "temporal_merge_packed")


def catalogue_packed_case(model, rows, beside=("pytree",), strict=False):
    """The catalogue's prefill, traced at 2 images (batch 2), run at 3 and 4 images (other batches and texts)."""
    return proving.catalogue_prefill(model, rows, FAILS, beside=beside, strict=strict)


@V5
@pytest.mark.parametrize("model, left_out", [
    (model, row) for model, rows in (("muse_spark", MUSE_ROWS), ("kimi_k25", KIMI_ROWS))
    for row in rows if _left_out_first(f"transformers.vision.{model}_{row}")])
def test_catalogue_export_fails_with_any_row_left_out(make_agent, model, left_out):
    rows = [f"transformers.vision.{model}_{row}" for row in (MUSE_ROWS if model == "muse_spark" else KIMI_ROWS)]
    row = f"transformers.vision.{model}_{left_out}"
    case = catalogue_packed_case(model, (row,), beside=("pytree", *(r for r in rows if r != row)))
    proving.fails_without(case, make_agent)


@V5
def test_muse_glimmer_rows_are_muse_sparks_and_needed(make_agent):
    """Muse Glimmer's rows patch the same sources as Muse Spark's (the same fingerprints, row by row), and its
    export fails without them."""
    fingerprints = {model: [proving.row(f"transformers.vision.{model}_{row}").fingerprints for row in MUSE_ROWS]
                    for model in ("muse_spark", "muse_glimmer")}
    assert fingerprints["muse_glimmer"] == fingerprints["muse_spark"]
    proving.fails_without(catalogue_packed_case("muse_glimmer", tuple(f"transformers.vision.muse_glimmer_{row}"
                                                          for row in MUSE_ROWS)), make_agent)


@V5
@pytest.mark.parametrize("model", ["muse_spark", "muse_glimmer", "kimi_k25"])
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_catalogue_prefill_matches_eager_at_other_images(make_agent, model, strict):
    rows = tuple(f"transformers.vision.{model}_{row}" for row in (KIMI_ROWS if model == "kimi_k25" else MUSE_ROWS))
    proving.exports_with(catalogue_packed_case(model, rows, strict=strict), make_agent)


@V5
def test_pixel_shuffle_index_equals_upstream():
    """The loop-free index against Muse Spark's own, over random image counts, frames, grids and merge sizes."""
    from transformers.models.muse_spark import modeling_muse_spark

    from autopatch.areas.packed_vision.packed import packed_pixel_shuffle_index

    g = torch.Generator().manual_seed(0)
    for trial in range(120):
        merge, images = 1 + trial % 3, int(torch.randint(1, 4, (1,), generator=g))
        grid = torch.stack([torch.randint(1, 3, (images,), generator=g),
                            torch.randint(1, 4, (images,), generator=g) * merge,
                            torch.randint(1, 4, (images,), generator=g) * merge], 1)
        expected = modeling_muse_spark.get_vision_pixel_shuffle_index(grid, merge)
        got = packed_pixel_shuffle_index(grid, merge)
        assert got.dtype == expected.dtype and torch.equal(got, expected), (grid, merge)


@V5
def test_kimi_k25_indices_equal_upstream():
    """Kimi-K2.5's temporal-table and temporal-merge indices, loop-free, against its own over random image counts,
    grids, kernels and frame counts (every clip of a batch with the same count, as upstream needs for the merge)."""
    from transformers.models.kimi_k25 import modeling_kimi_k25 as upstream

    from autopatch.areas.packed_vision.packed import packed_frame_index, packed_temporal_merge_index

    g = torch.Generator().manual_seed(0)
    for trial in range(120):
        (kh, kw), images = [(2, 2), (1, 2), (3, 1)][trial % 3], int(torch.randint(1, 4, (1,), generator=g))
        grid = torch.stack([torch.full((images,), int(torch.randint(1, 4, (1,), generator=g))),
                            torch.randint(1, 4, (images,), generator=g) * kh,
                            torch.randint(1, 4, (images,), generator=g) * kw], 1)
        expected = upstream.get_vision_temporal_merge_index(grid, kh, kw)
        got = packed_temporal_merge_index(grid, kh, kw)
        assert got.dtype == expected.dtype and torch.equal(got, expected), (grid, kh, kw)
        grid[:, 0] = torch.randint(1, 4, (images,), generator=g)  # frame counts may differ for the table's index
        assert torch.equal(packed_frame_index(grid), upstream.get_vision_frame_index(grid)), grid


# --- Qwen4-Exp (5.23): Qwen3.5's tower, features and rope index under its own names, in the tiny catalogue ------

QWEN4_ROWS = (*(f"transformers.vision.qwen4_exp_{row}" for row in (
    "patch_positions_packed", "attention_packed", "image_features_packed", "interpolation_packed", "rope_index")),
    "transformers.qwen4_exp.gated_delta_scan")
#: Beside in both halves: every default patch (its text model's indexer row, proven in
#: tests/test_transformers_text_masks.py; with "pytree" alone export refuses the guessed shapes' ``kwargs`` entry).
QWEN4_BESIDE = ("all",)


def _qwen4_batch(config, grids, text_len, seed):
    """One image per sample (grid (frames, rows, columns) in patches) after a first text token and the vision-start
    token, then the rest of ``text_len`` text tokens; shorter samples left-padded (packed_vlms.prefill's layout,
    with the catalogue model's ids and patch size)."""
    g = torch.Generator().manual_seed(seed)
    vision = config.vision_config
    merge, patch = vision.spatial_merge_size, vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    ids, kinds, pixels = [], [], []
    for frames, rows, columns in grids:
        tokens = frames * rows * columns // merge**2
        text = torch.randint(5, 100, (text_len,), generator=g)
        ids.append(torch.cat([text[:1], torch.tensor([config.vision_start_token_id]),
                              torch.full((tokens,), config.image_token_id), text[1:]]))
        kinds.append(torch.cat([torch.zeros(2), torch.ones(tokens), torch.zeros(text_len - 1)]))
        pixels.append(torch.randn(frames * rows * columns, patch, generator=g))
    longest = max(len(row) for row in ids)

    def left_pad(rows):
        return torch.stack([torch.cat([torch.zeros(longest - len(row)), row]).long() for row in rows])

    return {"pixel_values": torch.cat(pixels), "image_grid_thw": torch.tensor(grids), "input_ids": left_pad(ids),
            "attention_mask": left_pad([torch.ones(len(row)) for row in ids]), "use_cache": False,
            "mm_token_type_ids": left_pad(kinds)}


def _qwen4_case(rows=QWEN4_ROWS, beside=QWEN4_BESIDE):
    """The catalogue's prefill (traced at 2 images of 4 x 4 patches), run at its 3 and 4 images and at other grids:
    non-square, two frames, padded samples, and a text past the gated delta rule's 64-token chunk."""
    case = catalogue_packed_case("qwen4_exp", rows, beside=beside)

    def build():
        model, traced, other, runs = case.build()
        mixed = [_qwen4_batch(model.config, [[1, 4, 8], [2, 8, 4], [1, 6, 2]], 5, seed=1),
                 _qwen4_batch(model.config, [[1, 4, 4], [1, 8, 4]], 70, seed=1)]
        return model, traced, other, [*runs, *mixed]

    return dataclasses.replace(case, build=build)


@V5
def test_qwen4_exp_rows_are_qwen3_5s_and_needed(make_agent):
    """Qwen4-Exp's rows patch the same sources as Qwen3.5's (the same fingerprints, row by row; Qwen3.5's are
    proven one by one above, its strict placeholder row too: a strict Qwen4-Exp prefill takes a minute, so that row
    is shown here by its source, and by the sweep's strict step, which refused other image sizes without it,
    'Guard failed: pixel_values.size()[0] // 4 == 8', and matches eager with it), and its export fails without them."""
    rows = (*QWEN4_ROWS, "transformers.vision.qwen4_exp_placeholder_check_packed")
    assert [proving.row(r).fingerprints for r in rows] == [
        proving.row(r.replace("qwen4_exp", "qwen3_5")).fingerprints for r in rows]
    assert proving.row(rows[-1]).replacement == proving.row(rows[-1].replace("qwen4_exp", "qwen3_5")).replacement
    proving.fails_without(_qwen4_case(), make_agent)


@V5
def test_qwen4_exp_prefill_matches_eager_at_other_images(make_agent):
    proving.exports_with(_qwen4_case(), make_agent)


# --- The Omni thinkers: Qwen2.5-VL's and Qwen3-VL's towers, 4.x-style rope indices of their own ---------------

#: model type -> (the catalogue's architecture, its rows).
OMNI = {"qwen2_5_omni": ("qwen2_5_omni_thinker", ("patch_positions_packed", "attention_packed", "image_features_packed",
                                                  "windows_packed", "rope_index")),
        "qwen3_omni_moe": ("qwen3_omni_moe_thinker", ("patch_positions_packed", "attention_packed",
                                                      "image_features_packed", "interpolation_packed", "rope_index"))}


def _omni_rows(model):
    return tuple(f"transformers.vision.{model}_{row}" for row in OMNI[model][1])


@V5
@pytest.mark.parametrize("model, left_out", [(model, row) for model in OMNI for row in _omni_rows(model)
                                             if _left_out_first(row)])
def test_omni_thinker_export_fails_with_any_row_left_out(make_agent, model, left_out):
    others = tuple(row for row in _omni_rows(model) if row != left_out)
    proving.fails_without(catalogue_packed_case(OMNI[model][0], (left_out,), beside=("pytree", *others)), make_agent)


@V5
def test_qwen3_omni_strict_program_refuses_other_image_sizes_without_the_placeholder_row(make_agent):
    """As Qwen3-VL's: Dynamo fixes the patch count while formatting the check's message (Qwen2.5-Omni's strict
    program, with the same source, takes other images without the row, as Qwen2.5-VL's)."""
    row = "transformers.vision.qwen3_omni_moe_placeholder_check_packed"
    case = catalogue_packed_case("qwen3_omni_moe_thinker", (row,), beside=("pytree", *_omni_rows("qwen3_omni_moe")),
                                 strict=True)
    proving.fails_without(dataclasses.replace(case, fails_with="Guard failed", fails_at_run=True), make_agent)


@V5
@pytest.mark.parametrize("model", list(OMNI))
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_omni_thinker_prefill_matches_eager_at_other_images(make_agent, model, strict):
    rows = _omni_rows(model) + ((f"transformers.vision.{model}_placeholder_check_packed",)
                                if strict and model in packed_rows.PLACEHOLDER_CHECK_STRICT else ())
    proving.exports_with(catalogue_packed_case(OMNI[model][0], rows, strict=strict), make_agent)


def _omni_batches(config, seed, count=60):
    """Text and images as the Omni processors write them (a vision start, the placeholders, a vision end: 7),
    several images per sample with grids of one or two frames (an image's frames are position_id_per_seconds
    apart on the time axis), some samples text only, left padding."""
    rng, merge = random.Random(seed), config.vision_config.spatial_merge_size
    for _ in range(count):
        samples, grids = [], []
        for _ in range(rng.randint(1, 3)):
            tokens = [5] * rng.randint(1, 3)
            for _ in range(rng.randint(0, 3)):
                grid = (rng.randint(1, 2), merge * rng.randint(1, 3), merge * rng.randint(1, 3))
                grids.append(grid)
                tokens += [config.vision_start_token_id, *[config.image_token_id] * (
                    grid[0] * grid[1] * grid[2] // merge**2), 7, *[5] * rng.randint(0, 2)]
            samples.append(tokens)
        length = max(len(tokens) for tokens in samples) + rng.randint(0, 2)
        ids, mask = torch.zeros(len(samples), length, dtype=torch.long), torch.zeros(len(samples), length,
                                                                                       dtype=torch.long)
        for row, tokens in enumerate(samples):
            ids[row, length - len(tokens):], mask[row, length - len(tokens):] = torch.tensor(tokens), 1
        yield ids, mask, torch.tensor(grids) if grids else None


@V5
@pytest.mark.parametrize("model", list(OMNI))
def test_omni_thinker_rope_index_equals_upstream(model):
    """The loop-free rope index against the thinker's own, with and without a mask (Qwen2.5-Omni's deltas count
    the tokens the mask keeps, unlike 4.x Qwen2.5-VL's; Qwen3-Omni's positions are float, dropped tokens at 0);
    an audio-start token without audio lengths is refused (upstream fails on it, or Qwen3-Omni's walks on past
    the tokens it was given)."""
    from autopatch.models import tiny

    thinker = tiny.build(tiny.architecture(OMNI[model][0], "vlm")).model
    upstream, replacement = type(thinker).get_rope_index, getattr(packed, f"{model.replace('_moe', '')}_rope_index")
    for ids, mask, grids in _omni_batches(thinker.config, seed=0):
        # Upstream needs a mask for text alone (both), and for images too (Qwen3-Omni's).
        for attention_mask in (mask, None) if grids is not None and model == "qwen2_5_omni" else (mask,):
            expected = upstream(thinker, ids, grids, None, attention_mask)
            got = replacement(upstream, thinker, ids, grids, None, attention_mask)
            for e, g in zip(expected, got):
                assert e.dtype == g.dtype and torch.equal(e, g), (ids, grids)
    ids, mask, grids = next(batch for batch in _omni_batches(thinker.config, seed=1) if batch[2] is not None)
    ids[0, -1] = thinker.config.audio_start_token_id
    with pytest.raises(RuntimeError, match="an audio-start token without audio_seqlens"):
        replacement(upstream, thinker, ids, grids, None, mask)


# --- GLM-5-Next and dots.ocr 3 (5.23): the table's rows over GLM-OCR's tower attention and Qwen2-VL's feature
# split (dots.ocr 3's by the tensor's own split method), and a placeholder check of their own (strict). Their text
# models (GLM-5-Next's linear, indexed and MoE layers; dots.ocr 3's latent attention with an indexer and MoE) take
# ~30 s to export and ~60 s under strict=True, so the rows are proven on what they patch: the tower's features, and
# the placeholder check's program under strict=True. The sweep (benchmarks/sweep.py) exports the whole model in both
# modes (dots.ocr 3's catalogue prefill, measured with these rows: it matches eager at 3 and 4 images in both).
TOWER_MODELS = ("glm5_next", "dots3_note")


def _tower_rows(model):
    return tuple(f"transformers.vision.{model}_{row}"
                 for row in ("patch_positions_packed", "attention_packed", "image_features_packed"))


class _ImageFeatures(torch.nn.Module):
    """The model's get_image_features, the per-image features concatenated as its forward does."""

    def __init__(self, model):
        super().__init__()
        self.inner = model.model

    def forward(self, pixel_values, image_grid_thw):
        return torch.cat(self.inner.get_image_features(pixel_values, image_grid_thw).pooler_output)


class _PlaceholderScatter(torch.nn.Module):
    """The forward's placement of image features: the text embedded, get_placeholder_mask, masked_scatter
    (GLM-5-Next's returns the image and video masks; dots.ocr 3's, one check for any modality, takes the token)."""

    def __init__(self, model):
        super().__init__()
        self.inner = model.model

    def forward(self, input_ids, image_features):
        embeds = self.inner.get_input_embeddings()(input_ids)
        if hasattr(self.inner, "get_audio_features"):  # dots.ocr 3
            mask = self.inner.get_placeholder_mask(input_ids, embeds, image_features, self.inner.config.image_token_id)
        else:
            mask, _ = self.inner.get_placeholder_mask(input_ids, inputs_embeds=embeds, image_features=image_features)
        return embeds.masked_scatter(mask, image_features)


def _vlm(model):
    from autopatch.models import tiny

    return tiny.build(tiny.architecture(model, "vlm"))


def _tower_images(config, grids, seed):
    vision = config.vision_config
    channels = getattr(vision, "in_channels", None) or vision.num_channels
    patch = channels * getattr(vision, "temporal_patch_size", 1) * vision.patch_size**2
    patches = sum(frames * rows * columns for frames, rows, columns in grids)
    return {"pixel_values": torch.randn(patches, patch, generator=torch.Generator().manual_seed(seed)),
            "image_grid_thw": torch.tensor(grids)}


def _placeholders(config, counts, text_len, seed):
    """One sample per count: that many image tokens among ``text_len`` text tokens; features for all of them."""
    g = torch.Generator().manual_seed(seed)
    seq = text_len + max(counts)
    ids = torch.randint(2, 100, (len(counts), seq), generator=g)
    for sample, count in enumerate(counts):
        ids[sample, 1:1 + count] = config.image_token_id
    return {"input_ids": ids, "image_features": torch.randn(sum(counts), config.text_config.hidden_size, generator=g)}


def _features_case(model):
    def build():
        module = _vlm(model)
        sets = [_tower_images(module.config, grids, seed) for seed, grids in enumerate(
            ([(1, 4, 4), (1, 4, 8)], [(1, 4, 4), (1, 6, 4), (1, 8, 4)], [(1, 6, 6)]))]
        return _ImageFeatures(module).eval(), sets[0], sets[1], sets[1:]

    return Proof(f"{model}/image features", build, rows=_tower_rows(model), fails_with=FAILS, beside=(),
                 shapes=lambda _: {"pixel_values": {0: MERGE**2 * Dim("merged")}, "image_grid_thw": {0: Dim("images")}})


def _placeholder_case(model):
    def build():
        module = _vlm(model)
        sets = [_placeholders(module.config, counts, text_len, seed) for seed, (counts, text_len) in enumerate(
            (((4, 8), 5), ((4, 6, 8), 7), ((9,), 3)))]
        return _PlaceholderScatter(module).eval(), sets[0], sets[1], sets[1:]

    batch = Dim("batch")
    # dots.ocr 3 compares the masked embeddings' count (data, at most int64's largest) with the features' size: an
    # unbounded feature count is refused by the strict trace's range check (not a subset), whatever the message.
    features = Dim("features", max=4096) if model == "dots3_note" else Dim("features")
    # A named Dim: Dynamo's formatting of the message fixes the feature count, and export says so.
    return Proof(f"{model}/placeholders-strict", build, rows=(f"transformers.vision.{model}_placeholder_check_packed",),
                 fails_with="specialized it to be a constant", beside=(), strict=True,
                 shapes=lambda _: {"input_ids": {0: batch, 1: Dim("seq")}, "image_features": {0: features}})


@V5
@pytest.mark.parametrize("model, left_out", [(model, row) for model in TOWER_MODELS for row in _tower_rows(model)
                                             if _left_out_first(row)],
                         ids=lambda value: value.rsplit(".", 1)[-1])
def test_tower_features_fail_with_any_tower_row_left_out(make_agent, model, left_out):
    others = tuple(row for row in _tower_rows(model) if row != left_out)
    proving.fails_without(dataclasses.replace(_features_case(model), rows=(left_out,), beside=others), make_agent)


@V5
@pytest.mark.parametrize("model", TOWER_MODELS)
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_tower_features_match_eager_at_other_images(make_agent, model, strict):
    proving.exports_with(dataclasses.replace(_features_case(model), strict=strict), make_agent)


@V5
@pytest.mark.parametrize("model", TOWER_MODELS)
def test_strict_placeholder_check_fixes_the_feature_count_without_its_row(make_agent, model):
    proving.prove(_placeholder_case(model), make_agent)


# --- HunYuan-VL (5.23): a tower of its own, packed the Qwen2-VL way; every row its own (OWN_ROWS) ----------------

HUNYUAN_ROWS = tuple(f"transformers.vision.hunyuan_vl_{row.name}" for row in packed_rows.OWN_ROWS
                     if row.model == "hunyuan_vl")
#: Without a row, measured with the others on: a data-dependent guard (the attention's chunks and the rope index's
#: walk: Eq(u0, 0) in unbind; the placeholder `if`: Ne(u0, 64*u1)); the image count the export was told is dynamic
#: fixed to the traced one (the loops over the images: positions, tower, and the feature split's .tolist()); the
#: merger without its row gets the grid tensor from the tower's and cannot reshape to it (a TypeError).
HUNYUAN_FAILS = {"attention_packed": "data-dependent expression Eq", "patch_embed_packed": "Constraints violated",
                 "tower_grid": "Constraints violated", "merger_packed": "tuple of ints,but got FakeTensor",
                 "image_features_packed": "Constraints violated", "placeholder_check": "data-dependent expression Ne",
                 "rope_index": "data-dependent expression Eq"}


def _hunyuan_batch(config, samples, seed, left_padding=True):
    """A prefill batch as HunYuan-VL's processor writes it: ``samples`` lists per sample text runs (a count of
    tokens) and images (``(h, w)`` in patches, one frame); an image's span is its merged rows, each followed by a
    newline token, between a begin and an end token, all of the image token (kind 1). Shorter samples padded."""
    rng, image_token = random.Random(seed), config.image_token_id
    merge = config.vision_config.spatial_merge_size
    rows, grids = [], []
    for items in samples:
        ids, kinds = [], []
        for item in items:
            if isinstance(item, int):
                ids += [rng.randrange(5, image_token) for _ in range(item)]
                kinds += [0] * item
            else:
                h, w = item
                span = (h // merge) * (w // merge + 1) + 2
                ids += [image_token] * span
                kinds += [1] * span
                grids.append([1, h, w])
        rows.append((ids, kinds))
    length = max(len(ids) for ids, _ in rows)
    input_ids, kinds, mask = (torch.zeros(len(rows), length, dtype=torch.long) for _ in range(3))
    for sample, (ids, kind) in enumerate(rows):
        start = length - len(ids) if left_padding else 0
        place = slice(start, start + len(ids))
        input_ids[sample, place], kinds[sample, place], mask[sample, place] = (
            torch.tensor(ids), torch.tensor(kind), 1)
    grid = torch.tensor(grids)
    vision = config.vision_config
    patch = vision.num_channels * vision.patch_size**2
    pixels = torch.randn(int(grid.prod(-1).sum()), patch, generator=torch.Generator().manual_seed(seed))
    return {"pixel_values": pixels, "image_grid_thw": grid, "input_ids": input_ids, "attention_mask": mask,
            "use_cache": False, "mm_token_type_ids": kinds}


def _hunyuan_case(rows=HUNYUAN_ROWS, beside=("pytree",), strict=False, fails_with="data-dependent"):
    """The catalogue's HunYuan-VL prefill traced at its first set (2 images of 4 x 4 patches, batch 2) and run at its
    others (3 and 4 images) and at non-square grids of other sizes, several images per sample, padding left or
    right; the dynamic shapes guessed from the first two sets."""
    import autopatch
    from autopatch.dynamic_shapes import fit_to_signature
    from autopatch.models import tiny

    arch = tiny.architecture("hunyuan_vl", "vlm")
    sets = {}

    def build():
        model = tiny.build(arch)
        sets.update(enumerate(tiny.inputs(model, arch, "prefill", k) for k in range(3)))
        config = model.config
        mixed = [_hunyuan_batch(config, [[3, (4, 6), 2], [1, (6, 4), 5, (4, 4), 1]], seed=1),
                 _hunyuan_batch(config, [[2, (8, 6), 3, (4, 10), 2, (6, 6), 1]], seed=2),
                 _hunyuan_batch(config, [[5, (10, 4)], [2, (4, 8), 1], [7, (6, 8), 4]], seed=3, left_padding=False)]
        return model, sets[0], sets[1], [sets[1], sets[2], *mixed]

    def shapes(model):
        return fit_to_signature(model, autopatch.guess_dynamic_shapes(sets[0], sets[1]))

    return Proof("hunyuan_vl/prefill" + "-strict" * strict, build, rows=tuple(rows), fails_with=fails_with,
                 beside=beside, strict=strict, shapes=shapes)


@V5
@pytest.mark.parametrize("left_out", HUNYUAN_ROWS, ids=lambda row: row.rsplit("hunyuan_vl_", 1)[1])
def test_hunyuan_vl_export_fails_with_any_row_left_out(make_agent, left_out):
    others = tuple(row for row in HUNYUAN_ROWS if row != left_out)
    case = _hunyuan_case((left_out,), beside=("pytree", *others),
                         fails_with=HUNYUAN_FAILS[left_out.rsplit("hunyuan_vl_", 1)[1]])
    proving.fails_without(case, make_agent)


@V5
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_hunyuan_vl_prefill_matches_eager_at_other_images(make_agent, strict):
    proving.exports_with(_hunyuan_case(strict=strict), make_agent)


@V5
def test_hunyuan_vl_eager_is_unchanged_with_the_rows_installed(make_agent):
    model, _, _, runs = _hunyuan_case().build()
    with torch.no_grad():
        before = model(**runs[-1]).logits
    make_agent(registry.PATCHES, _selected(HUNYUAN_ROWS))
    with torch.no_grad():
        assert torch.equal(model(**runs[-1]).logits, before)  # outside export: the originals


def _hunyuan_model():
    from autopatch.models import tiny

    return tiny.build(tiny.architecture("hunyuan_vl", "vlm"))


@V5
def test_hunyuan_vl_rope_index_equals_upstream():
    """The loop-free rope index against HunYuan-VL's own on random batches: 0 to 3 images per sample of 2 to 8
    patches a side, spans with their begin and end tokens or without (the run is the grid alone), padding left or
    right, with and without a mask. A batch upstream refuses (two images with no text between them make one span:
    spans and grids do not pair) fails a check here."""
    language = _hunyuan_model().model
    config = language.config
    rng = random.Random(0)
    refused = 0
    for trial in range(150):
        sides = (2, 4, 6, 8)
        samples = [[rng.randint(1, 3), *(item for _ in range(rng.randint(0, 3)) for item in (
            (rng.choice(sides), rng.choice(sides)), rng.randint(0, 6)))] for _ in range(rng.randint(1, 3))]
        batch = _hunyuan_batch(config, samples, seed=trial, left_padding=rng.random() < 0.5)
        ids, kinds, mask, grid = (batch[k] for k in ("input_ids", "mm_token_type_ids", "attention_mask",
                                                     "image_grid_thw"))
        if rng.random() < 0.3:  # unframed: every span without its first and last token (those dropped by the mask)
            starts = kinds.bool() & ~torch.nn.functional.pad(kinds[:, :-1].bool(), (1, 0))
            ends = kinds.bool() & ~torch.nn.functional.pad(kinds[:, 1:].bool(), (0, 1))
            mask = mask * ~(starts | ends)
        if grid.shape[0] == 0:
            grid = None
        for attention_mask in (mask, None) if bool(mask.all()) else (mask,):
            try:
                expected = language.get_rope_index(ids, kinds, grid, attention_mask)
            except ValueError:  # upstream: spans and grids do not pair
                refused += 1
                with pytest.raises(RuntimeError):
                    hunyuan_vl.rope_index(language, ids, kinds, grid, attention_mask)
                continue
            got = hunyuan_vl.rope_index(language, ids, kinds, grid, attention_mask)
            for e, g in zip(expected, got):
                assert e.dtype == g.dtype and torch.equal(e, g), (trial, samples)
    assert 0 < refused < 60, refused


@V5
def test_hunyuan_vl_merger_and_patch_embeddings_equal_upstream():
    """The merger for every image at once against upstream's per-image loop (the tower's own, as the original
    forward runs it), and the patch embeddings' learned positions by vision_utils' bilinear taps against
    F.interpolate per image. Equal to float rounding, asserted at 1e-5: the merger's convolution is one matrix
    product over every block (measured: 2.1e-6 at most on outputs up to 4.3); the taps' sample points are computed
    in another order than F.interpolate's, on a 128-cell table (float32 steps of 7.6e-6 there), and summed in
    another order (measured: 1.0e-6 at most)."""
    tower = _hunyuan_model().model.vision_tower
    rng = random.Random(2)
    with torch.no_grad():
        for _ in range(20):
            grid = torch.tensor([[1, rng.randint(2, 12), rng.randint(2, 12)] for _ in range(rng.randint(1, 4))])
            pixels = torch.randn(int(grid.prod(-1).sum()), tower.config.num_channels * tower.config.patch_size**2)
            hidden = torch.randn(1, int(grid.prod(-1).sum()), tower.config.hidden_size)
            expected = torch.cat([tower.patch_merger(item, size=(h, w)) for (_, h, w), item in zip(
                grid.tolist(), torch.split(hidden, grid.prod(-1).tolist(), dim=1))], dim=1)
            got = hunyuan_vl.merger_packed(type(tower.patch_merger).forward, tower.patch_merger, hidden, grid)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(hunyuan_vl.patch_embed_packed(tower.embeddings, pixels, grid),
                                       tower.embeddings(pixels, grid), rtol=1e-5, atol=1e-5)


# --- Nemotron-H-Omni (5.23): the RADIO tower packs the images' patches; its rows and the model's feature row ----

NEMOTRON_ROWS = tuple(f"transformers.vision.{row.model}_{row.name}" for row in packed_rows.OWN_ROWS
                      if row.model in ("radio", "nemotron_h_omni"))
#: Without a row, measured with the others on: the position grid's resampling compares the image's sides in a Python
#: `if`; the attention's per-image split by lengths.tolist() guards the chunk sizes; `len(sequence_lengths) > 1` fixes
#: the image count the export was told is dynamic; the per-image pixel shuffle views each grid at int(side * 0.5).
NEMOTRON_FAILS = {"radio_embed_packed": r"u1 < Max\(u1, u2\)",
                  "radio_attention_packed": r"data-dependent expression u\d+ > 1",
                  "radio_packed_every_count": r"Constraints violated \(images\)",
                  "nemotron_h_omni_image_features_packed": r"data-dependent expression TruncToInt"}


@functools.cache
def _nemotron_model():
    """The catalogue's tiny Nemotron-H-Omni, built once for the module (10 s; exports do not change it)."""
    from autopatch.models import tiny

    return tiny.build(tiny.architecture("nemotron_h_omni", "vlm")).eval()


def _nemotron_pixels(config, grids, seed):
    vision = config.vision_config
    patches = sum(rows * columns for rows, columns in grids)
    return {"pixel_values": torch.randn(patches, vision.num_channels * vision.patch_size**2,
                                        generator=torch.Generator().manual_seed(seed)),
            "image_grid_hw": torch.tensor(grids)}


def _nemotron_batch(config, samples, seed, left_padding=True):
    """A prefill batch as Nemotron-H-Omni's processor writes it: ``samples`` lists per sample text runs (a count of
    tokens) and images (``(rows, columns)`` in patches), an image's ``rows * columns / 4`` placeholder tokens where
    it stands; shorter samples padded (left or right) and masked."""
    rng, image_token = random.Random(seed), config.image_token_id
    rows, grids = [], []
    for items in samples:
        ids = []
        for item in items:
            if isinstance(item, int):
                ids += [rng.randrange(5, image_token) for _ in range(item)]
            else:
                ids += [image_token] * (item[0] * item[1] // 4)
                grids.append(list(item))
        rows.append(ids)
    length = max(len(ids) for ids in rows)
    input_ids, mask = (torch.zeros(len(rows), length, dtype=torch.long) for _ in range(2))
    for sample, ids in enumerate(rows):
        start = length - len(ids) if left_padding else 0
        input_ids[sample, start:start + len(ids)], mask[sample, start:start + len(ids)] = torch.tensor(ids), 1
    return {**_nemotron_pixels(config, grids, seed), "input_ids": input_ids, "attention_mask": mask,
            "use_cache": False}


class _NemotronFeatures(torch.nn.Module):
    """Nemotron-H-Omni's get_image_features, its features concatenated as its forward does."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def forward(self, pixel_values, image_grid_hw):
        return torch.cat(self.inner.get_image_features(pixel_values, image_grid_hw).pooler_output)


def _nemotron_features_case(rows=NEMOTRON_ROWS, beside=(), fails_with="data-dependent"):
    """The tower and the feature merge (every row acts there), traced at 2 images and run at other counts and
    non-square grids. The merged-token count bounded: the patch count, equated with the grid's (data, unbacked),
    must range within it (an unbounded 4 * Dim spans past int64's largest)."""
    def build():
        model = _nemotron_model()
        sets = [_nemotron_pixels(model.config, grids, seed) for seed, grids in enumerate(
            ([(4, 4), (4, 8)], [(4, 4), (6, 4), (2, 8)], [(6, 6)], [(2, 2), (8, 4), (4, 10), (6, 2)]))]
        return _NemotronFeatures(model).eval(), sets[0], sets[1], sets[1:]

    return Proof("nemotron_h_omni/image features", build, rows=tuple(rows), fails_with=fails_with, beside=beside,
                 shapes=lambda _: {"pixel_values": {0: 4 * Dim("merged", max=4096)},
                                   "image_grid_hw": {0: Dim("images")}})


@V5
@pytest.mark.parametrize("left_out", NEMOTRON_ROWS, ids=lambda row: row.rsplit(".", 1)[1])
def test_nemotron_h_omni_features_fail_with_any_row_left_out(make_agent, left_out):
    others = tuple(row for row in NEMOTRON_ROWS if row != left_out)
    case = _nemotron_features_case((left_out,), beside=others, fails_with=NEMOTRON_FAILS[left_out.rsplit(".", 1)[1]])
    proving.fails_without(case, make_agent)


def _nemotron_prefill_case():
    """The catalogue's prefill traced at its first set (2 images of 4 x 4 patches, batch 2, left-padded; the shapes
    guessed from it and its second) and run at its third (4 images) and at batches of several images per sample
    of other, non-square grids, padded left or right."""
    import autopatch
    from autopatch.dynamic_shapes import fit_to_signature
    from autopatch.models import tiny

    arch = tiny.architecture("nemotron_h_omni", "vlm")
    sets = {}

    def build():
        model = _nemotron_model()
        sets.update(enumerate(tiny.inputs(model, arch, "prefill", k) for k in range(3)))
        config = model.config
        mixed = [_nemotron_batch(config, [[3, (4, 6), 2], [1, (6, 4), 5, (2, 2), 1]], seed=1),
                 _nemotron_batch(config, [[5, (2, 8)], [2, (4, 4), 1], [7, (8, 6), 4, (4, 10), 2]], seed=3,
                                 left_padding=False)]
        return model, sets[0], sets[1], [sets[2], *mixed]

    def shapes(model):
        return fit_to_signature(model, autopatch.guess_dynamic_shapes(sets[0], sets[1]))

    return Proof("nemotron_h_omni/prefill", build, rows=NEMOTRON_ROWS, fails_with=NEMOTRON_FAILS["radio_embed_packed"],
                 beside=("pytree",), shapes=shapes)


@V5
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_nemotron_h_omni_features_match_eager_at_other_images(make_agent, strict):
    proving.exports_with(dataclasses.replace(_nemotron_features_case(), strict=strict), make_agent)


@V5
def test_nemotron_h_omni_prefill_matches_eager_at_other_images(make_agent):
    """The whole model, non-strict (~40 s on a loaded machine: its hybrid Mamba text model; the sweep's strict
    step exports it strict)."""
    proving.exports_with(_nemotron_prefill_case(), make_agent)


@V5
def test_nemotron_h_omni_embeddings_and_merge_equal_upstream():
    """Bit for bit, on random layouts (1 to 4 images of 1 to 24 patches a side for the embeddings, even sides for
    the merge): the patch embeddings' positions resampled for every patch at once against upstream's per-image
    F.interpolate (the source it reproduces is the one measured: its fingerprint), and the merged features
    against upstream's per-image pixel shuffle (the tower eager, its original code, in both)."""
    from autopatch import fingerprint
    from autopatch.areas.packed_vision import nemotron_h_omni
    from transformers.models.radio import modeling_radio

    assert fingerprint.of(modeling_radio.RadioPatchEmbeddings._interpolate_position_embedding) == "6b7cb714a93f"
    model = _nemotron_model()
    embeddings = model.vision_model.embeddings
    upstream = type(model).get_image_features
    rng = random.Random(4)
    with torch.no_grad():
        for trial in range(8):
            grids = [(rng.randint(1, 24), rng.randint(1, 24)) for _ in range(rng.randint(1, 4))]
            pixels = _nemotron_pixels(model.config, grids, trial)
            got = nemotron_h_omni.radio_embed_packed(embeddings, pixels["pixel_values"], pixels["image_grid_hw"])
            assert torch.equal(got, embeddings(pixels["pixel_values"], pixels["image_grid_hw"])), grids
            even = _nemotron_pixels(model.config, [(2 * rng.randint(1, 6), 2 * rng.randint(1, 6))
                                                   for _ in range(rng.randint(1, 4))], trial)
            expected = torch.cat(upstream(model, **even).pooler_output)
            got = nemotron_h_omni.nemotron_h_omni_image_features(upstream, model, **even).pooler_output
            assert len(got) == 1 and torch.equal(got[0], expected)


def _inkling_prefill_case(strict=False):
    """Inkling's multimodal model (the catalogue's): its prefill traced at the first set (batch 2, 4 patch volumes
    per sample; the shapes guessed from it and the second) and run at the third (batch 4), every size the
    placeholder count reads (batch, text, patch volumes) other than traced."""
    import autopatch
    from autopatch.dynamic_shapes import fit_to_signature
    from autopatch.models import tiny

    arch = tiny.architecture("inkling_mm_model", "vlm")
    sets = {}

    def build():
        model = tiny.build(arch)
        sets.update(enumerate(tiny.inputs(model, arch, "prefill", k) for k in range(3)))
        return model, sets[0], sets[1], [sets[2]]

    def shapes(model):
        return fit_to_signature(model, autopatch.guess_dynamic_shapes(sets[0], sets[1]))

    return Proof("inkling_mm_model/prefill", build, rows=("transformers.vision.inkling_placeholder_count",),
                 fails_with="not a subset of src_bound", beside=("pytree",), shapes=shapes,
                 strict=strict)


@V5
def test_inkling_prefill_fails_without_its_placeholder_count(make_agent):
    """Without the row the placeholder check's selected count stops the export (torch's range check)."""
    proving.fails_without(_inkling_prefill_case(), make_agent)


@V5
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_inkling_prefill_matches_eager_at_other_sizes(make_agent, strict):
    proving.exports_with(_inkling_prefill_case(strict), make_agent)
