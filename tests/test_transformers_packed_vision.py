"""transformers.vision.*_packed and qwen2_vl_rope_index: a Qwen2-VL prefill (transformers 5.23) whose images
are packed into one patch sequence, exported with the number of images, their sizes, the batch and the text
length all dynamic.

Upstream reads image_grid_thw and mm_token_type_ids in Python four times (vision positions, per-frame attention
chunks, per-image feature split, the language model's 3-axis positions). Each row is needed (the export fails
with any one left out); with all four the program matches eager on batches with other images, grids and
lengths, and eager is unchanged."""

import random

import pytest
import torch
import transformers
from torch.export import Dim

import autopatch
from autopatch import registry
from autopatch.patches import transformers_packed_vision as packed

pytestmark = pytest.mark.requires("transformers>=5.13")

IMAGE, VIDEO, VISION_START = 120, 121, 122
MERGE = 2  # spatial_merge_size: 2x2 patches make one language-model token
PATCH_DIM = 3 * 2 * 4 * 4  # channels * temporal_patch_size * patch_size**2
ROWS = ("transformers.vision.qwen2_vl_patch_positions_packed", "transformers.vision.qwen2_vl_attention_packed",
        "transformers.vision.qwen2_vl_image_features_packed", "transformers.vision.qwen2_vl_rope_index")
STRICT_ROW = "transformers.vision.qwen2_vl_placeholder_check_packed"  # what strict=True needs on top


def _build():
    vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2, patch_size=4,
                  spatial_merge_size=MERGE, temporal_patch_size=2, in_channels=3)
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "mrope_section": [2, 2, 4], "rope_theta": 10000.0})
    config = transformers.Qwen2VLConfig(vision_config=vision, text_config=text, image_token_id=IMAGE,
                                        video_token_id=VIDEO, vision_start_token_id=VISION_START,
                                        bos_token_id=0, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return transformers.Qwen2VLForConditionalGeneration(config).eval()


def _prefill(grids, text_len, seed):
    """One image per sample (grid (frames, rows, columns) in patches) after a first text token, then the text;
    shorter samples are left-padded (attention mask 0)."""
    g = torch.Generator().manual_seed(seed)
    ids, kinds, pixels = [], [], []
    for frames, rows, columns in grids:
        tokens = frames * rows * columns // MERGE**2
        text = torch.randint(2, 100, (text_len,), generator=g)
        ids.append(torch.cat([text[:1], torch.full((tokens,), IMAGE), text[1:]]))
        kinds.append(torch.cat([torch.zeros(1), torch.ones(tokens), torch.zeros(text_len - 1)]).int())
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
BATCH, SEQ = Dim("batch"), Dim("seq")
SHAPES = {"input_ids": {0: BATCH, 1: SEQ}, "attention_mask": {0: BATCH, 1: SEQ},
          "mm_token_type_ids": {0: BATCH, 1: SEQ}, "pixel_values": {0: MERGE**2 * Dim("merged")},
          "image_grid_thw": {0: Dim("images")}}


def _export(model, strict=False):
    with torch.no_grad():
        return torch.export.export(model, (), kwargs=TRACED, dynamic_shapes=SHAPES, strict=strict)


def _with(make_agent, ids):
    """The real entry points, the pytree family (the prefill returns a DynamicCache) and the rows ``ids``."""
    return make_agent([s for s in registry.PATCHES if s.family == "pytree" or s.id in ids])


@pytest.mark.parametrize("left_out", ROWS, ids=lambda row: row.rsplit(".", 1)[1])
def test_export_fails_with_any_row_left_out(make_agent, left_out):
    model = _build()
    _with(make_agent, set(ROWS) - {left_out})
    with pytest.raises(Exception, match="data-dependent|specialized it to be a constant"):
        _export(model)


def test_strict_program_refuses_other_image_sizes_without_the_placeholder_row(make_agent):
    """Dynamo fixes the patch count while formatting a check's message; the export itself does not fail."""
    model = _build()
    _with(make_agent, ROWS)
    program = _export(model, strict=True)
    with torch.no_grad(), pytest.raises(Exception, match="Guard failed"):
        program.module()(**OTHERS[0])


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_exported_prefill_matches_eager_on_other_images_and_lengths(make_agent, strict):
    model = _build()
    _with(make_agent, ROWS + (STRICT_ROW,))
    program = _export(model, strict=strict)
    used = autopatch.last_export_report()["patches"]
    assert all(used.get(row, 0) >= 1 for row in ROWS + (STRICT_ROW,)), used
    for inputs in OTHERS:
        with torch.no_grad():
            expected = model(**inputs).logits
            got = program.module()(**inputs).logits
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_eager_is_unchanged_with_the_rows_installed(make_agent):
    model = _build()
    with torch.no_grad():
        before = model(**OTHERS[0]).logits
    _with(make_agent, ROWS + (STRICT_ROW,))
    with torch.no_grad():
        assert torch.equal(model(**OTHERS[0]).logits, before)  # outside export: the originals


@pytest.mark.parametrize("include_temporal", [False, True])
def test_patch_positions_equal_upstream(include_temporal):
    from transformers import vision_utils

    grids = torch.tensor([[1, 4, 4], [2, 4, 6], [3, 8, 2], [1, 2, 10]])
    for merge in (MERGE, torch.tensor([2, 2, 1, 2])):  # one merge size, or one per image
        expected = vision_utils.get_vision_position_ids(grids, merge, include_temporal)
        assert torch.equal(packed.packed_position_ids(grids, merge, include_temporal), expected)


def test_rope_index_equals_upstream_on_mixed_batches():
    """Random batches: text runs, images and videos (several per sample, in any order), left padding, with and
    without an attention mask."""
    model = _build().model
    rng = random.Random(0)
    for _ in range(60):
        samples, grids = [], {1: [], 2: []}
        for _ in range(rng.randint(1, 3)):
            kinds = [0] * rng.randint(1, 3)
            for _ in range(rng.randint(0, 3)):
                kind = rng.choice((1, 2))
                grid = (rng.randint(1, 3), MERGE * rng.randint(1, 3), MERGE * rng.randint(1, 3))
                grids[kind].append(grid)
                kinds += [kind] * (grid[0] * grid[1] * grid[2] // MERGE**2) + [0] * rng.randint(1, 3)
            samples.append((rng.randint(0, 2), kinds))  # (left padding, token kinds)
        length = max(pad + len(k) for pad, k in samples)
        kinds = torch.zeros(len(samples), length, dtype=torch.int)
        mask = torch.zeros(len(samples), length, dtype=torch.long)
        for row, (pad, sample) in enumerate(samples):
            kinds[row, length - len(sample):] = torch.tensor(sample)
            mask[row, length - len(sample):] = 1
        ids = torch.where(kinds == 1, IMAGE, torch.where(kinds == 2, VIDEO, 5))
        image_grid, video_grid = (torch.tensor(grids[k]) if grids[k] else None for k in (1, 2))
        for attention_mask in (mask, None):
            expected = model.get_rope_index(ids, kinds, image_grid, video_grid, attention_mask)
            got = packed.qwen2_vl_rope_index(model, ids, kinds, image_grid, video_grid, attention_mask)
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
