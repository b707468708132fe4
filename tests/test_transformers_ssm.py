"""transformers.mamba.* / transformers.falcon_mamba.*: Mamba prefill (use_cache=False) exports with dynamic batch
and sequence, and matches eager at other sizes; without the patch the sequence length is specialized. Also the
gated delta net's prefill (transformers.<model>.gated_delta_scan: Qwen3-Next, Qwen3.5, Qwen3.5-MoE, OlmoHybrid),
whose program is one chunk long without its row."""

import copy

import pytest
import torch
import torch.export._trace  # noqa: F401
import transformers
from packaging.version import Version

import autopatch
import proving
from autopatch import registry, state
from autopatch.agent import Agent
from conftest import requires
from proving import Proof

TF5 = Version(transformers.__version__) >= Version("5")
DYN = torch.export.Dim.DYNAMIC

# (model, patch id): 5.23 patches the module function mamba_selective_scan (falcon_mamba has its own copy);
# 5.3 and 5.12 rewrite MambaMixer.slow_forward (no such function there; FalconMamba's program also needs
# torch.export.parameter_buffers in ep.module()); 4.57 patches MambaMixer.slow_forward and rewrites
# FalconMambaMixer.slow_forward.
if Version(transformers.__version__) < Version("5.13") and TF5:
    CASES = [("mamba", "transformers.mamba.slow_forward_scan"),
             ("falcon_mamba", "transformers.falcon_mamba.slow_forward_scan")]
elif TF5:
    CASES = [("mamba", "transformers.mamba.selective_scan"), ("falcon_mamba", "transformers.falcon_mamba.selective_scan"),
             ("jamba", "transformers.jamba.selective_scan")]
else:
    CASES = [("mamba", "transformers.mamba.slow_forward"),
             ("falcon_mamba", "transformers.falcon_mamba.slow_forward_scan_4x")]


def build(name):
    prefix = {"mamba": "Mamba", "falcon_mamba": "FalconMamba", "jamba": "Jamba"}[name]
    if name == "jamba":  # mamba, attention (a cache needs one), mamba; the middle layer MoE (the class's period)
        config = transformers.JambaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                          attn_layer_period=3, attn_layer_offset=1, num_attention_heads=4,
                                          num_key_value_heads=2, num_experts=2, mamba_d_state=4, mamba_dt_rank=8)
    else:
        config = getattr(transformers, f"{prefix}Config")(vocab_size=64, hidden_size=32, state_size=4,
                                                          num_hidden_layers=2)
    torch.manual_seed(0)
    return Prefill(getattr(transformers, f"{prefix}ForCausalLM")(config).eval())


