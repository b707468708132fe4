"""transformers.masks.fsmt_padding, .cpmant_prompt_positions, .longt5_default_mask, .switch_transformers_default_mask:
text models whose own mask code decides in Python.

FSMT's forward stops on a branch on the data (a padding mask with no pad becomes None); CPM-Ant's prefill program
takes only the traced length (its mask's positions come from ``range(seq)``); LongT5's decode step without an
attention mask stops (its default mask is skipped while compiling), and so does 4.x Switch Transformers'. With
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
