"""transformers.masks.fsmt_padding, .cpmant_prompt_positions, .longt5_default_mask, .switch_transformers_default_mask,
.pegasus_x_default_mask, .bigbird_pegasus_default_mask: text models whose own mask code decides in Python.

FSMT's forward stops on a branch on the data (a padding mask with no pad becomes None); CPM-Ant's prefill program
takes only the traced length (its mask's positions come from ``range(seq)``); LongT5's decode step without an
attention mask stops (its default mask is skipped while compiling), and so does 4.x Switch Transformers'; 4.x
Pegasus-X's and BigBird-Pegasus' decoders skip it too and size their causal mask one column past the scores. With
the rows they export, and the program matches eager, every output leaf, on other batches and lengths (FSMT: with
pads in the decoder's ids too, the case the original keeps its mask for). The models are the tiny catalogue's."""

import pytest
import torch

import proving
from autopatch.models import tiny
from conftest import requires
from proving import Proof

DATA_DEPENDENT = "Could not guard on data-dependent expression"
CONSTANT = "specialized it to be a constant"


def _sets(model_type, kind, step):
    arch = tiny.architecture(model_type, kind)
    model = tiny.build(arch)
    return model, [tiny.inputs(model, arch, step, k) for k in range(3)]


def fsmt_case():
    def build():
        model, (traced, other, third) = _sets("fsmt", "seq2seq", "forward")
        padded = dict(third, decoder_input_ids=third["decoder_input_ids"].clone())
        padded["decoder_input_ids"][0, -2:] = model.config.pad_token_id  # a shorter target, padded at its end
        return model, traced, other, [other, third, padded]

    return Proof("fsmt/forward", build, rows=("transformers.masks.fsmt_padding",), fails_with=DATA_DEPENDENT,
                 beside=("all",))


def cpmant_case():
    def build():
        model, (traced, other, third) = _sets("cpmant", "causal", "prefill")
        return model, traced, other, [other, third]

    return Proof("cpmant/prefill", build, rows=("transformers.masks.cpmant_prompt_positions",), fails_with=CONSTANT,
                 beside=("all",))


def longt5_case():
    """A decode step (encoder ids, one or more decoder ids, the cache of the earlier ones) with no attention mask,
    as the catalogue builds it: transformers' default is all ones."""
    def build():
        model, (traced, other, third) = _sets("longt5", "seq2seq", "decode")
        return model, traced, other, [other, third]

    return Proof("longt5/decode", build, rows=("transformers.masks.longt5_default_mask",),
                 fails_with="'NoneType' object has no attribute 'shape'", beside=("all",))


def switch_case():
    """4.x Switch Transformers' decode step as the catalogue builds it: encoder ids and no attention mask."""
    def build():
        model, (traced, other, third) = _sets("switch_transformers", "seq2seq", "decode")
        return model, traced, other, [other, third]

    return Proof("switch_transformers/decode", build, rows=("transformers.masks.switch_transformers_default_mask",),
                 fails_with="'NoneType' object is not subscriptable", beside=("all",))


@pytest.mark.parametrize("case", [fsmt_case, cpmant_case, longt5_case,
                                  pytest.param(switch_case, marks=requires("transformers<5"))],
                         ids=["fsmt", "cpmant", "longt5", "switch_transformers"])
def test_export_fails_without_the_row_and_matches_eager_with_it(make_agent, case):
    proving.prove(case(), make_agent)


def _encoded(model, inputs: dict, k: int) -> dict:
    """``inputs`` with the source encoded first, as generate() does (the decoder is what the rows change; these
    encoders take most of a minute to trace), and its mask: all ones in set 0 (the traced one), the rows
    right-padded by amounts that differ from set to set otherwise (encoded with that mask, and passed for the
    cross-attention)."""
    from autopatch.models import builders

    inputs = dict(inputs)
    ids = inputs.pop("input_ids")
    batch, source = ids.shape
    mask = torch.ones(batch, source, dtype=torch.long)
    for row, pads in enumerate(builders.left_pads(batch, source, k) if k else [0] * batch):
        mask[row, source - pads:] = 0
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask)
    return dict(inputs, encoder_outputs=encoded, attention_mask=mask)


