"""Sliding-window caches at their real sizes: one decode program for every past length.

For Mistral (every layer sliding), Gemma 3 (its own 5:1 sliding/full pattern) and gpt-oss (alternating), each
with windows 4, 16 (strict) and the config's own default: a decode step traced inside the window and one traced
beyond it each run inside it, across it (the new tokens fill it) and beyond it, at another batch and another number of
new tokens, with the keys/values-only dynamic shapes a user writes. Every cache leaf and the output structure
are compared with eager.
"""

import copy

import pytest
import torch
import transformers

import autopatch
import proving

DYN = torch.export.Dim.DYNAMIC
SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
MODELS = {
    # name: config class, model class, sizes only (layer counts that keep the config's own layer pattern)
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(num_hidden_layers=2)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(num_hidden_layers=6, head_dim=16)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(num_hidden_layers=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2)),
}
WINDOWS = [4, 16, None]  # None: the config class's own default (4096 for Mistral and Gemma 3, 128 for gpt-oss)
STRICT_WINDOW = 16  # the window the strict test exports at
CHUNK = 512  # prefill in chunks: a past beyond a 4096 window in one eager call is a 4k x 4k attention per head


@pytest.fixture
def sliding_agent(make_agent):
    return make_agent()


def build(name, window):
    config_name, model_name, sizes = MODELS[name]
    extra = {} if window is None else {"sliding_window": window}
    config = getattr(transformers, config_name)(**SIZES, **sizes, **extra)
    torch.manual_seed(0)
    return getattr(transformers, model_name)(config).eval(), config


def decode_inputs(model, config, batch, past, new, seed, mask=True):
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, config.vocab_size, (batch, past), generator=g)
    cache = transformers.DynamicCache(config=config)
    with torch.no_grad():
        for start in range(0, past, CHUNK):
            model(input_ids=prompt[:, start:start + CHUNK], past_key_values=cache, use_cache=True)
    inputs = {"input_ids": torch.randint(0, config.vocab_size, (batch, new), generator=g), "past_key_values": cache}
    if mask:
        inputs["attention_mask"] = torch.ones(batch, past + new, dtype=torch.long)
    return inputs


def user_shapes(inputs):
    """What a user writes: batch and lengths dynamic, the cache as keys and values only."""
    layers = len(inputs["past_key_values"].layers)
    shapes = {"input_ids": {0: DYN, 1: DYN}, "past_key_values": [[{0: DYN, 2: DYN}] * layers] * 2}
    if "attention_mask" in inputs:
        shapes["attention_mask"] = {0: DYN, 1: DYN}
    return shapes


def assert_same_outputs(got, expected):
    """Every leaf (logits and every cache state) and the tree structure; the caches' seen counts too. (A cache
    of sliding layers only returns the tokens it holds as its count: no size of its tensors says more. The next
    step takes the count from its attention mask; README, known limits.)"""
    proving.assert_same_outputs(got, expected, atol=1e-5, rtol=1e-5)
    got_cache, expected_cache = got.past_key_values, expected.past_key_values
    counts = [layer.get_seq_length() for layer in expected_cache.layers]
    if all(getattr(layer, "is_sliding", False) for layer in expected_cache.layers):
        counts = [min(count, layer.sliding_window - 1) for count, layer in zip(counts, expected_cache.layers)]
    assert [layer.get_seq_length() for layer in got_cache.layers] == counts


def regimes(window):
    inside = min(window // 2, 5)
    return {"inside": inside, "crossing": window - 2, "beyond": window + 5}


# The strict test's window is left to it (the same regimes, the same rows): 4 is crossed by every past length run,
# the default is larger than all of them.
@pytest.mark.parametrize("window", [w for w in WINDOWS if w != STRICT_WINDOW], ids=lambda w: f"window{w or 'default'}")
@pytest.mark.parametrize("traced_at", ["inside", "beyond"])
@pytest.mark.parametrize("name", list(MODELS))
def test_one_decode_program_for_every_past_length(sliding_agent, name, window, traced_at):
    _one_program_serves_every_regime(name, window, traced_at, strict=False)


@pytest.mark.parametrize("traced_at", ["inside", "beyond"])
@pytest.mark.parametrize("name", list(MODELS))
def test_strict_export_of_sliding_layers(sliding_agent, name, traced_at):
    """strict=True (Dynamo) too: the seen count is rebuilt from traced sizes, never read from the caller's int."""
    _one_program_serves_every_regime(name, STRICT_WINDOW, traced_at, strict=True)


def _one_program_serves_every_regime(name, window, traced_at, strict):
    model, config = build(name, window)
    window = config.sliding_window
    pasts = regimes(window)
    traced = decode_inputs(model, config, batch=2, past=pasts[traced_at], new=2, seed=1)
    assert any(type(layer).__name__ == "DynamicSlidingWindowLayer" for layer in traced["past_key_values"].layers)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=user_shapes(traced),
                                      strict=strict)
    for regime, past in pasts.items():
        run = decode_inputs(model, config, batch=3, past=past, new=3, seed=2)
        with torch.no_grad():
            expected = model(**copy.deepcopy(run))
            got = program.module()(**copy.deepcopy(run))
        assert_same_outputs(got, expected)
    used = autopatch.last_export_report()["patches"]
    assert "transformers.cache.sliding_update" in used and "transformers.cache.sliding_mask_sizes" in used


