"""Longformer's and LED's window attention (``autopatch/areas/local_attention``), in the regime released models run:
a window of 512 tokens (``attention_window``, the config class's), Longformer's 4098 positions (longformer-base-4096's;
the config class's 512 would stop real texts at 510 tokens), right-padded batches, rows with different numbers of
global tokens and batches with none, texts shorter than a window, a multiple of it and across several windows."""

from __future__ import annotations

import pytest
import torch

import proving
from autopatch.models import tiny
from conftest import requires
from proving import Proof

LONGFORMER_BAND = "transformers.local_attention.longformer_band"
LONGFORMER_UNPADDED = "transformers.local_attention.longformer_unpadded"
LED_BAND = "transformers.local_attention.led_band"
LED_UNPADDED = "transformers.local_attention.led_unpadded"
# Without the rows: the chunk count read back from torch.div, then the branch on global tokens.
DATA_DEPENDENT = "data-dependent"


def _text(batch: int, length: int, real: list, globals_: list, seed: int, pad_token_id: int) -> dict:
    """Right-padded ids: row i holds ``real[i]`` tokens, its first ``globals_[i]`` marked global (a question's
    tokens, as Longformer's QA head marks them), the rest local."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 90, (batch, length), generator=generator)
    mask = torch.zeros(batch, length, dtype=torch.long)
    marked = torch.zeros(batch, length, dtype=torch.long)
    for row, (count, marks) in enumerate(zip(real, globals_)):
        mask[row, :count] = 1
        marked[row, :marks] = 1
        ids[row, count:] = pad_token_id
    return {"input_ids": ids, "attention_mask": mask, "global_attention_mask": marked}


# (batch, length, real tokens per row, global tokens per row): traced below one window (200 of 512), the second set
# gives the dynamic sizes; the runs: a multiple of the window, a batch without global tokens across three windows,
# a short text, a wide spread of padding.
TRACED, OTHER = (2, 200, [200, 150], [3, 0]), (3, 300, [300, 260, 100], [1, 2, 0])
RUNS = ((3, 512, [512, 400, 30], [1, 0, 4]), (2, 1030, [1030, 900], [0, 0]), (1, 40, [40], [2]),
        (4, 700, [700, 513, 511, 256], [6, 1, 0, 3]))


def longformer_case(rows: tuple, fails_with: str, fails_at_run: bool = False) -> Proof:
    def build():
        config = tiny.tiny_config("longformer")
        config.max_position_embeddings = 4098
        model = tiny.model_class(tiny.architecture("longformer", "encoder"))(config).eval()
        sets = [_text(*spec, seed, config.pad_token_id) for seed, spec in enumerate((TRACED, OTHER, *RUNS))]
        return model, sets[0], sets[1], sets[2:]

    return Proof("longformer/masked-lm (window 512)", build, rows=rows, fails_with=fails_with, beside=("all",),
                 fails_at_run=fails_at_run)


def led_case(rows: tuple, fails_with: str, fails_at_run: bool = False) -> Proof:
    """LED's seq2seq forward: its encoder's window attention, the decoder's 4 tokens against the whole text."""
    def build():
        config = tiny.tiny_config("led")
        model = tiny.model_class(tiny.architecture("led", "seq2seq"))(config).eval()
        sets = []
        for seed, spec in enumerate((TRACED, OTHER, *RUNS)):
            inputs = _text(*spec, seed, config.pad_token_id)
            inputs["decoder_input_ids"] = torch.randint(5, 90, (spec[0], 4 + seed % 3))
            sets.append(inputs)
        return model, sets[0], sets[1], sets[2:]

    return Proof("led/seq2seq (window 512)", build, rows=rows, fails_with=fails_with, beside=("all",),
                 fails_at_run=fails_at_run)


@requires("transformers>=4.57")
@pytest.mark.parametrize("case", [longformer_case, led_case], ids=["longformer", "led"])
def test_window_attention_fails_without_its_rows_and_matches_eager_with_them(make_agent, case):
    """Without the rows the export stops on the data; with them one program, traced below one window, matches
    eager (which pads to the window) on every output leaf across windows, with and without global tokens."""
    rows = (LONGFORMER_BAND, LONGFORMER_UNPADDED) if case is longformer_case else (LED_BAND, LED_UNPADDED)
    proving.prove(case(rows, DATA_DEPENDENT), make_agent)


