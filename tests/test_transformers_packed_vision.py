"""transformers.vision.<model>_*_packed and <model>_rope_index: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V and Qwen3.5
prefills (5.23), and the three Qwen models' on 4.57 (their ``*_4x`` rows), whose images are packed into one patch
sequence, exported with the number of images, their sizes, the batch and the text length all dynamic.

Upstream reads image_grid_thw and the token kinds in Python four times (vision positions, per-frame attention
chunks, per-image feature split, the language model's 3-axis positions; Qwen2.5-VL also lists attention windows
per image, Qwen3-VL pads a tensor sized by the image count, 4.57 checks the placeholder count in a Python if).
Each row is needed (the export fails with any one left out); with all of them the program matches eager on
batches with other images, grids and lengths, in both export modes, and eager is unchanged."""

import random

import pytest
import torch
import transformers
from torch.export import Dim

import autopatch
from autopatch import registry
from autopatch.areas.packed_vision import rows as packed_rows
from autopatch.areas.packed_vision import packed as packed
from conftest import requires, run_py

IMAGE, VIDEO, VISION_START = 120, 121, 122
MERGE = 2  # spatial_merge_size: 2x2 patches make one language-model token
PATCH_DIM = 3 * 2 * 4 * 4  # channels * temporal_patch_size * patch_size**2
V5, V4 = requires("transformers>=5.13"), requires("transformers<5")
#: 5.23's models, and 4.57's ("<model>_4x"), each run where its transformers is installed.
MODELS_5 = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "qwen3_5")
MODELS_4 = tuple(f"{m}_4x" for m in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"))
MODELS = [*(pytest.param(m, marks=V5) for m in MODELS_5), *(pytest.param(m, marks=V4) for m in MODELS_4)]


def _rows(model):
    """The rows a non-strict export of ``model`` needs."""
    if model in MODELS_4:
        name = model[:-3]
        extra = {"qwen2_5_vl": ("windows_packed",), "qwen3_vl": ("position_grid",)}.get(name, ())
        return tuple(f"transformers.vision.{name}_{row}_4x" for row in (
            "rot_pos_emb", "attention_packed", "image_features_packed", "placeholder_check", "rope_index", *extra))
    rows = [f"transformers.vision.{model}_{row}"
            for row in ("patch_positions_packed", "attention_packed", "image_features_packed", "rope_index")]
    if model == "qwen2_5_vl":
        rows.append("transformers.vision.qwen2_5_vl_windows_packed")
    if model in ("qwen3_vl", "qwen3_5"):
        rows.append(f"transformers.vision.{model}_interpolation_packed")
    if model == "qwen3_5":  # its text model's linear-attention layers
        rows.append("transformers.qwen3_5.gated_delta_scan")
    return tuple(rows)


def _strict_rows(model):
    """What strict=True needs on top (Qwen2.5-VL and 4.57: nothing; the export test shows it)."""
    if model in packed_rows.PLACEHOLDER_CHECK_STRICT:
        return (f"transformers.vision.{model}_placeholder_check_packed",)
    return ()


TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256}
TOKENS = {"image_token_id": IMAGE, "video_token_id": VIDEO, "vision_start_token_id": VISION_START}


