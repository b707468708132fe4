"""transformers.positions.* : OPT (4.57 and 5.x) and 4.x BioGPT count their learned positions from the attention mask
and cut the new tokens' with ``position_ids[:, past:]``.

A decode step traced with several new tokens (the usual export of a step that takes a chunk, or speculative
tokens) exports without the rows, but its program refuses every one-token step: torch guarded on the traced value
of "mask length - past" while checking contiguity. With the rows the program runs one-token and longer steps, left
padding included, and matches eager (logits and every cache tensor); ONNX through onnxruntime too. Beside them:
Reformer's axial positions picked per sample in a loop, 5.x CTRL's table assigned back to its buffer (strict), and
Funnel's relative positions listed and pooled in Python, its pooled scores and upsampled tokens lined up through
views that guard on the traced length (each row's replacement also equal to upstream's function, eager, at every
length and layout); 4.x GPTSAN-japanese's positions added per sample in a loop over the batch, beside its router's
recast of its classifier in every forward (weight_writes); 4.x TAPAS's positions restarted in every table cell by
a segment reduction whose count 4.x keeps in a tensor."""


import pytest
import torch

import proving
from autopatch.models import tiny
from conftest import requires
from proving import Proof

# (model type, row, the transformers versions that need it): 5.x BioGPT counts positions with arange, no cut.
MODELS = [
    ("opt", "transformers.positions.opt", "transformers>=4.56"),
    ("biogpt", "transformers.positions.biogpt", "transformers<5"),
]