def test_guessed_shapes_serve_both_sides_of_the_window(sliding_agent):
    model, config = build("gemma3", 8)
    a = decode_inputs(model, config, batch=2, past=3, new=2, seed=1)
    b = decode_inputs(model, config, batch=3, past=5, new=3, seed=2)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(a),
                                      dynamic_shapes=autopatch.guess_dynamic_shapes(a, b))
        for past in (2, 7, 12):
            run = decode_inputs(model, config, batch=1, past=past, new=3, seed=3)
            assert_same_outputs(program.module()(**copy.deepcopy(run)), model(**copy.deepcopy(run)))


@pytest.mark.parametrize("patch_id", ["transformers.cache.sliding_update", "transformers.cache.sliding_mask_sizes",
                                      "transformers.masks.sdpa_causal_skip"])
def test_each_sliding_row_is_needed(make_agent, patch_id):
    """Without any one of the three rows, a Gemma 3 step traced inside its window refuses a past beyond it."""
    model, config = build("gemma3", 8)
    traced = decode_inputs(model, config, batch=2, past=3, new=2, seed=1)
    beyond = decode_inputs(model, config, batch=3, past=13, new=3, seed=2)
    make_agent(selection=f"all,-{patch_id}")
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=user_shapes(traced))
        with pytest.raises(AssertionError, match="Guard failed"):
            program.module()(**copy.deepcopy(beyond))


def test_pure_sliding_cache_needs_the_attention_mask_count(sliding_agent, monkeypatch):
    """Mistral, every layer sliding, traced beyond its window: the program takes the count of seen tokens from the
    attention mask. Without that pre-hook the cache says it has seen only the tokens it holds, and the export
    is refused (never a program with wrong positions)."""
    from autopatch.areas.sliding_windows import layers as transformers_sliding

    model, config = build("mistral", 4)
    traced = decode_inputs(model, config, batch=2, past=9, new=2, seed=1)
    run = decode_inputs(model, config, batch=3, past=11, new=3, seed=2)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=user_shapes(traced))
        assert_same_outputs(program.module()(**copy.deepcopy(run)), model(**copy.deepcopy(run)))
        monkeypatch.setattr(transformers_sliding, "count_from_attention_mask", lambda module, args, kwargs: None)
        with pytest.raises(ValueError, match=r"all sliding \(window 4\).*traced cache holds 3"):
            torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=user_shapes(traced))


def test_pure_sliding_step_without_a_mask_refuses_a_full_window(sliding_agent):
    """No attention mask: exact inside the window; a cache that has filled its window is refused at run time
    (the program cannot know how many tokens it has seen), and an export traced there is refused."""
    model, config = build("mistral", 8)
    traced = decode_inputs(model, config, batch=2, past=3, new=2, seed=1, mask=False)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=user_shapes(traced))
        for past in (2, 6):  # inside, and crossing (the step's new tokens fill the window)
            run = decode_inputs(model, config, batch=3, past=past, new=3, seed=2, mask=False)
            assert_same_outputs(program.module()(**copy.deepcopy(run)), model(**copy.deepcopy(run)))
        beyond = decode_inputs(model, config, batch=3, past=12, new=3, seed=2, mask=False)
        with pytest.raises(RuntimeError, match=r"all sliding \(window 8\) holds 7 tokens"):
            program.module()(**copy.deepcopy(beyond))
        with pytest.raises(ValueError, match="traced cache holds 7"):
            torch.export.export(model, (), kwargs=copy.deepcopy(beyond), dynamic_shapes=user_shapes(beyond))