def _build(model="qwen2_vl"):
    tower = {"depth": 2, "num_heads": 4, "patch_size": 4, "spatial_merge_size": MERGE, "temporal_patch_size": 2,
             "in_channels": 3}
    rope = {"rope_type": "default", "mrope_section": [2, 2, 4], "rope_theta": 10000.0}
    if model == "qwen2_vl_4x":  # 4.57: the text settings at the top level, mrope in rope_scaling
        config = transformers.Qwen2VLConfig(
            vision_config={**tower, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2}, **TEXT, **TOKENS,
            rope_scaling={"type": "mrope", "mrope_section": rope["mrope_section"]})
        cls = transformers.Qwen2VLForConditionalGeneration
    elif model == "qwen2_5_vl_4x":
        config = transformers.Qwen2_5_VLConfig(
            vision_config={**tower, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64,
                           "window_size": 16, "fullatt_block_indexes": [1], "tokens_per_second": 2},
            text_config={**TEXT, "rope_scaling": {"type": "mrope", "mrope_section": rope["mrope_section"]}},
            **TOKENS)
        cls = transformers.Qwen2_5_VLForConditionalGeneration
    elif model == "qwen3_vl_4x":
        config = transformers.Qwen3VLConfig(
            vision_config={**tower, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64,
                           "num_position_embeddings": 16, "deepstack_visual_indexes": [0]},
            text_config={**TEXT, "head_dim": 16, "rope_scaling": {"rope_type": "default", "mrope_interleaved": True,
                                                                 "mrope_section": rope["mrope_section"]}},
            **TOKENS)
        cls = transformers.Qwen3VLForConditionalGeneration
    elif model == "qwen2_vl":
        config = transformers.Qwen2VLConfig(
            vision_config={**tower, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2},
            text_config={**TEXT, "rope_parameters": rope}, **TOKENS, bos_token_id=0, eos_token_id=1, pad_token_id=0)
        cls = transformers.Qwen2VLForConditionalGeneration
    elif model == "glm4v":  # a 4x4 learned position table resampled per image; half the head dims rotate
        config = transformers.Glm4vConfig(
            vision_config={**tower, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64,
                           "image_size": 16},
            text_config={**TEXT, "rope_parameters": {**rope, "mrope_section": [2, 1, 1],
                                                     "partial_rotary_factor": 0.5}},
            image_token_id=IMAGE, video_token_id=VIDEO, image_start_token_id=VISION_START)
        cls = transformers.Glm4vForConditionalGeneration
    elif model == "qwen3_5":  # a 4x4 learned position grid; text: a linear-attention and a full-attention layer
        config = transformers.Qwen3_5Config(
            vision_config={**tower, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64,
                           "num_position_embeddings": 16},
            text_config={**TEXT, "head_dim": 16, "layer_types": ["linear_attention", "full_attention"],
                         "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
                         "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                         "rope_parameters": {**rope, "mrope_section": [2, 1, 1], "mrope_interleaved": True,
                                             "partial_rotary_factor": 0.5}},
            image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START)
        cls = transformers.Qwen3_5ForConditionalGeneration
    elif model == "qwen2_5_vl":  # 2x2-token windows (the 4x8 image has two per frame), layer 1 attends fully
        config = transformers.Qwen2_5_VLConfig(
            vision_config={**tower, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64,
                           "window_size": 16, "fullatt_block_indexes": [1], "tokens_per_second": 2},
            text_config={**TEXT, "rope_parameters": rope}, **TOKENS)
        cls = transformers.Qwen2_5_VLForConditionalGeneration
    else:  # a 4x4 learned position grid resampled per image, one deepstack layer
        config = transformers.Qwen3VLConfig(
            vision_config={**tower, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64,
                           "num_position_embeddings": 16, "deepstack_visual_indexes": [0]},
            text_config={**TEXT, "head_dim": 16, "rope_parameters": {**rope, "mrope_interleaved": True}}, **TOKENS)
        cls = transformers.Qwen3VLForConditionalGeneration
    torch.manual_seed(0)
    return cls(config).eval()


def _prefill(grids, text_len, seed):
    """One image per sample (grid (frames, rows, columns) in patches) after a first text token and the
    vision-start token (4.x finds images by it), then the text; shorter samples are left-padded (attention
    mask 0)."""
    g = torch.Generator().manual_seed(seed)
    ids, kinds, pixels = [], [], []
    for frames, rows, columns in grids:
        tokens = frames * rows * columns // MERGE**2
        text = torch.randint(2, 100, (text_len,), generator=g)
        ids.append(torch.cat([text[:1], torch.tensor([VISION_START]), torch.full((tokens,), IMAGE), text[1:]]))
        kinds.append(torch.cat([torch.zeros(2), torch.ones(tokens), torch.zeros(text_len - 1)]).int())
        pixels.append(torch.randn(frames * rows * columns, PATCH_DIM, generator=g))
    longest = max(len(i) for i in ids)

    def left_pad(rows_, fill_dtype):
        return torch.stack([torch.cat([torch.zeros(longest - len(r), dtype=fill_dtype), r.to(fill_dtype)])
                            for r in rows_])

    return {"input_ids": left_pad(ids, torch.long), "attention_mask": left_pad([torch.ones(len(i)) for i in ids],
                                                                                torch.long),
            "mm_token_type_ids": left_pad(kinds, torch.int), "pixel_values": torch.cat(pixels),
            "image_grid_thw": torch.tensor(grids)}


TRACED = _prefill([(1, 4, 4), (1, 4, 8)], text_len=5, seed=0)
OTHERS = (_prefill([(1, 4, 4), (2, 4, 6), (1, 8, 4)], text_len=7, seed=1),  # a two-frame image, unequal rows
          _prefill([(1, 6, 6)], text_len=3, seed=2))
