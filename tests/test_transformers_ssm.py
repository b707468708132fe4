"""transformers.mamba.* / transformers.falcon_mamba.*: Mamba prefill (use_cache=False) exports with dynamic batch
and sequence, and matches eager at other sizes; without the patch the sequence length is specialized. Also the
gated delta net's prefill (transformers.<model>.gated_delta_scan: Qwen3-Next, Qwen3.5, Qwen3.5-MoE, OlmoHybrid)
and Kimi delta attention's (transformers.<model>.kda_scan: Kimi-Linear, Bailing-hybrid), whose program is one
chunk long without its row."""

import copy
import importlib

import pytest
import torch
import torch.export._trace  # noqa: F401
import transformers
from packaging.version import Version

import autopatch
import proving
from autopatch import fingerprint, registry, state
from autopatch.areas.state_space import rows as state_space_rows
from autopatch.agent import Agent
from autopatch.models import builders, recurrent
from conftest import REPO, requires, run_py
from proving import Proof

TF5 = Version(transformers.__version__) >= Version("5")
# (model, patch id): 5.23 patches the module function mamba_selective_scan (falcon_mamba has its own copy);
# 5.3 and 5.12 rewrite MambaMixer.slow_forward (no such function there; FalconMamba's program also needs
# torch.export.parameter_buffers in ep.module()); 4.57 patches MambaMixer.slow_forward and rewrites
# FalconMambaMixer.slow_forward (Jamba's mixer, the same loop: HYBRID_STEPS_4X, on the catalogue's model).
if Version(transformers.__version__) < Version("5.13") and TF5:
    CASES = [("mamba", "transformers.mamba.slow_forward_scan"),
             ("falcon_mamba", "transformers.falcon_mamba.slow_forward_scan")]
elif TF5:
    CASES = [("mamba", "transformers.mamba.selective_scan"), ("falcon_mamba", "transformers.falcon_mamba.selective_scan"),
             ("jamba_three", "transformers.jamba.selective_scan")]
else:
    CASES = [("mamba", "transformers.mamba.slow_forward"),
             ("falcon_mamba", "transformers.falcon_mamba.slow_forward_scan_4x")]


def build(name):
    """The hand-sized model ``name`` (autopatch.models.recurrent) as a prefill: ids in, logits out."""
    return Prefill(recurrent.build(name)[0])