class Prefill(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def ids(batch, seq, seed):
    return torch.randint(0, 64, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _export(model, strict=False):
    with torch.no_grad():
        return torch.export.export(model, (ids(2, 8, 1),), dynamic_shapes=({0: DYN, 1: DYN},), strict=strict)


def prefill_case(name, patch, strict=False):
    def build_case():
        runs = [{"input_ids": ids(batch, seq, batch * 100 + seq)} for batch, seq in [(3, 5), (1, 13), (4, 2), (2, 1)]]
        return build(name), {"input_ids": ids(2, 8, 1)}, {"input_ids": ids(3, 5, 2)}, runs

    # FalconMamba's program on 5.3-5.12 needs torch.export.parameter_buffers in ep.module(): beside, not proved here.
    return Proof(f"{name}/prefill", build_case, rows=(patch,), fails_with="specialized it to be a constant",
                 beside=("torch.export.parameter_buffers",), strict=strict)


@pytest.mark.parametrize("name,patch", CASES)
def test_prefill_fails_without_the_patch(make_agent, name, patch):
    proving.fails_without(prefill_case(name, patch), make_agent)


@pytest.mark.parametrize("name,patch", CASES)
def test_prefill_exports_and_matches_eager_at_other_sizes(make_agent, name, patch):
    program, _ = proving.exports_with(prefill_case(name, patch), make_agent)
    assert any("scan" in str(node.target) for node in program.graph.nodes)
    assert autopatch.last_export_report()["patches"][patch] == 2  # one per layer


def test_prefill_strict(make_agent):
    proving.exports_with(prefill_case(*CASES[0], strict=True), make_agent)


@pytest.mark.parametrize("name,patch", CASES)
def test_eager_is_unchanged_with_the_patch_active(agent, name, patch):
    model = build(name)
    inputs = [ids(2, 8, 1), ids(3, 5, 2)]
    with torch.no_grad():
        expected = [model(x) for x in inputs]
        own = Agent(registry.EXPORT_ENTRY_POINTS, [s for s in registry.PATCHES if s.id == patch])
        own.enable("all")
        try:
            assert own.records[patch].state in state.INSTALLED
            got = [model(x) for x in inputs]
            with_cache = model.model(input_ids=inputs[0], use_cache=True).logits
        finally:
            own.disable()
        reference_with_cache = model.model(input_ids=inputs[0], use_cache=True).logits
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
    assert torch.equal(with_cache, reference_with_cache)
    assert own.records[patch].hits == 0


@requires("transformers>=5.13")
def test_a_step_of_several_tokens_with_a_cache_refuses_one_token_instead_of_answering_wrong(make_agent):
    """A mixer with a filled cache takes its own one-token path; the scan serves steps of several. A program traced
    with several new tokens assumes (torch's ranges start at 2) it is never given one: the scan makes the program
    refuse one at run time instead of running it down the several-token path (wrong numbers, measured)."""
    from autopatch.models import builders

    model = build("jamba").model
    make_agent()
    traced = builders.decode_inputs(model, model.config, batch=2, past=6, seq=3, seed=1)
    other = builders.decode_inputs(model, model.config, batch=3, past=8, seq=2, seed=2)
    one = builders.decode_inputs(model, model.config, batch=1, past=9, seq=1, seed=3)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced),
                                      dynamic_shapes=autopatch.guess_dynamic_shapes(traced, other), strict=False)
        got, expected = program.module()(**copy.deepcopy(other)), model(**copy.deepcopy(other))
        torch.testing.assert_close(got.logits, expected.logits)
        with pytest.raises(RuntimeError, match="traced with several new tokens and a cache"):
            program.module()(**copy.deepcopy(one))


def test_fingerprints_match_the_installed_version(agent):
    for name, patch in CASES:
        build(name)  # imports the modeling module
        own = Agent(registry.EXPORT_ENTRY_POINTS, [s for s in registry.PATCHES if s.id == patch])
        own.enable("all")
        try:
            assert own.records[patch].state == state.APPLIED_LATE, own.records[patch].detail
        finally:
            own.disable()


# --- The gated delta net's prefill on 5.23: a Python loop over 64-token chunks ------------------------------------

GATED_DELTA = [pytest.param(m, marks=pytest.mark.requires("transformers>=5.13"))
               for m in ("qwen3_next", "qwen3_5", "qwen3_5_moe", "olmo_hybrid")]
LINEAR_LAYERS = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, layer_types=["linear_attention", "full_attention"],
                     linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8,
                     linear_num_key_heads=2, linear_num_value_heads=4)


def _gated_delta_model(name):
    experts = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)
    torch.manual_seed(0)
    if name == "qwen3_next":
        config = transformers.Qwen3NextConfig(**LINEAR_LAYERS, **experts, mlp_only_layers=[0, 1])
        model = transformers.Qwen3NextForCausalLM(config)
    elif name == "qwen3_5_moe":
        model = transformers.Qwen3_5MoeForCausalLM(transformers.Qwen3_5MoeTextConfig(**LINEAR_LAYERS, **experts))
    elif name == "olmo_hybrid":
        config = transformers.OlmoHybridConfig(**LINEAR_LAYERS, pad_token_id=0, eos_token_id=1)
        model = transformers.OlmoHybridForCausalLM(config)
    else:
        model = transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(**LINEAR_LAYERS))
    return Prefill(model.eval())