def pegasus_decoder_case(model_type: str, step: str):
    """4.x Pegasus-X's or BigBird-Pegasus' ``step`` as the catalogue builds it, without decoder_attention_mask (the
    default mask the row builds), on a source encoded first and padded in the sets it is run at; the decode step's
    cache compared leaf by leaf too."""
    def build():
        model, sets = _sets(model_type, "seq2seq", step)
        sets = [_encoded(model, inputs, k) for k, inputs in enumerate(sets)]
        return model, sets[0], sets[1], sets[1:]

    return Proof(f"{model_type}/{step}", build, rows=(f"transformers.masks.{model_type}_default_mask",),
                 fails_with=r"The size of tensor a \(.+\) must match the size of tensor b \(.+ \+ 1\)",
                 beside=("all",))


@requires("transformers<5")
@pytest.mark.parametrize("model_type, step", [("pegasus_x", "decode"), ("bigbird_pegasus", "decode"),
                                               ("bigbird_pegasus", "forward")])
def test_pegasus_decoders_default_mask(make_agent, model_type, step):
    proving.prove(pegasus_decoder_case(model_type, step), make_agent)


def test_the_rewrites_give_eager_results_exactly():
    """The rewritten functions themselves, called in eager code: FSMT's mask is the original's wherever the original
    returns one (all False where it returns None); CPM-Ant's mask is the original's at every length."""
    from transformers.models.cpmant import modeling_cpmant
    from transformers.models.fsmt import modeling_fsmt

    from autopatch.areas.text_masks import masks

    padding_mask = masks.padding_mask_always(modeling_fsmt.make_padding_mask)
    ids = torch.tensor([[5, 6, 1, 1], [5, 6, 7, 8]])
    assert torch.equal(padding_mask(ids, 1), modeling_fsmt.make_padding_mask(ids, 1))
    assert modeling_fsmt.make_padding_mask(ids[1:], 1) is None
    assert not padding_mask(ids[1:], 1).any()

    model, _ = _sets("cpmant", "causal", "prefill")
    rewritten = masks.cpmant_positions_by_arange(modeling_cpmant.CpmAntModel._prepare_attention_mask)
    prompt = model.config.prompt_length
    for seq in (prompt + 1, prompt + 5, prompt + 17):
        ids = torch.randint(0, 100, (3, seq))
        span = torch.zeros(3, seq, dtype=torch.long)
        context = torch.ones(3, seq, dtype=torch.bool)
        length = torch.tensor([seq, seq - 2, seq - 4])
        expected = model.cpmant._prepare_attention_mask(ids, span, context, length)
        assert torch.equal(rewritten(model.cpmant, ids, span, context, length), expected)


#: Qwen4-Exp's indexer (the catalogue's: blocks of 4 keys, a budget of 8 keys, so 2 blocks and a tail per row):
#: lengths with fewer keys than one block, with more blocks than the budget (where top-k must choose), left-padded
#: rows. (batch, length) of a prefill; (batch, past, new tokens) of a decode step.
QWEN4_PREFILL = ((2, 14), (3, 21), (1, 3), (4, 33))
QWEN4_DECODE = ((2, 13, 3), (3, 18, 2), (1, 3, 1), (2, 30, 1))


def qwen4_exp_case(step: str):
    """``step`` of Qwen4-Exp's text model, padded batches (each set's rows padded by other amounts)."""
    from autopatch.models import builders

    def build():
        arch = tiny.architecture("qwen4_exp_text", "causal")
        config = tiny.tiny_config("qwen4_exp_text")
        # Its indexed layer alone (the catalogue's also has three linear-attention layers, which the sweep covers
        # and which take minutes to trace at these lengths); the indexer's own settings as the catalogue's.
        config.num_hidden_layers, config.layer_types = 1, ["indexed_attention"]
        torch.manual_seed(0)
        model = tiny.model_class(arch)(config).eval()
        if step == "prefill":
            sets = [builders.prefill_inputs(model, config, batch, seq, seed=k + 1,
                                            pads=builders.left_pads(batch, seq, k))
                    for k, (batch, seq) in enumerate(QWEN4_PREFILL)]
        else:
            sets = [builders.decode_inputs(model, config, batch, past, seq, seed=k + 1,
                                           pads=builders.left_pads(batch, past, k))
                    for k, (batch, past, seq) in enumerate(QWEN4_DECODE)]
        return model, sets[0], sets[1], sets[1:]

    return Proof(f"qwen4_exp_text/{step}", build, rows=("transformers.masks.qwen4_exp_block_selection",),
                 fails_with=r"\(\(u\d+//4\)\) > 0", beside=("all",))