class Prefill(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def ids(batch, seq, seed):
    return torch.randint(0, 64, (batch, seq), generator=torch.Generator().manual_seed(seed))


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


#: 4.x hybrids' steps that their rows make exportable, on the tiny catalogue's model as the sweep drives it (the
#: config class's layer pattern), traced and run on left-padded batches with their masks (the 4.x causal masks take
#: their width from the mask), other batches and lengths at run time: (model, step, rows, error without them).
#: Jamba's and Zamba's mixers loop over the sequence (its length fixed); Zamba's and Zamba2's skip an all-ones mask
#: with an `if` on the data; their decode steps need their model-local caches as pytree nodes (the catalogue hands
#: each prefill an empty one, as generate() does: without it they return none).
HYBRID_STEPS_4X = [
    ("jamba", "prefill", ("transformers.jamba.slow_forward_scan_4x",), "specialized it to be a constant|Constraints"),
    ("zamba", "prefill", ("transformers.zamba.slow_forward_scan_4x",), "data-dependent expression Eq"),
    ("zamba", "decode", ("transformers.zamba.slow_forward_scan_4x", "pytree.model_cache.zamba"),
     "Unsupported input type|data-dependent expression"),
    ("zamba2", "prefill", ("transformers.zamba2.padding_mask_4x", "transformers.zamba2.causal_mask_length"),
     "data-dependent expression"),
    ("zamba2", "decode", ("transformers.zamba2.padding_mask_4x", "transformers.zamba2.causal_mask_length",
                          "pytree.model_cache.zamba2"), "Unsupported input type|data-dependent expression"),
]


def hybrid_4x_case(model_type, step, rows, fails_with):
    def build_case():
        from autopatch.models import tiny

        arch = tiny.architecture(model_type, "causal")
        model = tiny.build(arch)
        traced, other, third = (tiny.inputs(model, arch, step, k, padded=True) for k in range(3))
        return model, traced, other, [third, other]

    return Proof(f"{model_type}/{step}", build_case, rows=rows, fails_with=fails_with, beside=("all",))


@requires("transformers<5")
@pytest.mark.parametrize("model_type,step,rows,fails_with", HYBRID_STEPS_4X,
                         ids=[f"{m}-{s}" for m, s, _, _ in HYBRID_STEPS_4X])
def test_4x_hybrid_steps_fail_without_their_rows_and_match_eager_with_them(make_agent, model_type, step, rows,
                                                                            fails_with):
    proving.prove(hybrid_4x_case(model_type, step, rows, fails_with), make_agent)


def test_prefill_strict(make_agent):
    proving.exports_with(prefill_case(*CASES[0], strict=True), make_agent)


@pytest.mark.parametrize("name,patch", CASES)
def test_eager_is_unchanged_with_the_patch_active(agent, name, patch):
    model = build(name)
    inputs = [ids(2, 8, 1), ids(3, 5, 2)]
    with torch.no_grad():
        expected = [model(x) for x in inputs]
        own = Agent(registry.EXPORT_ENTRY_POINTS, [proving.row(patch)])
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
    model, config = recurrent.build("jamba_three")
    make_agent()
    traced = builders.decode_inputs(model, config, batch=2, past=6, seq=3, seed=1)
    other = builders.decode_inputs(model, config, batch=3, past=8, seq=2, seed=2)
    one = builders.decode_inputs(model, config, batch=1, past=9, seq=1, seed=3)
    program = proving.export(model, traced, other)
    with torch.no_grad():
        got, expected = program.module()(**copy.deepcopy(other)), model(**copy.deepcopy(other))
        proving.assert_same_outputs(got, expected)  # the logits and every state of the cache
        with pytest.raises(RuntimeError, match="traced with several new tokens and a cache"):
            program.module()(**copy.deepcopy(one))


def test_fingerprints_match_the_installed_version(agent):
    for name, patch in CASES:
        build(name)  # imports the modeling module
        own = Agent(registry.EXPORT_ENTRY_POINTS, [proving.row(patch)])
        own.enable("all")
        try:
            assert own.records[patch].state == state.APPLIED_LATE, own.records[patch].detail
        finally:
            own.disable()


# --- The gated delta net's and Kimi delta attention's prefill on 5.23: a Python loop over 64-token chunks ---------

#: model -> its chunked linear attention (state_space.rows.CHUNKED_PREFILLS: the gated delta net, Kimi delta attention).
CHUNKED = {model: chunked for chunked in state_space_rows.CHUNKED_PREFILLS for model in chunked.models}
CHUNKED_MODELS = [pytest.param(m, marks=pytest.mark.requires("transformers>=5.13")) for m in CHUNKED]
#: Each function's first model is proven both ways; the others' modeling files hold the very same function (their
#: rows declare, and install only at, its one fingerprint), so their rows are needed as its: they are checked with
#: the row (an export each is 15 s of the suite).
PROVEN = {chunked.models[0] for chunked in state_space_rows.CHUNKED_PREFILLS}


def chunked_case(name):
    def build_case():
        runs = [{"input_ids": ids(batch, seq, batch * 100 + seq)}  # across chunk boundaries: 1 to 3 chunks of 64
                for batch, seq in [(3, 5), (1, 64), (2, 65), (1, 150)]]
        return build(name), {"input_ids": ids(2, 8, 1)}, {"input_ids": ids(3, 5, 2)}, runs

    # Without its row the prefill exports, but its guards allow one chunk only: no sequence over 64 tokens runs.
    return Proof(f"{name}/prefill", build_case, rows=(f"transformers.{name}.{CHUNKED[name].row}",),
                 fails_with="Guard failed", beside=(), fails_at_run=True, tolerance=dict(rtol=1e-4, atol=1e-4))


def _upstream(name):
    """The model's own chunked function, the one its row rewrites."""
    return getattr(importlib.import_module(f"transformers.models.{name}.modeling_{name}"), CHUNKED[name].function)


@pytest.mark.parametrize("name", CHUNKED_MODELS)
def test_chunked_prefill_is_one_chunk_without_its_row_and_matches_eager_with_it(make_agent, name):
    """Without its row (each function's proven model), the program refuses any prompt over one chunk; with it,
    every model's prefill matches eager across chunk boundaries, and eager is the original."""
    case = chunked_case(name)
    built = case.build()
    model, long = built[0], ids(2, 130, 2)
    with torch.no_grad():
        before = model(long)
    if name in PROVEN:
        proving.fails_without(case, make_agent, built)
    else:  # the function of a model proven here: the same source, which its row installs at (state below)
        proven = next(m for m in CHUNKED[name].models if m in PROVEN)
        assert fingerprint.of(_upstream(name)) == fingerprint.of(_upstream(proven)) == CHUNKED[name].fingerprint
    _, own = proving.exports_with(case, make_agent, built)
    assert own.records[case.rows[0]].state in state.INSTALLED  # its fingerprint matched
    assert autopatch.last_export_report()["patches"][case.rows[0]] == 1  # one linear-attention layer
    with torch.no_grad():
        assert torch.equal(model(long), before)  # outside export, with the row on: the original


@pytest.mark.parametrize("name", CHUNKED_MODELS)
def test_chunk_scan_equals_upstream(name):
    """The rewritten function against the original, in eager, with and without an initial state, across chunk
    boundaries, within 1e-5: the chunks' triangular systems are inverted by blocks (the loop over a chunk's rows
    rounds otherwise; upstream's own eager gated delta rule solves them with LAPACK, another rounding again). The
    gated delta net's keys have fewer heads than its values (2 of 16, 4 values of 8); Kimi delta attention's as
    many (4 of 8)."""
    from autopatch.areas.state_space import scans

    chunked = CHUNKED[name]
    original = _upstream(name)
    rewritten = getattr(scans, chunked.rewriter)(original)
    per_channel = chunked.decay == "per channel"
    key_heads, key_dim = (4, 8) if per_channel else (2, 16)
    g = torch.Generator().manual_seed(0)
    for seq in (1, 3, 63, 64, 65, 130):
        for initial in (False, True):
            q, k = (torch.randn(2, seq, key_heads, key_dim, generator=g) for _ in range(2))
            decay = (2, seq, 4, key_dim) if per_channel else (2, seq, 4)
            kwargs = dict(g=-torch.rand(*decay, generator=g), beta=torch.rand(2, seq, 4, generator=g),
                          initial_state=torch.randn(2, 4, key_dim, 8, generator=g) if initial else None,
                          output_final_state=True, use_qk_l2norm_in_kernel=True)
            v = torch.randn(2, seq, 4, 8, generator=g)
            for got, expected in zip(rewritten(q, k, v, **kwargs), original(q, k, v, **kwargs)):
                assert got.shape == expected.shape
                torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


class _GatedDeltaRule(torch.nn.Module):
    """The rewritten gated delta rule behind a parameter, so that its inputs require grad as a model's do."""

    def __init__(self, rule):
        super().__init__()
        self.rule, self.scale = rule, torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, q, k, v, g, beta):
        return self.rule(q, k, v * self.scale, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)