@pytest.mark.parametrize("name", GATED_DELTA)
def test_gated_delta_prefill_is_one_chunk_without_its_row_and_matches_eager_with_it(make_agent, name):
    model = _gated_delta_model(name)
    row = f"transformers.{name}.gated_delta_scan"
    own = make_agent([])
    unpatched = _export(model)  # exports, but its guards allow one chunk only: no sequence over 64 tokens
    with torch.no_grad(), pytest.raises(Exception, match="Guard failed"):
        unpatched.module()(ids(2, 65, 1))
    own.disable()
    long = ids(2, 130, 2)
    with torch.no_grad():
        before = model(long)
    make_agent([s for s in registry.PATCHES if s.id == row])
    with torch.no_grad():
        assert torch.equal(model(long), before)  # outside export: the original
    program = _export(model)
    assert autopatch.last_export_report()["patches"][row] == 1  # one linear-attention layer
    with torch.no_grad():  # across chunk boundaries: 1 to 3 chunks of 64 tokens
        for batch, seq in [(3, 5), (1, 64), (2, 65), (1, 150)]:
            x = ids(batch, seq, batch * 100 + seq)
            torch.testing.assert_close(program.module()(x), model(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", GATED_DELTA)
def test_gated_delta_scan_equals_upstream(name):
    """The rewritten function against the original, in eager, with and without an initial state."""
    import importlib

    from autopatch.areas.state_space.scans import gated_delta_chunks_as_scan

    original = importlib.import_module(f"transformers.models.{name}.modeling_{name}").torch_chunk_gated_delta_rule
    rewritten = gated_delta_chunks_as_scan(original)
    g = torch.Generator().manual_seed(0)
    for seq in (1, 3, 63, 64, 65, 130):
        for initial in (False, True):
            q, k = (torch.randn(2, seq, 2, 16, generator=g) for _ in range(2))
            kwargs = dict(g=-torch.rand(2, seq, 4, generator=g), beta=torch.rand(2, seq, 4, generator=g),
                          initial_state=torch.randn(2, 4, 16, 8, generator=g) if initial else None,
                          output_final_state=True, use_qk_l2norm_in_kernel=True)
            v = torch.randn(2, seq, 4, 8, generator=g)
            for got, expected in zip(rewritten(q, k, v, **kwargs), original(q, k, v, **kwargs)):
                assert got.shape == expected.shape
                torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


# --- MiniMax's lightning attention: a cached step of several tokens ----------------------------------------------

LIGHTNING_ROW = "transformers.minimax.lightning_decode_scan"


def _minimax():
    # The class's own layer pattern (full, linear, full, linear...) at two layers; its own block size (256).
    config = transformers.MiniMaxConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                        num_local_experts=2, num_experts_per_tok=1,
                                        layer_types=["full_attention", "linear_attention"])
    torch.manual_seed(0)
    return transformers.MiniMaxForCausalLM(config).eval()


def _lightning_sets(model):
    from autopatch.models import builders

    return [builders.decode_inputs(model, model.config, batch=b, past=p, seq=s, seed=b * 10 + s)
            for b, p, s in [(2, 6, 3), (3, 8, 2), (1, 9, 1), (4, 5, 5)]]


def lightning_case():
    def build_case():
        model = _minimax()
        traced, other, *more = _lightning_sets(model)
        return model, traced, other, [other, *more]  # batch, past and new tokens all differ, one token too

    return Proof("minimax/decode", build_case, rows=(LIGHTNING_ROW,), fails_with="specialized it to be a constant",
                 beside=("all",))


def test_lightning_decode_of_several_tokens_fails_without_its_row(make_agent):
    proving.fails_without(lightning_case(), make_agent)


def test_lightning_decode_matches_eager_for_every_step_length(make_agent):
    _, own = proving.exports_with(lightning_case(), make_agent)  # keys, values and the linear layer's state
    assert autopatch.last_export_report()["patches"][LIGHTNING_ROW] == 1  # one linear-attention layer
    assert own.records[LIGHTNING_ROW].state in state.INSTALLED