@requires("transformers>=5.23")
@pytest.mark.parametrize("step", ["prefill", "decode"])
def test_qwen4_exp_indexer_fails_without_the_row_and_matches_eager_with_it(make_agent, step):
    proving.prove(qwen4_exp_case(step), make_agent)


@requires("transformers>=5.23")
def test_qwen4_exp_block_selection_is_the_originals_exactly():
    """The replacement against the original indexer in eager code, bit for bit: batches of 1 to 3, more keys than
    queries (a cache), fewer keys than a block, more blocks than the budget, left padding, a sample with no
    visible key, bool (sdpa) and float (eager) masks. A mask whose rows are not prefixes of their last row's is
    refused."""
    from transformers.models.qwen4_exp import modeling_qwen4_exp

    from autopatch.areas.text_masks.indexers import qwen4_exp_block_selection

    arch = tiny.architecture("qwen4_exp_text", "causal")
    model = tiny.build(arch)
    indexer = next(m for m in model.modules() if isinstance(m, modeling_qwen4_exp.Qwen4ExpTextQSAIndexer))
    assert indexer.block_topk * indexer.compress_ratio < 33  # the longest case has more blocks than the budget
    rotary, hidden = model.model.rotary_emb, model.config.hidden_size
    generator = torch.Generator().manual_seed(0)

    class Keys:  # the cache's part the indexer reads: earlier keys, then this step's
        def __init__(self, earlier):
            self.earlier = earlier

        def update_indexer(self, keys, layer_idx):
            return torch.cat([self.earlier, keys], dim=1)

    def call(forward, states, mask, earlier):
        positions = torch.arange(mask.shape[-1]).view(1, 1, -1).expand(3, states.shape[0], -1)
        with torch.no_grad():
            return forward(indexer, states, rotary(states, positions), mask, Keys(earlier.clone()))

    cases = 0
    for batch in (1, 2, 3):
        for queries, keys in ((1, 1), (1, 3), (5, 5), (3, 11), (2, 14), (1, 17), (13, 13), (2, 33)):
            for padding in ("none", "left", "empty"):
                visible = (torch.arange(keys)[None] <= torch.arange(keys - queries, keys)[:, None]).expand(
                    batch, queries, keys).clone()
                if padding == "left":
                    for row in range(batch):
                        visible[row, :, :int(torch.randint(0, keys, (), generator=generator))] = False
                elif padding == "empty":
                    visible[0] = False
                states = torch.randn(batch, queries, hidden, generator=generator)
                earlier = torch.randn(batch, keys - queries, indexer.index_head_dim, generator=generator)
                for mask in (visible[:, None],
                             torch.zeros(batch, 1, queries, keys).masked_fill(~visible[:, None], -3.4e38)):
                    expected = call(modeling_qwen4_exp.Qwen4ExpTextQSAIndexer.forward, states, mask, earlier)
                    assert torch.equal(call(qwen4_exp_block_selection, states, mask, earlier), expected), (
                        batch, queries, keys, padding, mask.dtype)
                    cases += 1
    assert cases == 3 * 8 * 3 * 2

    scattered = torch.ones(2, 1, 4, 9, dtype=torch.bool)
    scattered[0, 0, 0, 3] = False  # a row that skips a key its last row sees: not a causal mask's structure
    with pytest.raises(RuntimeError, match="prefix of the keys"):
        call(qwen4_exp_block_selection, torch.randn(2, 4, hidden), scattered, torch.randn(2, 5, indexer.index_head_dim))