def decode(model, batch, past, new, seed):
    """A decode step of ``new`` tokens after a ``past``-token prompt (the first one left-padded by 2 when
    ``batch`` > 1), its cache from the model's own eager prefill, the mask covering past and new tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 120, (batch, past + new), generator=g)
    mask = torch.ones_like(ids)
    if batch > 1:
        mask[0, :2] = 0
    with torch.no_grad():
        cache = model(input_ids=ids[:, :past], attention_mask=mask[:, :past], use_cache=True).past_key_values
    return {"input_ids": ids[:, past:], "attention_mask": mask, "past_key_values": cache}


def case(model_type, row):
    def build_case():
        model = tiny.build(tiny.architecture(model_type, "causal"))
        # one-token steps (batch 1 and a padded batch of 4) and a longer chunk than traced
        runs = [decode(model, 1, 6, 1, 2), decode(model, 4, 3, 1, 3), decode(model, 2, 7, 4, 4)]
        return model, decode(model, 2, 5, 3, 0), decode(model, 3, 4, 2, 1), runs

    return Proof(f"{model_type}/decode", build_case, rows=(row,), beside=("all",), fails_with="Guard failed",
                 fails_at_run=True)


def _params():
    return [pytest.param(model_type, row, marks=requires(needed), id=model_type)
            for model_type, row, needed in MODELS]


@pytest.mark.parametrize("model_type,row", _params())
def test_one_token_steps_are_refused_without_the_row(make_agent, model_type, row):
    proving.fails_without(case(model_type, row), make_agent)


@pytest.mark.parametrize("model_type,row", _params())
def test_the_program_runs_every_step_length_and_matches_eager_with_the_row(make_agent, model_type, row):
    proving.exports_with(case(model_type, row), make_agent)


@pytest.mark.parametrize("model_type,row", _params())
def test_onnx_runs_one_token_steps_and_matches_eager(make_agent, onnx_extra, model_type, row):
    """Converted from the same two sets, onnxruntime runs the one-token steps, every leaf compared."""
    model, traced, other, runs = case(model_type, row).build()
    make_agent()
    proving.assert_onnx_runs_match(proving.export_onnx(model, traced, other), model, runs[:2], rtol=1e-4, atol=1e-5)


def test_reformer_axial_positions_fail_without_the_row_and_match_eager_with_it(make_agent):
    """Reformer's prefill (the tiny catalogue's, its axial position shape the config's) picks each sample's
    positions in a loop over the batch: without the row the batch is fixed; with it other batches and lengths
    match eager."""
    def build_case():
        arch = tiny.architecture("reformer", "causal")
        model = tiny.build(arch)
        traced, other, third = (tiny.inputs(model, arch, "prefill", k) for k in range(3))
        return model, traced, other, [other, third]

    proving.prove(Proof("reformer/prefill", build_case, rows=("transformers.positions.reformer_axial",),
                        beside=("all",), fails_with="Constraints violated"), make_agent)


def test_reformer_strict_prefill_fails_without_the_chunk_length_row_and_matches_eager_with_it(make_agent):
    """Reformer's default layers mix LSH and local attention: the least common multiple of their chunk lengths is
    np.lcm's numpy integer, which Dynamo follows as an array and stops at the padding test; with the row (a Python
    int) the strict program takes other batches and lengths, as eager."""
    def build_case():
        arch = tiny.architecture("reformer", "causal")
        model = tiny.build(arch)
        assert set(model.config.attn_layers) == {"lsh", "local"}  # the path the row serves
        traced, other, third = (tiny.inputs(model, arch, "prefill", k) for k in range(3))
        return model, traced, other, [other, third]

    proving.prove(Proof("reformer/prefill-strict", build_case, rows=("transformers.positions.reformer_chunk_int",),
                        beside=("all",), fails_with="Data-dependent branching", strict=True), make_agent)


@pytest.mark.requires("transformers>=5.13")
def test_ctrl_strict_decode_fails_without_the_row_and_matches_eager_with_it(make_agent):
    """5.x CTRL assigns its cast position table back to its buffer in forward, which Dynamo cannot follow: a
    strict export of its decode step (the tiny catalogue's) stops without the row; with it other batches, past
    lengths and step lengths match eager, the cache included."""
    def build_case():
        arch = tiny.architecture("ctrl", "causal")
        model = tiny.build(arch)
        traced, other, third = (tiny.inputs(model, arch, "decode", k) for k in range(3))
        return model, traced, other, [other, third]

    proving.prove(Proof("ctrl/decode-strict", build_case, rows=("transformers.positions.ctrl_table",),
                        beside=("all",), fails_with="python_type", strict=True), make_agent)


# Funnel: the tiny catalogue's FunnelForMaskedLM config (its config class's relative-shift attention, <cls> apart,
# truncated sequence, three blocks and a decoder) one layer deep per block and in the decoder (the paths are the
# blocks', the time the layers'), traced at length 5: its last block keeps one token beside <cls> and its first
# pooled scores happen to divide evenly (9 distances over 3 queries), both true at 5 only.
FUNNEL_ROWS = {  # row: what the export without it does
    "transformers.positions.funnel_relative": "Constraints violated",  # the length listed: fixed
    "transformers.positions.funnel_shift": "Guard failed",  # the program refuses the next lengths
    "transformers.positions.funnel_upsample": "Guard failed",
}


def _funnel_inputs(batch, length, seed):
    """Right-padded rows (a tokenizer's batch for an encoder), each a pair of segments (token types 0 then 1)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 100, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, length - 2:] = 0  # the first row two tokens shorter
    types = (torch.arange(length) >= length // 2).long().expand(batch, length).clone()
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def funnel_case(rows, fails_with="", strict=False):
    def build_case():
        from transformers import FunnelForMaskedLM

        config = tiny.tiny_config("funnel")
        config.block_sizes, config.num_decoder_layers = [1] * len(config.block_sizes), 1
        torch.manual_seed(0)
        model = FunnelForMaskedLM(config).eval()
        assert config.attention_type == "relative_shift" and config.separate_cls and config.truncate_seq
        assert config.num_blocks == 3 and config.num_hidden_layers == 3
        runs = [_funnel_inputs(3, 7, 2), _funnel_inputs(4, 9, 3), _funnel_inputs(2, 16, 4), _funnel_inputs(3, 6, 5)]
        return model, _funnel_inputs(2, 5, 0), _funnel_inputs(3, 7, 1), runs

    return Proof("funnel/forward", build_case, rows=rows, beside=("all",), fails_with=fails_with, strict=strict,
                 fails_at_run=fails_with == "Guard failed")


@pytest.mark.parametrize("row", FUNNEL_ROWS)
def test_funnel_forward_fails_without_each_row(make_agent, row):
    proving.fails_without(funnel_case((row,), FUNNEL_ROWS[row]), make_agent)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_funnel_forward_matches_eager_at_other_lengths_and_batches_with_the_rows(make_agent, strict):
    proving.exports_with(funnel_case(tuple(FUNNEL_ROWS), strict=strict), make_agent)


FUNNEL_LAYOUTS = [dict(separate_cls=True, truncate_seq=True), dict(separate_cls=True, truncate_seq=False),
                  dict(separate_cls=False, truncate_seq=False)]


@pytest.mark.parametrize("layout", FUNNEL_LAYOUTS, ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()))
@pytest.mark.parametrize("blocks", [3, 4])
def test_funnel_replacements_equal_upstream_at_every_length(layout, blocks):
    """Eager, each replacement against the function it replaces, on every layout the config allows and every
    length from 1 to 40 upstream's table serves: the relative-position tables (every block's, element for
    element), the shifted scores and the upsampled tokens, the last two at the arguments the model's own forward
    hands them (recorded)."""
    from transformers import FunnelConfig
    from transformers.models.funnel import modeling_funnel as funnel

    from autopatch.areas.positions import pooled

    config = FunnelConfig(d_model=16, n_head=2, d_head=8, d_inner=32, block_sizes=[1] * blocks, vocab_size=100,
                          num_decoder_layers=1, **layout)
    structure = funnel.FunnelAttentionStructure(config).eval()
    original = funnel.FunnelAttentionStructure.get_position_embeds
    compared = []
    for length in range(1, 41):
        try:
            expected = original(structure, length, torch.float32, "cpu")
        except RuntimeError:  # too short for the blocks: upstream's table lacks the rows its distances index
            continue
        compared.append(length)
        got = pooled.funnel_relative_position_embeds(original, structure, length, torch.float32, "cpu")
        for (want, want_pooling), (have, have_pooling) in zip(expected, got, strict=True):
            assert torch.equal(want, have), (length, layout)
            assert (have_pooling is None) == (want_pooling is None)
            assert have_pooling is None or torch.equal(want_pooling, have_pooling), (length, layout)
    assert compared[-1] == 40 and len(compared) >= 40 - 2**blocks

    calls = {"_relative_shift_gather": [], "upsample": []}
    upstream = {name: getattr(funnel, name) for name in calls}

    def recorder(name):
        def record(*args, **kwargs):
            calls[name].append((args, kwargs))
            return upstream[name](*args, **kwargs)
        return record

    model = funnel.FunnelForMaskedLM(config).eval()
    try:
        for name in calls:
            setattr(funnel, name, recorder(name))
        for length in range(2 ** blocks + 1, 2 ** blocks + 12):  # long enough for upstream at every block
            with torch.no_grad():
                model(**_funnel_inputs(2, length, length))
    finally:
        for name, function in upstream.items():
            setattr(funnel, name, function)
    assert calls["_relative_shift_gather"] and calls["upsample"]
    for name, replacement in (("_relative_shift_gather", pooled.funnel_relative_shift),
                              ("upsample", pooled.funnel_upsample)):
        for args, kwargs in calls[name]:
            assert torch.equal(replacement(*args, **kwargs), upstream[name](*args, **kwargs)), name


GPTSAN_ROWS = {
    # row: its export error without it (the other row on)
    "transformers.weights.gptsan_router_cast": "Couldn't swap Linear.weight",
    "transformers.positions.gptsan_batch_loop": "specialized it to be a constant",
}


@requires("transformers<5")
@pytest.mark.parametrize("row", sorted(GPTSAN_ROWS))
def test_gptsan_forward_fails_without_each_row_and_matches_eager_with_them(make_agent, row):
    """4.x GPTSAN-japanese (the tiny catalogue's, its Switch-style sparse layers and prefix-LM mask the config's):
    its router recasts its classifier in every forward and its positions are added per sample in a loop over the
    batch. Without either row the export stops; with both, left-padded batches of other sizes and lengths match
    eager, every output leaf (the padding moves each sample's positions: the gather must follow the mask)."""
    def build_case():
        arch = tiny.architecture("gptsan-japanese", "seq2seq")
        model = tiny.build(arch)
        traced, other, third = (tiny.inputs(model, arch, "forward", k, padded=True) for k in range(3))
        assert not bool(third["attention_mask"].all())  # the padded path
        return model, traced, other, [other, third]

    proving.prove(Proof("gptsan-japanese/forward", build_case, rows=(row,), beside=("all",),
                        fails_with=GPTSAN_ROWS[row]), make_agent)


@requires("transformers<5")
def test_gptsan_router_cast_still_casts_a_classifier_of_another_dtype():
    """The row skips only a cast that changes no dtype: a float64 classifier is still cast to the router's
    float32, and a float32 one is left as the same module."""
    from transformers.models.deprecated.gptsan_japanese import modeling_gptsan_japanese as gptsan

    from autopatch.areas.weight_writes.casts import router_cast_when_needed

    config = tiny.tiny_config("gptsan-japanese")
    router = gptsan.GPTSanJapaneseTop1Router(config)
    classifier = router.classifier
    router_cast_when_needed(gptsan.GPTSanJapaneseTop1Router._cast_classifier, router)
    assert router.classifier is classifier and classifier.weight.dtype == torch.float32

    router.classifier = classifier.to(torch.float64)
    router_cast_when_needed(gptsan.GPTSanJapaneseTop1Router._cast_classifier, router)
    assert router.classifier.weight.dtype == torch.float32


TAPAS_ROWS = {
    # row: its export error without it (the other row on)
    "transformers.positions.tapas_counts_int": "data-dependent expression",
    "transformers.positions.tapas_segment_reduce": "'int' object has no attribute 'device'",
}


def _tapas_table():
    """The tiny catalogue's 4.x TAPAS masked LM (the config's reset_position_index_per_cell and type vocabularies)
    on a question followed by a table, each sample with its own columns and cell widths, right-padded."""
    arch = tiny.architecture("tapas", "encoder")
    model = tiny.build(arch)
    assert model.config.reset_position_index_per_cell  # the path under test is the config's own
    traced, other, third = (tiny.inputs(model, arch, "forward", k, padded=True) for k in range(3))
    for inputs in (traced, other, third):  # several cells per sample: the positions restart
        assert int(inputs["token_type_ids"][:, :, 1].amax()) >= 2
    assert not bool(third["attention_mask"].all())  # the padded path
    return model, traced, other, [other, third]


@requires("transformers<5")
@pytest.mark.parametrize("row", sorted(TAPAS_ROWS))
def test_tapas_cell_positions_fail_without_each_row_and_match_eager_with_them(make_agent, row):
    """4.x TAPAS's position ids restart in every table cell, taken with a segment minimum whose count 4.x keeps in
    a tensor. Without either row the export stops; with both, batches of other sizes, lengths and tables match
    eager, every leaf."""
    proving.prove(Proof("tapas/forward", _tapas_table, rows=(row,), beside=("all",), fails_with=TAPAS_ROWS[row]),
                  make_agent)


@requires("transformers<5")
def test_tapas_strict_export_runs_the_routed_constructor(make_agent):
    """strict=True: Dynamo calls the routed ``IndexMap.__init__`` while it builds the index objects, through a
    router it has no source for; the router hands the replacement its original by a closure Dynamo can follow (a
    functools.partial stopped it: "Unexpected type in sourceless builder"). The program matches eager."""
    proving.exports_with(Proof("tapas/forward strict", _tapas_table, rows=tuple(TAPAS_ROWS), beside=("all",),
                               fails_with="", strict=True), make_agent)


@requires("transformers<5")
@pytest.mark.parametrize("reduction", ["sum", "mean", "amax", "amin"])
def test_tapas_segment_reduce_counted_equals_the_original(reduction):
    """Eager, the routed reduction with int counts returns what the original returns with its tensor counts: the
    same values per (batch, segment), empty segments included, and the same output index."""
    from transformers.models.tapas import modeling_tapas as tapas

    from autopatch.areas.positions.cells import segment_reduce_counted

    g = torch.Generator().manual_seed(0)
    rows, columns = torch.randint(0, 4, (3, 11), generator=g), torch.randint(0, 5, (3, 11), generator=g)
    values = torch.randn(3, 11, generator=g)
    cells = tapas.ProductIndexMap(tapas.IndexMap(rows, 4, batch_dims=1), tapas.IndexMap(columns, 5, batch_dims=1))
    expected, expected_index = tapas._segment_reduce(values, cells, reduction, "test")

    counted = tapas.IndexMap(cells.indices, 20, batch_dims=1)
    counted.num_segments = 20  # an int, as the routed constructor keeps it under export (eager wraps it)
    def not_the_original(*args):
        pytest.fail("an int count took the original reduction")

    got, got_index = segment_reduce_counted(not_the_original, values, counted, reduction, "test")
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert torch.equal(got_index.indices, expected_index.indices) and got_index.batch_dims == expected_index.batch_dims
    assert got_index.num_segments == int(expected_index.num_segments) == 20
