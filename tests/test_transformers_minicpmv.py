"""transformers.vision.minicpmv4_7_*: MiniCPM-V 4.7's VLM prefill (5.23), a NaViT-style tower of its own (every
image's patches in one strip, ``target_sizes`` their grids) and a canvas rope index, exported with the number of
images, their sizes, the batch and the text length dynamic.

Upstream reads ``target_sizes`` and the tokens in Python six times (vision_utils' nearest-bucket positions, the
attention's per-image chunks, the window merger's windows and its reorder by them, the merger's per-image folds,
the rope index's walk over the tokens). Each row is needed (the export fails with any one left out); with all of
them the program matches eager at other images, grids, samples and paddings, in both export modes, and each
replacement equals upstream on random layouts."""

import copy
import random

import pytest
import torch

import proving
from autopatch import registry
from autopatch.areas.packed_vision import minicpmv
from autopatch.areas.packed_vision import rows as packed_rows
from conftest import requires
from proving import Proof

V5 = requires("transformers>=5.13")
pytestmark = V5

ROWS = tuple(f"transformers.vision.minicpmv4_7_{row.name}" for row in packed_rows.OWN_ROWS
             if row.model == "minicpmv4_7")
#: Without a row, measured with the others on.
FAILS = {"nearest_positions": "Could not extract specialized integer", "attention_packed": "data-dependent",
         "windows_packed": "Could not extract specialized integer", "window_rows": "data-dependent expression",
         "merger_packed": "Constraints violated", "rope_index": "data-dependent"}
#: Marker ids the tiny config leaves None (its checkpoints set them): given ids, so that frames have markers.
MARKERS = {"image_start_id": 120, "image_end_id": 121, "newline_id": 122, "slice_start_id": 123, "slice_end_id": 124}


def _model(insert_layer_id=1):
    """The catalogue's MiniCPM-V 4.7 with marker ids, its window merger after the tower's second layer (the
    catalogue keeps the config's insert_layer_id, 6, past its two layers: the merger would never run), and one
    full-attention text layer: the rows are the tower's and the rope index's, and the config's Qwen3.5 text layers
    (three linear-attention ones) made each export here cost minutes (the sweep exports the catalogue's own)."""
    from autopatch.models import tiny

    arch = tiny.architecture("minicpmv4_7", "vlm")
    config = tiny.tiny_config(arch.model_type)
    config.text_config.layer_types, config.text_config.num_hidden_layers = ["full_attention"], 1
    torch.manual_seed(0)
    model = tiny.model_class(arch)(config).eval()
    for name, value in MARKERS.items():
        setattr(model.config, name, value)
    model.config.vision_config.insert_layer_id = insert_layer_id
    return model


