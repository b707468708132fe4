"""torch releases before 2.13 (issue 19): the rows only they need, proven on them by benchmarks/torch_release.sh
(which runs this file in a venv of that release); on the project's own venvs (torch 2.13) these tests are
deselected by their marks, and the summary says so.

torch.fake_tensor_cache_bypass: on torch 2.9 every transformers 4.x decoder stops in its attention mask
(``padding_mask[batch_idx, kv_idx]`` under vmap), where the FakeTensor cache rebuilds an output with symbolic
strides the export never traced ("8*s72 ... is not tracked with proxy"), with or without every other row.
Non-strict only: under strict=True, 2.9's dynamo stops earlier in the same vmap ("calling .item() on a Tensor"),
with or without this row (upstream; 2.13 traces both).
"""

import pytest
import torch
import transformers

import proving
from conftest import requires
from proving import Proof

pytestmark = [requires("torch>=2.9,<2.13"), requires("transformers>=4.56,<5")]

ROW = "torch.fake_tensor_cache_bypass"
SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)


def _model(config_class, **extra):
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**SIZES, **extra)
    model_class = {"LlamaConfig": "LlamaForCausalLM", "Gemma3TextConfig": "Gemma3ForCausalLM"}[config_class]
    return getattr(transformers, model_class)(config).eval(), config


def _left_padded_mask(batch, length, seed):
    """Row i starts after i % 3 pad tokens: a padded batch, different in every input set."""
    mask = torch.ones(batch, length, dtype=torch.long)
    for row in range(batch):
        mask[row, : (row + seed) % 3] = 0
    return mask


def _prefill(config, batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(0, config.vocab_size, (batch, length), generator=g),
            "attention_mask": _left_padded_mask(batch, length, seed)}


def _decode(model, config, batch, past, seq, seed):
    """A decode step whose cache comes from an eager prefill with the same padded mask, as generate() builds it."""
    prefill = _prefill(config, batch, past, seed)
    with torch.no_grad():
        cache = model(**prefill, use_cache=True).past_key_values
    g = torch.Generator().manual_seed(seed + 100)
    return {"input_ids": torch.randint(0, config.vocab_size, (batch, seq), generator=g),
            "attention_mask": torch.cat([prefill["attention_mask"], torch.ones(batch, seq, dtype=torch.long)], 1),
            "past_key_values": cache}


def llama_decode_case():
    def build():
        model, config = _model("LlamaConfig")
        runs = [_decode(model, config, 4, 9, 2, 3), _decode(model, config, 1, 6, 1, 4)]
        return model, _decode(model, config, 2, 5, 3, 1), _decode(model, config, 3, 7, 4, 2), runs

    return Proof("llama/decode_padded", build, rows=(ROW,), fails_with="is not tracked with proxy", beside=("all",))


def gemma3_prefill_case():
    """Gemma 3's sliding layers (its own window pattern, window 4 as a size) beside full ones: traced with a
    prompt longer than the window, run shorter than it and longer again."""
    def build():
        model, config = _model("Gemma3TextConfig", sliding_window=4,
                               layer_types=["sliding_attention", "full_attention"])
        runs = [_prefill(config, 3, 3, 3), _prefill(config, 1, 9, 4)]
        return model, _prefill(config, 2, 6, 1), _prefill(config, 3, 7, 2), runs

    return Proof("gemma3/prefill_padded", build, rows=(ROW,), fails_with="is not tracked with proxy",
                 beside=("all",))


@pytest.mark.parametrize("case", [llama_decode_case(), gemma3_prefill_case()], ids=lambda c: c.name)
def test_a_decoder_needs_the_cache_bypass_and_matches_eager(case, make_agent):
    proving.prove(case, make_agent)

