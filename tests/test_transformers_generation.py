"""transformers.generation.input_preparation (4.x): a decode step through prepare_inputs_for_generation.

Without the patch, a step given only its new tokens exports but its program raises IndexError on every run
(the 4.x exporting variant gathers input_ids[:, cache_position]); with it the program matches eager at other
sizes, left padding included, and the replacement equals the eager function on every case it handles."""

import copy

import pytest
import torch

import autopatch
import proving
from autopatch import registry
from autopatch.models import handmade
from conftest import requires

PATCH = "transformers.generation.input_preparation"
pytestmark = requires("transformers<5")


class DecodeStep(torch.nn.Module):
    """What a hand-written generation loop exports: prepare the inputs as generate() would, then the model."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, cache_position, past_key_values):
        prepared = self.model.prepare_inputs_for_generation(
            input_ids, past_key_values=past_key_values, attention_mask=attention_mask, cache_position=cache_position,
            use_cache=True)
        return self.model(**prepared).logits


def _step_inputs(model, batch, past, seed, new_tokens_only=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 128, (batch, past + 1), generator=g)
    mask = torch.ones_like(ids)
    if batch > 1:
        mask[0, :2] = 0  # a left-padded prompt
    with torch.no_grad():
        cache = model(input_ids=ids[:, :past], attention_mask=mask[:, :past], use_cache=True).past_key_values
    return {"input_ids": ids[:, -1:] if new_tokens_only else ids, "attention_mask": mask,
            "cache_position": torch.tensor([past]), "past_key_values": cache}


def test_new_tokens_only_program_fails_without_and_matches_eager_with(make_agent):
    model, _ = handmade.build("llama")
    step = DecodeStep(model)
    traced, other = _step_inputs(model, 2, 5, 0), _step_inputs(model, 3, 7, 1)
    pytree = [s for s in registry.PATCHES if s.family == "pytree"]
    own = make_agent(pytree)
    program = proving.export(step, traced, other)  # exports...
    with pytest.raises(IndexError, match="out of bounds"):
        program.module()(**copy.deepcopy(traced))  # ...and fails on its own traced inputs
    own.disable()
    make_agent(pytree + [proving.row(PATCH)])
    program = proving.export(step, traced, other)
    assert autopatch.last_export_report()["patches"][PATCH] == 1
    for batch, past, seed in ((4, 3, 2), (1, 9, 3)):
        inputs = _step_inputs(model, batch, past, seed)
        with torch.no_grad():
            torch.testing.assert_close(program.module()(**copy.deepcopy(inputs)), step(**copy.deepcopy(inputs)))


def test_the_replacement_equals_the_eager_preparation():
    from transformers.generation.utils import GenerationMixin

    from autopatch.areas.generation.inputs import cache_dependant_input_preparation

    original = GenerationMixin._cache_dependant_input_preparation_exporting
    g = torch.Generator().manual_seed(0)
    for past in (0, 1, 5):
        for new in (1, 3):
            full = torch.randint(0, 100, (2, past + new), generator=g)
            position = torch.arange(past, past + new)
            # the whole sequence, only the new tokens, the new tokens and one more
            for ids in (full, full[:, -new:], *([full[:, -(new + 1):]] if past else [])):
                expected = GenerationMixin._cache_dependant_input_preparation(None, ids, None, position)[1]
                got = cache_dependant_input_preparation(original, None, ids, None, position)[1]
                assert torch.equal(got, expected), (tuple(ids.shape), position.tolist())