@requires("transformers>=4.57")
@pytest.mark.parametrize("case", [longformer_case, led_case], ids=["longformer", "led"])
def test_padding_row_is_needed(make_agent, case):
    """The band attention alone takes the padded text, but upstream's padding guards on the length: traced at 200
    tokens (padded), the program refuses 512 (nothing to pad)."""
    row = LONGFORMER_UNPADDED if case is longformer_case else LED_UNPADDED
    proving.fails_without(case((row,), "Guard failed", fails_at_run=True), make_agent)


@requires("transformers>=4.57")
def test_onnx_matches_eager_across_windows(make_agent, onnx_extra):
    """Converted from the same two sets (below one window), onnxruntime runs a multiple of the window with global
    tokens in some rows and a batch without any across three windows: every leaf against eager (which pads)."""
    model, traced, other, runs = longformer_case((LONGFORMER_BAND, LONGFORMER_UNPADDED), DATA_DEPENDENT).build()
    make_agent()
    proving.assert_onnx_runs_match(proving.export_onnx(model, traced, other), model, runs[:2], rtol=1e-4, atol=1e-5)


def _attention_inputs(batch: int, length: int, hidden: int, globals_: list, padded: int, generator):
    """An attention layer's inputs as the encoders build them: the additive mask (0 local, the dtype's minimum
    masked, its maximum global), and its masked and global positions."""
    states = torch.randn(batch, length, hidden, generator=generator)
    mask = torch.zeros(batch, length)
    mask[0, length - padded:] = torch.finfo(mask.dtype).min
    is_global = torch.zeros(batch, length, dtype=torch.bool)
    for row, count in enumerate(globals_):
        is_global[row, torch.randperm(length - padded, generator=generator)[:count]] = True
    mask[is_global] = torch.finfo(mask.dtype).max
    flags = {"is_index_masked": mask < 0, "is_index_global_attn": is_global, "is_global_attn": bool(is_global.any())}
    return states, mask, flags


@requires("transformers>=4.57")
def test_band_attention_is_upstreams():
    """In eager code, on the lengths upstream takes (multiples of the window): the band attention within float
    tolerance of upstream's chunks, for windows of 512 and 8, batches with and without global tokens, a row of
    all-global tokens; on a shorter (unpadded) text, every real token as upstream computes it padded; with a head
    mask (4.x); and with attentions asked for, upstream's own path."""
    import transformers
    from transformers.models.longformer import modeling_longformer

    from autopatch.areas.local_attention import longformer

    generator = torch.Generator().manual_seed(0)
    original = modeling_longformer.LongformerSelfAttention.forward
    for window, length, globals_ in ((512, 1024, [2, 0, 5]), (512, 512, [0, 0, 0]), (8, 24, [1, 0, 24 - 5]),
                                     (512, 1536, [1, 1, 1])):
        config = modeling_longformer.LongformerConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=1,
                                                      attention_window=[window])
        attention = modeling_longformer.LongformerSelfAttention(config, 0).eval()
        states, mask, flags = _attention_inputs(3, length, 32, globals_, 5, generator)
        real = ~flags["is_index_masked"]
        with torch.no_grad():
            expected = attention(states, attention_mask=mask, **flags)[0]
            got = longformer.longformer_band(original, attention, states, attention_mask=mask, **flags)[0]
            torch.testing.assert_close(got[real], expected[real])
            # The text 3 tokens shorter (row 0 still has 2 of its padded tokens): upstream's values, unpadded.
            cut = {name: flag[:, :-3] if torch.is_tensor(flag) and flag.ndim else flag for name, flag in flags.items()}
            shorter = longformer.longformer_band(original, attention, states[:, :-3], attention_mask=mask[:, :-3],
                                                 **cut)[0]
            torch.testing.assert_close(shorter[0][real[0, :-3]], expected[0, :-3][real[0, :-3]])
            if transformers.__version__.startswith("4."):
                heads = torch.rand(4, generator=generator)
                expected = attention(states, attention_mask=mask, layer_head_mask=heads, **flags)[0]
                got = longformer.longformer_band(original, attention, states, attention_mask=mask,
                                                 layer_head_mask=heads, **flags)[0]
                torch.testing.assert_close(got[real], expected[real])
            asked = longformer.longformer_band(original, attention, states, attention_mask=mask,
                                               output_attentions=True, **flags)
            assert len(asked) == len(attention(states, attention_mask=mask, output_attentions=True, **flags))