#: GLM-4V's: one frame per image, as its processor makes them (its tower's position resampling reads the grid of
#: each frame's index, so a two-frame image is misread in eager too).
OTHERS_ONE_FRAME = (_prefill([(1, 4, 4), (1, 6, 4), (1, 8, 4)], text_len=7, seed=1), OTHERS[1])
# Qwen3.5: a prompt shorter than its convolution kernel (4) pads the linear-attention cache's state, a branch.
BATCH, SEQ = Dim("batch"), Dim("seq", min=4)
SHAPES = {"input_ids": {0: BATCH, 1: SEQ}, "attention_mask": {0: BATCH, 1: SEQ},
          "mm_token_type_ids": {0: BATCH, 1: SEQ}, "pixel_values": {0: MERGE**2 * Dim("merged")},
          "image_grid_thw": {0: Dim("images")}}


def _for(model, inputs):
    """4.57 has no mm_token_type_ids (it finds images by their tokens)."""
    return {k: v for k, v in inputs.items() if not (model in MODELS_4 and k == "mm_token_type_ids")}


def _others(model):
    return OTHERS_ONE_FRAME if model == "glm4v" else OTHERS


def _export(module, model, strict=False):
    with torch.no_grad():
        return torch.export.export(module, (), kwargs=_for(model, TRACED), dynamic_shapes=_for(model, SHAPES),
                                   strict=strict)


def _with(make_agent, ids):
    """The real entry points, the pytree family (the prefill returns a DynamicCache) and the rows ``ids``."""
    return make_agent([s for s in registry.PATCHES if s.family == "pytree" or s.id in ids])


@pytest.mark.parametrize("model, left_out", [
    pytest.param(p.values[0], row, marks=p.marks, id=f"{p.values[0]}-{row.rsplit('.', 1)[1]}")
    for p in MODELS for row in _rows(p.values[0])])
def test_export_fails_with_any_row_left_out(make_agent, model, left_out):
    module = _build(model)
    _with(make_agent, set(_rows(model)) - {left_out})
    # (Without the gated delta row: its chunk loop's guards solve the traced length, "a specialized value".)
    with pytest.raises(Exception, match="data-dependent|specialized it to be a constant|specialized value"):
        _export(module, model)


@pytest.mark.parametrize("model", [pytest.param(m, marks=V5) for m in packed_rows.PLACEHOLDER_CHECK_STRICT])
def test_strict_program_refuses_other_image_sizes_without_the_placeholder_row(make_agent, model):
    """Dynamo fixes the patch count while formatting a check's message; the export itself does not fail."""
    module = _build(model)
    _with(make_agent, _rows(model))
    program = _export(module, model, strict=True)
    with torch.no_grad(), pytest.raises(Exception, match="Guard failed"):
        program.module()(**_others(model)[0])


# Not Qwen3.5 strict: Dynamo stops in its text model's cache (AttributeError: 'DynamicLayer' object has no attribute
# 'dtype'), outside the vision code (README, known limits).
@pytest.mark.parametrize("model, strict", [
    pytest.param(p.values[0], strict, marks=p.marks, id=f"{p.values[0]}-{'strict' if strict else 'non-strict'}")
    for p in MODELS for strict in (False, True) if not (strict and p.values[0] == "qwen3_5")])
def test_exported_prefill_matches_eager_on_other_images_and_lengths(make_agent, model, strict):
    rows = (*_rows(model), *_strict_rows(model))
    module = _build(model)
    _with(make_agent, rows)
    program = _export(module, model, strict=strict)
    used = autopatch.last_export_report()["patches"]
    assert all(used.get(row, 0) >= 1 for row in rows), used
    for inputs in _others(model):
        with torch.no_grad():
            expected = module(**_for(model, inputs)).logits
            got = program.module()(**_for(model, inputs)).logits
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("model", MODELS)
def test_eager_is_unchanged_with_the_rows_installed(make_agent, model):
    rows = (*_rows(model), *_strict_rows(model))
    module = _build(model)
    inputs = _for(model, _others(model)[0])
    with torch.no_grad():
        before = module(**inputs).logits
    _with(make_agent, rows)
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
    its processor writes them), left padding. Yields (ids, kinds, mask, image_grid or None, video_grid or None, grids by kind).
    """
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
                tokens.append(VISION_START)
                if kind == 2 and model == "qwen3_vl":  # a timestamp and a vision start before every frame but the first
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


@pytest.mark.parametrize("model", [pytest.param(m, marks=V5) for m in MODELS_5])
def test_rope_index_equals_upstream_on_mixed_batches(model):
    """The replacement of each 5.23 model against its own get_rope_index, with and without an attention mask."""
    rope = next(row for row in packed_rows.PACKED_VISION_MODELS if row.model == model).rope_index
    replacement = getattr(packed, rope)  # GLM-4V: Qwen3-VL's, with its batches (a vision start before each frame)
    language = _build(model).model
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


@pytest.mark.parametrize("model", MODELS)
def test_zero_code_export_with_the_default_patches(model):
    """The door users take: EXPORT_PATCHES=1 in a fresh interpreter, a plain torch.export.export of the model,
    the default patches installed at once. This found two faults of the broadcasting patch with data-dependent
    sizes: an int beside one (Qwen2.5-VL: sym_ite refused the pair), two of them (Qwen3-VL: a sym_ite torch's
    range analysis cannot bound, KeyError: ITE)."""
    code = f"""