@pytest.mark.requires("transformers>=5.13")
def test_chunk_scan_exports_strict_with_grad_mode_on():
    """strict=True outside torch.no_grad(): Dynamo ran the scan's step through scan's autograd, which stacks the
    values the step saves for its backward, the symbolic batch its broadcasts save included, and stopped on it
    ("'SymInt' object has no attribute 'unsqueeze'", the chunk decay [chunks, B, H, 1, 1] in the scan's inputs).
    runtime._scan runs it without grad there: the program matches upstream at other batches and lengths."""
    from autopatch.areas.state_space import scans

    original = _upstream("qwen4_exp")
    model = _GatedDeltaRule(scans.gated_delta_chunks_as_scan(original))
    g = torch.Generator().manual_seed(0)

    def inputs(batch, seq):
        q, k = (torch.randn(batch, seq, 2, 16, generator=g) for _ in range(2))  # keys: 2 heads, values: 4
        v, decay, beta = torch.randn(batch, seq, 4, 8, generator=g), -torch.rand(batch, seq, 4, generator=g), \
            torch.rand(batch, seq, 4, generator=g)
        return q, k, v, decay, beta

    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    assert torch.is_grad_enabled()
    program = torch.export.export(model, inputs(2, 8), dynamic_shapes=[{0: batch, 1: seq}] * 5, strict=True)
    for sizes in ((3, 5), (1, 70)):  # one chunk, two
        args = inputs(*sizes)
        with torch.no_grad():
            expected = original(args[0], args[1], args[2] * model.scale, args[3], args[4], output_final_state=True,
                                use_qk_l2norm_in_kernel=True)
            for got, want in zip(program.module()(*args), expected):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _forward_substitution_loop(strict):
    """Upstream's loop (both chunked attentions'), as traced: row by row."""
    a = strict.clone()
    for i in range(1, a.shape[-1]):
        row, sub = a[..., i, :i].clone(), a[..., :i, :i].clone()
        a[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
    return a


def test_block_inverse_is_as_accurate_as_the_loop_and_lapack():
    """runtime.forward_substitution against upstream's loop and LAPACK's unit triangular solve (what eager's gated
    delta rule calls), each against float64: within twice the farther of the two (measured: 1.0x LAPACK's, 1.4x
    the loop's, on the models' systems; closer than both on correlated keys), at the chunk size (64) with the systems
    the models build (unit keys, beta in (0, 1), decays) and with correlated keys and no decay (the inverse's
    entries largest); then sizes that are not powers of two."""
    from autopatch.rewrite.runtime import forward_substitution

    g = torch.Generator().manual_seed(0)
    n, eye = 64, torch.eye(64)
    for correlated in (False, True):
        keys = torch.randn(2, 4, 3, n, 16, generator=g) + (3 * torch.randn(16, generator=g) if correlated else 0)
        keys = torch.nn.functional.normalize(keys, dim=-1)
        beta = torch.full((2, 4, 3, n, 1), 0.95) if correlated else torch.rand(2, 4, 3, n, 1, generator=g)
        log_decay = torch.zeros(2, 4, 3, n) if correlated else -0.1 * torch.rand(2, 4, 3, n, generator=g)
        cumulated = log_decay.cumsum(-1)
        decay = (cumulated.unsqueeze(-1) - cumulated.unsqueeze(-2)).tril().exp().tril()
        system = (keys * beta) @ keys.transpose(-1, -2) * decay  # unit lower triangular: its diagonal is not read
        strict = -system.tril(-1)
        exact = torch.linalg.solve_triangular(system.double(), eye.double().expand(system.shape), upper=False,
                                              unitriangular=True)
        errors = {way: (inverse.double() - exact).abs().max().item() for way, inverse in {
            "blocks": forward_substitution(strict) + eye,
            "loop": _forward_substitution_loop(strict) + eye,
            "lapack": torch.linalg.solve_triangular(system, eye.expand(system.shape), upper=False, unitriangular=True),
        }.items()}
        assert errors["blocks"] <= 2 * max(errors["loop"], errors["lapack"]), errors
    for size in (1, 2, 3, 5, 17, 63):
        strict = 0.3 * torch.randn(2, 3, size, size, generator=g).tril(-1)
        got = forward_substitution(strict)
        torch.testing.assert_close(got, _forward_substitution_loop(strict), rtol=1e-5, atol=1e-5)
        assert not got.diagonal(dim1=-2, dim2=-1).any()  # the loop leaves the diagonal alone


# --- MiniMax's lightning attention: a cached step of several tokens ----------------------------------------------

LIGHTNING_ROW = "transformers.minimax.lightning_decode_scan"


def _lightning_sets(model):
    return [builders.decode_inputs(model, model.config, batch=b, past=p, seq=s, seed=b * 10 + s)
            for b, p, s in [(2, 6, 3), (3, 8, 2), (1, 9, 1), (4, 5, 5)]]


def lightning_case():
    def build_case():
        model, _ = recurrent.build("minimax")
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


# --- Zaya: the convolution states' batch ------------------------------------------------------------------------

ZAYA_ROW = "transformers.zaya.conv_mask_batch"


def zaya_case(padded):
    """The catalogue's Zaya decode step, traced on a batch of 2 with 3 new tokens after 6, run on a batch of 3 (2
    new tokens) and another with one new token (generate's usual step): of 1 unpadded, of 4 left-padded."""
    from autopatch.models import tiny

    def build_case():
        arch = tiny.architecture("zaya", "causal")
        model = tiny.build(arch)
        traced, other, third = (tiny.inputs(model, arch, "decode", k, padded=padded) for k in range(3))
        return model, traced, other, [other, third]

    return Proof("zaya/decode", build_case, rows=(ZAYA_ROW,), beside=("all",), fails_with="Guard failed",
                 fails_at_run=True)


@requires("transformers>=5.23")  # the versions we run that ship Zaya
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left-padded"])
def test_zaya_decode_refuses_other_steps_without_its_row_and_matches_eager_with_it(make_agent, padded):
    proving.prove(zaya_case(padded), make_agent)


# --- RWKV: the time mixing's loop over the tokens ----------------------------------------------------------------

WKV_ROW = "transformers.rwkv.wkv_scan"
MLSTM_ROW = "transformers.xlstm.mlstm_scan"
#: The tiny catalogue's recurrent models whose prefill walks the tokens in Python: (row, use_cache, versions).
#: RWKV's cached outputs hold every layer's states (what a runtime carries to the next step), compared as well.
TOKEN_LOOP_PREFILLS = {
    "rwkv": (WKV_ROW, True, "transformers>=4.56"),
    "xlstm": (MLSTM_ROW, False, "transformers>=4.56"),
    "recurrent_gemma": ("transformers.recurrent_gemma.rglru_scan", False, "transformers>=5"),  # 4.x: stateful eager
    "zamba": ("transformers.zamba.selective_scan", False, "transformers>=5.13"),  # its own copy of Mamba's scan
}


def token_loop_case(model_type):
    """The prefill, traced at 5 tokens (batch 2); run at 7 and 9 tokens (batches 3 and 4) and at 2 tokens."""
    from autopatch.models import tiny

    row, use_cache, _ = TOKEN_LOOP_PREFILLS[model_type]

    def build_case():
        arch = tiny.architecture(model_type, "causal")
        model = tiny.build(arch)
        traced, other, third = (dict(tiny.inputs(model, arch, "prefill", k), use_cache=use_cache) for k in range(3))
        short = {k: v[:, :2] if isinstance(v, torch.Tensor) else v for k, v in third.items()}
        return model, traced, other, [other, third, short]

    # xLSTM binds its recurrent pass when a model is built: built once the agent is on, as EXPORT_PATCHES=1 does
    return Proof(f"{model_type}/prefill", build_case, rows=(row,), fails_with="specialized it to be a constant",
                 beside=("all",), built_after_agent=model_type == "xlstm")


@pytest.mark.parametrize("model_type", [pytest.param(name, marks=requires(versions), id=name)
                                        for name, (_, _, versions) in TOKEN_LOOP_PREFILLS.items()])
def test_token_loop_prefill_fails_without_its_row_and_matches_eager_with_it(make_agent, model_type):
    proving.prove(token_loop_case(model_type), make_agent)


#: xLSTM's strict prefill in a fresh interpreter, agent on by the environment (EXPORT_PATCHES=1), grad mode on as a
#: script leaves it: the first export of the process, compared with eager at other batches and lengths.
_XLSTM_STRICT_FIRST = """
import copy, torch, autopatch
from autopatch.models import tiny
arch = tiny.architecture("xlstm", "causal")
model = tiny.build(arch)
sets = [dict(tiny.inputs(model, arch, "prefill", k), use_cache=False) for k in range(3)]
short = {k: v[:, :2] if isinstance(v, torch.Tensor) else v for k, v in sets[2].items()}
assert torch.is_grad_enabled()
program = torch.export.export(model, (), kwargs=copy.deepcopy(sets[0]), strict=True,
                              dynamic_shapes=autopatch.guess_dynamic_shapes(sets[0], sets[1]))
report = autopatch.last_export_report()
assert report["patches"]["transformers.xlstm.mlstm_scan"] == 2
from autopatch.rewrite import runtime
assert report["notes"] == [runtime.SCAN_WITHOUT_GRAD], report["notes"]  # the gradient it will not give: said
for inputs in (sets[1], short):
    got, expected = program.module()(**copy.deepcopy(inputs)).logits, model(**copy.deepcopy(inputs)).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
print("matches eager")
"""


def test_xlstm_strict_prefill_first_in_a_fresh_process_with_grad_mode_on():
    """The mLSTM scan under strict=True outside torch.no_grad() stopped in Dynamo ("'SymInt' object has no
    attribute 'unsqueeze'": scan's autograd stacked the symbolic batch its step saves), first export or not."""
    out = run_py(_XLSTM_STRICT_FIRST, EXPORT_PATCHES="1", PYTHONPATH=str(REPO))
    assert out.returncode == 0 and "matches eager" in out.stdout, out.stderr[-3000:]
    assert out.stderr.count("no gradient flows back through them") == 1, out.stderr[-3000:]  # once a process


def rwkv_step_case():
    """A step from a carried state (RWKV's cache: five [batch, hidden, layers] tensors, updated in place), traced
    with 3 new tokens; run with 1 and 5 tokens at batch 1 and 2 tokens at batch 4. Not one token at a larger batch:
    there eager's own one-token path broadcasts the carried shift across the batch ([batch, batch, vocab] logits,
    transformers 4.57.6 and 5.23.0), which the program, traced on the several-token path, does not copy."""
    from autopatch.models import tiny

    def build_case():
        model = tiny.build(tiny.architecture("rwkv", "causal"))

        def step(batch, past, new, seed):
            ids = torch.randint(3, 120, (batch, past + new), generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                carried = model(input_ids=ids[:, :past], use_cache=True).state
            return {"input_ids": ids[:, past:], "state": list(carried), "use_cache": True}

        return model, step(2, 5, 3, 0), step(3, 4, 2, 1), [step(1, 6, 1, 2), step(1, 3, 5, 3), step(4, 3, 2, 4)]

    return Proof("rwkv/step", build_case, rows=(WKV_ROW,), fails_with="specialized it to be a constant",
                 beside=("all",))


def test_rwkv_step_from_a_state_fails_without_its_row_and_matches_eager_with_it(make_agent):
    proving.prove(rwkv_step_case(), make_agent)


def test_rwkv_scan_equals_upstream_bit_for_bit():
    """The rewritten function against transformers' loop, from nothing and from a state, 1 to 9 tokens: the same
    floats (the scan runs the loop's arithmetic in its order)."""
    from transformers.models.rwkv import modeling_rwkv

    from autopatch.areas.state_space import scans

    rewritten = scans.rwkv_wkv_as_scan(modeling_rwkv.rwkv_linear_attention_cpu)
    g = torch.Generator().manual_seed(0)
    decay, first = torch.randn(16, generator=g), torch.randn(16, generator=g)
    for tokens in (1, 2, 9):
        key, value = torch.randn(2, tokens, 16, generator=g), torch.randn(2, tokens, 16, generator=g)
        expected = modeling_rwkv.rwkv_linear_attention_cpu(decay, first, key, value, return_state=True)
        got = rewritten(decay, first, key, value, return_state=True)
        assert torch.equal(got[0], expected[0]) and all(map(torch.equal, got[1], expected[1]))
        carried = modeling_rwkv.rwkv_linear_attention_cpu(decay, first, key, value, state=list(expected[1]))
        again = rewritten(decay, first, key, value, state=list(expected[1]))
        assert torch.equal(again[0], carried[0]) and all(map(torch.equal, again[1], carried[1]))


def test_mlstm_scan_equals_upstream_bit_for_bit():
    """xLSTM's rewritten recurrent pass against transformers' loop, 1 to 9 tokens, from nothing and from the states
    it returned: the same floats."""
    from transformers.models.xlstm import modeling_xlstm

    from autopatch.areas.state_space import scans

    rewritten = scans.mlstm_sequence_as_scan(modeling_xlstm.mlstm_recurrent_sequence_native)
    g = torch.Generator().manual_seed(0)
    for tokens in (1, 2, 9):
        query, key, value = (torch.randn(2, 4, tokens, 8, generator=g) for _ in range(3))
        igate, fgate = (torch.randn(2, 4, tokens, generator=g) for _ in range(2))
        expected = modeling_xlstm.mlstm_recurrent_sequence_native(query, key, value, igate, fgate,
                                                                  return_last_states=True)
        got = rewritten(query, key, value, igate, fgate, return_last_states=True)
        assert torch.equal(got[0], expected[0]) and all(map(torch.equal, got[1], expected[1]))
        carried = modeling_xlstm.mlstm_recurrent_sequence_native(query, key, value, igate, fgate, *expected[1])
        assert torch.equal(rewritten(query, key, value, igate, fgate, *expected[1]), carried)
