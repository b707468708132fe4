"""torch.distributions.*_checked_at_run: a distribution built in forward validates its parameters, and each sample it
scores, by reading a check into an ``if`` (``validate_args``, torch's default): under export a data-dependent value,
and the export stopped. Both halves on a module that builds a Categorical and a Bernoulli from its inputs and scores
samples with them, then 4.x TAPAS's question-answering head, where it was found (BLT's patcher: its own tests); the
checks still made by the program (it raises on NaN logits and on a sample outside the support) and by eager outside
an export; under strict=True, which cannot trace them, the distributions built unvalidated and a note saying so."""

import pytest
import torch

import proving
from autopatch.models import tiny
from conftest import requires
from proving import Proof

ROWS = ("torch.distributions.parameters_checked_at_run", "torch.distributions.samples_checked_at_run")


@pytest.fixture(autouse=True)
def validation_on(monkeypatch):
    """Validation on, as torch starts a process: torch.compile and Dynamo turn it off process-wide the first time
    they run (TorchPatcher.patch), as an earlier test of the session may have."""
    monkeypatch.setattr(torch.distributions.Distribution, "_validate_args", True)


class Scored(torch.nn.Module):
    """Token choices as a classifier head makes them: a Categorical over the last dim, a Bernoulli per cell."""

    def forward(self, logits, cells, choice):
        tokens = torch.distributions.Categorical(logits=logits)
        selected = torch.distributions.Bernoulli(logits=cells)
        return tokens.probs, tokens.entropy(), tokens.log_prob(choice), selected.log_prob((cells > 0).float())


def _inputs(batch, classes, cells, seed):
    g = torch.Generator().manual_seed(seed)
    return {"logits": torch.randn(batch, classes, generator=g), "cells": torch.randn(batch, cells, generator=g),
            "choice": torch.randint(0, classes, (batch,), generator=g)}


def _shapes(model):
    batch = torch.export.Dim("batch", min=1)
    return {"logits": {0: batch, 1: torch.export.Dim.DYNAMIC}, "cells": {0: batch, 1: torch.export.Dim.DYNAMIC},
            "choice": {0: batch}}


def _scored():
    return Scored(), _inputs(2, 5, 3, 0), None, [_inputs(3, 7, 4, 1), _inputs(1, 2, 9, 2)]


def _export_scored(make_agent):
    make_agent(selection="all")
    model, traced, _, _ = _scored()
    return proving.export(model, traced, shapes=_shapes(model))


@pytest.mark.parametrize("row", ROWS)
def test_without_each_row_the_export_stops_and_with_them_the_program_matches_eager(make_agent, row):
    """Without the parameters' row the Categorical stops the export when built; without the samples' row its
    log_prob does. With both, other batches and sizes match eager, every output."""
    proving.prove(Proof("distributions/scored", _scored, rows=(row,), beside=("all",), shapes=_shapes,
                        fails_with="data-dependent"), make_agent)


def test_the_program_still_checks_parameters_and_samples_when_it_runs(make_agent):
    """The checks eager makes are made by the program: NaN logits and a choice outside the classes raise there
    (eager raises ValueError for both)."""
    program = _export_scored(make_agent).module()
    valid = _inputs(3, 7, 4, 1)
    broken = valid["logits"].clone()
    broken[1, 2] = float("nan")
    for inputs in ({**valid, "logits": broken}, {**valid, "choice": torch.tensor([0, 9, 1])}):
        with pytest.raises(ValueError):
            Scored()(**inputs)
        with pytest.raises(RuntimeError, match="Runtime assertion failed"):
            program(**inputs)
    program(**valid)  # valid inputs run


def test_strict_export_builds_the_distributions_unvalidated_and_says_so(make_agent):
    """strict=True: Dynamo cannot trace torch's constraint code (its skip list: the export stopped on
    ``is_dependent``). The distributions are built unvalidated, as ``validate_args=False`` builds them: the same
    values on valid inputs, and the export's report says the checks are not in the program."""
    import autopatch

    make_agent(selection="all")
    model, traced, _, runs = _scored()
    program = proving.export(model, traced, shapes=_shapes(model), strict=True)
    assert any("cannot be traced by Dynamo" in note for note in autopatch.last_export_report()["notes"])
    for inputs in runs:
        with torch.no_grad():
            proving.assert_same_outputs(program.module()(**inputs), model(**inputs))


def test_outside_an_export_eager_validates_as_before(make_agent):
    make_agent(selection="all")
    with pytest.raises(ValueError, match="Expected parameter logits"):
        torch.distributions.Categorical(logits=torch.tensor([[0.0, float("nan")]]))


@requires("transformers<5")
def test_tapas_question_answering_exports_and_matches_eager(make_agent):
    """4.x TAPAS's question-answering head (the tiny catalogue's config, a question and a table per sample, right
    padded) picks its cells through a Categorical over columns and a Bernoulli per cell, with labels it sets to
    zeros when none are given. Without the rows the export stops; with them other batches, lengths and tables
    match eager (TAPAS's own segment rows beside them)."""
    from transformers import TapasForQuestionAnswering

    def build_case():
        arch = tiny.architecture("tapas", "encoder")
        masked_lm = tiny.build(arch)
        torch.manual_seed(0)
        model = TapasForQuestionAnswering(masked_lm.config).eval()
        assert model.config.select_one_column  # the Categorical over columns: the config's own path
        traced, other, third = (tiny.inputs(masked_lm, arch, "forward", k, padded=True) for k in range(3))
        return model, traced, other, [other, third]

    proving.prove(Proof("tapas/question-answering", build_case, rows=ROWS, beside=("all",),
                        fails_with="data-dependent"), make_agent)