import sys, torch
sys.path.insert(0, "tests")
import test_transformers_packed_vision as t
for name in [{model!r}]:
    model = t._build(name)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=t._for(name, t.TRACED),
                                      dynamic_shapes=t._for(name, t.SHAPES))
        for inputs in t._others(name):
            inputs = t._for(name, inputs)
            torch.testing.assert_close(program.module()(**inputs).logits, model(**inputs).logits,
                                       rtol=1e-4, atol=1e-4)
print("OK")
"""
    result = run_py(code, timeout=600, EXPORT_PATCHES="1")
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("model", [pytest.param(m, marks=V4) for m in MODELS_4])
def test_rope_index_4x_equals_upstream_on_mixed_batches(model):
    """4.57's rules (the kinds read from placeholder ids after vision-start tokens, a group advancing past its
    largest index, dropped tokens at 1; Qwen2.5-VL's whole seconds per grid, images' frames at one time), with and
    without an attention mask."""
    name = model[:-3]
    replacement = getattr(packed, f"{name}_rope_index_4x")
    language = _build(model).model
    rng = random.Random(3)
    for ids, _, mask, image_grid, video_grid, grids in _random_batches(name, seed=2):
        extra = {}
        if name == "qwen2_5_vl" and video_grid is not None and rng.random() < 0.7:  # else 1 s per grid
            extra["second_per_grid_ts"] = torch.tensor([rng.choice((0.5, 1.0, 1.3, 2.0)) for _ in grids[2]])
        for attention_mask in (mask, None):
            expected = language.get_rope_index(ids, image_grid, video_grid, attention_mask=attention_mask, **extra)
            got = replacement(language, ids, image_grid, video_grid, attention_mask=attention_mask, **extra)
            for e, g in zip(expected, got):
                assert e.dtype == g.dtype and torch.equal(e, g)


@pytest.mark.parametrize("model", [pytest.param(m, marks=V4) for m in MODELS_4])
def test_rope_index_4x_without_vision_start_tokens_gives_text_positions_as_upstream(model):
    """4.x counts images by their vision-start tokens: placeholders without one get text positions in eager, and
    the replacement gave them image positions (a program off by 2.5e-3 in the logits, measured on the sweep's
    tiny Qwen2-VL, whose prompts had no vision-start token). A row with some runs opened and others not is
    refused: 4.x pairs its grids with the runs in an order of its own."""
    name = model[:-3]
    replacement = getattr(packed, f"{name}_rope_index_4x")
    language = _build(model).model
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
    tower = _build("qwen2_5_vl_4x").model.visual
    for grids in _random_grids(random.Random(4)):
        index, bounds = tower.get_window_index(grids)
        got_index, got_bounds = packed.qwen2_5_vl_window_index_4x(tower, grids)
        assert torch.equal(got_index, index)
        assert got_bounds.tolist() == torch.tensor(bounds).unique_consecutive().tolist()  # as the caller uses them


@V4
def test_position_grid_4x_equals_upstream():
    """Qwen3-VL's learned positions resampled per image: the same taps (linspace computed as torch does) and
    weights, so the same embeddings, for grids of 1 to 18 patches a side on a 4x4 table."""
    tower = _build("qwen3_vl_4x").model.visual
    with torch.no_grad():
        for grids in _random_grids(random.Random(5)):
            expected = tower.fast_pos_embed_interpolate(grids)
            torch.testing.assert_close(packed.qwen3_vl_position_grid_4x(tower, grids), expected, rtol=0, atol=1e-6)


@V4
@pytest.mark.parametrize("model", MODELS_4)
def test_rot_pos_emb_4x_equals_upstream(model):
    tower = _build(model).model.visual
    for grids in _random_grids(random.Random(6), count=30):
        assert torch.equal(packed.rot_pos_emb_4x(tower, grids), tower.rot_pos_emb(grids))