def _sample(config, items, rng, merge):
    """One sample's ids and token kinds, and its crops' grids: ``items`` are text runs (a count), images ``(h, w)``
    in patches (a crop of ``h // merge * w // merge`` image tokens), or ``((h, w), before, after)``: an image with
    the markers (names of MARKERS) before and after its crop."""
    ids, kinds, grids = [], [], []
    for item in items:
        if isinstance(item, int):
            ids += [rng.randrange(5, 120) for _ in range(item)]
            kinds += [0] * item
            continue
        (h, w), before, after = (item, (), ()) if len(item) == 2 else item
        ids += [MARKERS[marker] for marker in before]
        kinds += [0] * len(before)
        span = (h // merge) * (w // merge)
        ids += [config.image_token_id] * span
        kinds += [1] * span
        grids.append([h, w])
        ids += [MARKERS[marker] for marker in after]
        kinds += [0] * len(after)
    return ids, kinds, grids


def _batch(model, samples, seed, left_padding=True, merge=4):
    """A prefill batch: ``samples`` as ``_sample`` takes them, shorter ones padded (left or right), the patches
    of every crop in one strip as the processor lays them."""
    rng = random.Random(seed)
    built = [_sample(model.config, items, rng, merge) for items in samples]
    length = max(len(ids) for ids, _, _ in built)
    input_ids, kinds, mask = (torch.zeros(len(built), length, dtype=torch.long) for _ in range(3))
    for row, (ids, kind, _) in enumerate(built):
        start = length - len(ids) if left_padding else 0
        place = slice(start, start + len(ids))
        input_ids[row, place], kinds[row, place], mask[row, place] = torch.tensor(ids), torch.tensor(kind), 1
    grids = torch.tensor([grid for _, _, found in built for grid in found], dtype=torch.int32)
    vision = model.config.vision_config
    patches = int(grids.prod(-1).sum())
    pixels = torch.randn(1, vision.num_channels, vision.patch_size, patches * vision.patch_size,
                         generator=torch.Generator().manual_seed(seed))
    return {"pixel_values": pixels, "target_sizes": grids, "input_ids": input_ids, "attention_mask": mask,
            "use_cache": False, "mm_token_type_ids": kinds}


def _framed(grid, after=("image_end_id",)):
    """An image between ``<image>`` and ``after``."""
    return grid, ("image_start_id",), after


def _case(rows=ROWS, beside=("all",), strict=False, fails_with="data-dependent"):
    """The catalogue's prefill traced at its first set (2 samples, an image of 4 x 4 patches each) and run at its
    others (3 and 4 samples) and at batches of other grids, several images per sample (framed by markers or not,
    two sharing a group), padding left or right."""
    import autopatch
    from autopatch.dynamic_shapes import fit_to_signature
    from autopatch.models import tiny

    arch = tiny.architecture("minicpmv4_7", "vlm")
    sets = {}

    def build():
        model = _model()
        sets.update(enumerate(tiny.inputs(model, arch, "prefill", k) for k in range(3)))
        mixed = [
            _batch(model, [[3, _framed((8, 4)), 2], [1, _framed((4, 12), ("image_end_id", "newline_id")), 5,
                                                     (8, 8), 1]], seed=1),
            _batch(model, [[2, _framed((8, 8)), _framed((4, 8)), 3, (12, 4), 2]], seed=2),
            _batch(model, [[5, (16, 8)], [2, _framed((4, 4)), 1], [7, (8, 12), 4]], seed=3, left_padding=False),
        ]
        return model, sets[0], sets[1], [sets[1], sets[2], *mixed]

    def shapes(model):
        return fit_to_signature(model, autopatch.guess_dynamic_shapes(sets[0], sets[1]))

    return Proof("minicpmv4_7/prefill" + "-strict" * strict, build, rows=tuple(rows), fails_with=fails_with,
                 beside=beside, strict=strict, shapes=shapes)


@pytest.mark.parametrize("left_out", ROWS, ids=lambda row: row.rsplit("minicpmv4_7_", 1)[1])
def test_minicpmv4_7_export_fails_with_any_row_left_out(make_agent, left_out):
    case = _case((left_out,), fails_with=FAILS[left_out.rsplit("minicpmv4_7_", 1)[1]])
    proving.fails_without(case, make_agent)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_minicpmv4_7_prefill_matches_eager_at_other_images(make_agent, strict):
    proving.exports_with(_case(strict=strict), make_agent)


def test_minicpmv4_7_eager_is_unchanged_with_the_rows_installed(make_agent):
    model, _, _, runs = _case().build()
    with torch.no_grad():
        before = model(**runs[-1]).logits
    make_agent(registry.PATCHES, ",".join(ROWS))
    with torch.no_grad():
        assert torch.equal(model(**runs[-1]).logits, before)  # outside export: the originals


def test_minicpmv4_7_nearest_positions_equal_upstream():
    """The buckets of every patch against vision_utils' loop, over random grids (1 to 40 patches a side, wider than
    the learned grid too) and grid sides."""
    from transformers import vision_utils

    rng = random.Random(0)
    for trial in range(60):
        sizes = torch.tensor([[rng.randint(1, 40), rng.randint(1, 40)] for _ in range(rng.randint(1, 5))],
                             dtype=torch.int32)
        side = rng.choice((4, 7, 16, 70))
        expected = vision_utils.get_vision_nearest_position_ids(sizes, side)
        assert torch.equal(minicpmv.nearest_position_ids(sizes, side), expected), (sizes, side)


def test_minicpmv4_7_merger_equals_upstream():
    """The merger's folds against upstream's loop, one round (the config's) and two, over random grids; the
    packed sequence may hold more patches than the grids count (upstream reads the first ones)."""
    from transformers.models.minicpmv4_7 import modeling_minicpmv4_7 as upstream

    config = copy.deepcopy(_model().config)
    rng = random.Random(1)
    for times in (1, 2):
        config.merger_times = times
        merger = upstream.MiniCPMV4_7Merger(config).eval()
        side = 2**times
        for trial in range(8):
            sizes = torch.tensor([[side * rng.randint(1, 4), side * rng.randint(1, 4)]
                                  for _ in range(rng.randint(1, 4))], dtype=torch.int32)
            hidden = torch.randn(1, int(sizes.prod(-1).sum()) + rng.randint(0, 5), config.vision_config.hidden_size)
            with torch.no_grad():
                expected = torch.cat(merger(hidden, sizes))
                (got,) = minicpmv.merger_packed(merger, hidden, sizes)
            torch.testing.assert_close(got, expected)


def _random_sample(rng, slices: bool, merge: int):
    """Text runs and 0 to 3 images (1 to 3 merged tokens a side; framed by markers or not, two framed ones sometimes
    in one group: only markers between them); with ``slices``, an image followed by a detail slice (a crop that
    ``<slice>`` opens)."""
    items = [rng.randint(1, 3)]
    for _ in range(rng.randint(0, 3)):
        grid = (merge * rng.randint(1, 3), merge * rng.randint(1, 3))
        if rng.random() < 0.5:
            after = rng.choice(((), ("image_end_id",), ("image_end_id", "newline_id"), ("newline_id",)))
            items.append((grid, ("image_start_id",), after))
            gap = rng.choice((0, 0, 1, 2, 4))  # 0: a framed image next shares the group
        else:
            if not isinstance(items[-1], int):
                items.append(1)  # an unframed crop right after another would make one run with it
            items.append((grid, (), ()))
            gap = rng.randint(1, 4)
        if gap:
            items.append(gap)
    if slices:
        items += [((merge, merge), ("image_start_id",), ("image_end_id",)),
                  ((merge, 2 * merge), ("slice_start_id",), ("slice_end_id",)), 2]
    return items


def test_minicpmv4_7_rope_index_equals_upstream():
    """The loop-free rope index against MiniCPM-V 4.7's own over random batches: 1 to 3 samples of text and 0 to 3
    images each (framed by markers or not, groups of frames, corners after a crop or none), padding left or right,
    with and without a mask, both downsample modes. A batch with detail slices (upstream lays them out) fails a
    runtime check here."""
    from transformers.models.minicpmv4_7 import modeling_minicpmv4_7 as upstream

    language = _model().model
    original = upstream.MiniCPMV4_7Model.get_rope_index
    rng = random.Random(2)
    refused = 0
    for trial in range(150):
        mode = rng.choice(("16x", "4x"))
        merge = 4 if mode == "16x" else 2
        slices = rng.random() < 0.1
        samples = [_random_sample(rng, slices and sample == 0, merge) for sample in range(rng.randint(1, 3))]
        batch = _batch(language, samples, seed=trial, left_padding=rng.random() < 0.5, merge=merge)
        ids, kinds, mask, sizes = (batch[k] for k in ("input_ids", "mm_token_type_ids", "attention_mask",
                                                      "target_sizes"))
        if sizes.shape[0] == 0:
            continue
        for attention_mask in (mask, None) if bool(mask.all()) else (mask,):
            arguments = dict(mm_token_type_ids=kinds, target_sizes=sizes.long(), downsample_mode=mode,
                             attention_mask=attention_mask)
            expected = original(language, ids, **arguments)
            if slices:
                refused += 1
                with pytest.raises(RuntimeError):
                    minicpmv.rope_index(original, language, ids, **arguments)
                continue
            got = minicpmv.rope_index(original, language, ids, **arguments)
            for g, e in zip(got, expected):
                assert torch.equal(g, e), (samples, attention_mask, g, e)
    assert refused
