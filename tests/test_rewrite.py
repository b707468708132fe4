"""The rewrite family: ``if`` on a tensor -> torch.cond, generated from the function's own source.

The rewriter on real functions (what it rewrites, what it leaves and why, Python semantics kept), a user's model
through the patch table and through EXPORT_PATCHES_REWRITE in a fresh interpreter, and the shipped float16 clamp
rows on tiny seq2seq models: each fails without its patch, exports with it and matches eager at other sizes, on
both branches of the rewritten ``if``."""

import copy
import math
import subprocess
import sys

import pytest
import torch
import transformers
from packaging.version import Version

import autopatch
import proving
from autopatch import registry
from autopatch.areas.fp16_clamp import rows as fp16_rows
from autopatch.diffs import format_diff
from autopatch.rewrite import NotRewritable, rewrite_tensor_conditions
from autopatch.spec import PatchSpec
from conftest import clean_env, needs_onnx, run_py

import rewrite_target as target

DYN = torch.export.Dim.DYNAMIC
TF5 = Version(transformers.__version__) >= Version("5")


def _user_spec(qualname):
    return PatchSpec(f"rewrite.test.{qualname}", "rewrite", "rewrite_target", qualname, "rewrite",
                     "autopatch.rewrite:rewrite_tensor_conditions")


# --- the rewriter itself -------------------------------------------------------------------------------------------

def test_rewritten_function_equals_the_original_on_real_tensors():
    forward = rewrite_tensor_conditions(target.ClampIfLarge.forward)
    assert forward.__autopatch_rewritten__ == (17, 19, 22)  # the mask test, the if and its elif
    assert "torch.cond" not in forward.__autopatch_source__  # the runtime helper calls it, only when tracing
    model = target.ClampIfLarge()
    for scale in (0.1, 10.0, -10.0):
        x = torch.randn(3, 4) * scale
        for mask in (None, torch.zeros(3, 4), torch.ones(3, 4)):
            torch.testing.assert_close(forward(model, x, mask), model(x, mask), rtol=0, atol=0)


def test_python_conditions_keep_short_circuit_and_the_original_branch():
    forward = rewrite_tensor_conditions(target.ClampIfLarge.forward)
    model = target.ClampIfLarge()
    # mask is None: `mask.sum()` must not be evaluated, as in Python.
    torch.testing.assert_close(forward(model, torch.ones(2, 4)), model(torch.ones(2, 4)))
    loop = rewrite_tensor_conditions(target.carried_through_a_loop)
    x = torch.tensor([0.5, 0.25])
    assert loop(x, 4)[1] == target.carried_through_a_loop(x, 4)[1] == 3


@pytest.mark.parametrize("function, why", [
    (target.assigns_an_attribute, "line 40: a branch assigns an attribute or item"),
    (target.returns_in_a_loop, "line 189: it returns from inside a for loop"),
    (target.returns_after_a_side_effect, "line 196: a branch assigns an attribute or item"),
    (target.updates_its_input, "line 297: a branch changes `x` in place"),
    (target.only_python_tests, "no if statement with a call or comparison in its test"),
])
def test_what_cannot_be_rewritten_says_why(function, why):
    with pytest.raises(NotRewritable, match=why):
        rewrite_tensor_conditions(function)


def test_a_non_tensor_output_is_a_clear_error_under_export():
    rewritten = rewrite_tensor_conditions(target.hands_on_a_tuple)

    class Model(torch.nn.Module):
        def forward(self, x):
            return rewritten(x)

    with pytest.raises(Exception, match=r"rewrite_target.py:\d+: torch.cond returns tensors only, but 'out' is tuple"):
        torch.export.export(Model(), (torch.randn(2, 3),))


# --- a user's model through the patch table ------------------------------------------------------------------------

def _export_user_model(strict=False):
    model = target.ClampIfLarge()
    args = (torch.randn(2, 4), torch.ones(2, 4))
    return model, proving.export(model, args, shapes=({0: DYN}, {0: DYN}), strict=strict)


def test_user_model_fails_without_the_rewrite(make_agent):
    make_agent([])
    with pytest.raises(Exception, match="data-dependent"):
        _export_user_model()


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_user_model_exports_with_the_rewrite_and_takes_every_branch_at_run_time(make_agent, strict):
    own = make_agent([_user_spec("ClampIfLarge.forward")])
    model, program = _export_user_model(strict)
    assert sum(n.target is torch.ops.higher_order.cond for n in program.graph.nodes) >= 2
    assert own.records["rewrite.test.ClampIfLarge.forward"].hits > 0
    for batch, scale in ((1, 0.01), (5, 10.0), (3, -0.01), (7, 1.0)):
        x, mask = torch.randn(batch, 4) * scale, (torch.rand(batch, 4) > 0.5).float()
        with torch.no_grad():
            torch.testing.assert_close(program.module()(x, mask), model(x, mask))
    # Eager, with the patch installed, runs the original.
    assert target.ClampIfLarge.forward.__autopatch_original__ is not None
    x = torch.randn(2, 4)
    torch.testing.assert_close(model(x), target.ClampIfLarge.forward.__autopatch_original__(model, x))


def test_status_and_diff_show_the_generated_code(make_agent):
    own = make_agent([_user_spec("ClampIfLarge.forward"), _user_spec("returns_in_a_loop")])
    import rewrite_target  # noqa: F401  (installs on import; already imported: applied late)

    records = own.records
    assert records["rewrite.test.ClampIfLarge.forward"].state in ("applied", "applied-late")
    assert records["rewrite.test.returns_in_a_loop"].state == "skipped"
    assert "it returns from inside a for loop" in records["rewrite.test.returns_in_a_loop"].detail
    diff = format_diff(records["rewrite.test.ClampIfLarge.forward"].spec)
    assert diff.startswith("rewrite: rewrite_target.ClampIfLarge.forward -> autopatch.rewrite:")
    for line in (17, 19, 22):  # each rewritten if dispatches to torch.cond, naming its line in the original
        assert f"rewrite_target.py:{line}')" in diff
    assert "+    elif __autopatch_test_3:\n+        limit = 1.0\n" in diff  # the original branch, when not traced


def test_environment_variable_rewrites_a_users_function_without_code_change():
    code = (
        "import torch, rewrite_target as t\n"
        "m = t.ClampIfLarge()\n"
        "p = torch.export.export(m, (torch.randn(2, 4),), dynamic_shapes=({0: torch.export.Dim.DYNAMIC}, ))\n"
        "x = torch.randn(5, 4) * 10\n"
        "torch.testing.assert_close(p.module()(x), m(x))\n"
        "import autopatch; print(autopatch.last_export_report()['patches'])\n"
    )
    tests = str(registry.__file__).rsplit("/autopatch/", 1)[0] + "/tests"
    done = run_py(code, EXPORT_PATCHES="1", EXPORT_PATCHES_REWRITE="rewrite_target:ClampIfLarge.forward, bad entry",
                  PYTHONPATH=tests)
    assert done.returncode == 0, done.stderr
    assert "'rewrite.user.rewrite_target.ClampIfLarge.forward':" in done.stdout
    assert ("EXPORT_PATCHES_REWRITE: 'bad entry' is not module:qualname or 'auto' "
            "(valid: e.g. my_model:MyModel.forward,auto)") in done.stderr
    status = subprocess.run([sys.executable, "-m", "autopatch", "status"], capture_output=True, text=True,
                            env=clean_env(EXPORT_PATCHES="1", PYTHONPATH=tests,
                                          EXPORT_PATCHES_REWRITE="rewrite_target:ClampIfLarge.forward,bad entry"))
    assert "problem: EXPORT_PATCHES_REWRITE: 'bad entry' is not module:qualname" in status.stdout
    assert "rewrite.user.rewrite_target.ClampIfLarge.forward" in status.stdout
    without = run_py(code, EXPORT_PATCHES="1", PYTHONPATH=tests)
    assert without.returncode != 0 and "data-dependent" in without.stderr


# --- shipped rows: float16 clamps in seq2seq encoder layers --------------------------------------------------------

BART_LIKE = dict(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
MODELS = {
    "bart": ("BartConfig", "BartForConditionalGeneration", {}),
    "plbart": ("PLBartConfig", "PLBartForConditionalGeneration", {}),
    "mvp": ("MvpConfig", "MvpForConditionalGeneration", {}),
    "marian": ("MarianConfig", "MarianMTModel", dict(decoder_vocab_size=128, pad_token_id=1)),
    "blenderbot_small": ("BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration", {}),
    "bigbird_pegasus": ("BigBirdPegasusConfig", "BigBirdPegasusForConditionalGeneration",
                        dict(attention_type="original_full")),
}
CLAMP = [pytest.param(model, marks=pytest.mark.requires("transformers>=5")) if model == "bigbird_pegasus"
         else model for model, _ in fp16_rows.FP16_CLAMP_LAYERS]
# bigbird_pegasus on 4.57.6 fails later in float32 too (a size mismatch in its decoder): its row is proven on 5.x.


def test_every_clamp_row_has_a_model_here():
    assert {model for model, _ in fp16_rows.FP16_CLAMP_LAYERS} == set(MODELS)


def _build16(name):
    config_name, model_name, extra = MODELS[name]
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**{**BART_LIKE, **extra}))
    return model.eval().to(torch.float16)


def _inputs(batch, source, target_len, seed):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(3, 128, (batch, source), generator=g),
            "decoder_input_ids": torch.randint(3, 128, (batch, target_len), generator=g), "use_cache": False}


def _export16(model):
    return proving.export(model, _inputs(2, 8, 3, 1), _inputs(3, 12, 4, 2))


#: Encoders with a layer norm after their last layer (attribute name): it turns the clamped values into nan, so
#: the overflowing copy drops it to show the clamp in the encoder's output.
NORMALISED_AFTER_THE_LAYERS = {"bigbird_pegasus": "layernorm_embedding"}
CLAMPED = torch.finfo(torch.float16).max - 1000  # what the clamp branch bounds values to


def _overflowing(model, name):
    """A copy whose last encoder layer overflows float16 (a huge final norm weight): the clamp branch is taken
    and the encoder's output is bounded by CLAMPED instead of holding infinities."""
    hot = copy.deepcopy(model)
    layer = hot.get_encoder().layers[-1]
    if name not in NORMALISED_AFTER_THE_LAYERS:
        layer.final_layer_norm.weight.data.fill_(6e4)
        return hot
    # Pre-norm layers: a huge norm weight overflows inside the MLP into nan (inf - inf), which no clamp bounds.
    # Overflow at the residual sum instead, with no nan: the layer before shifts the residual by 100, this one's
    # MLP adds the largest float16.
    hot.get_encoder().layers[-2].fc2.bias.data.fill_(100)
    layer.fc2.weight.data.zero_()
    layer.fc2.bias.data.fill_(torch.finfo(torch.float16).max)
    setattr(hot.get_encoder(), NORMALISED_AFTER_THE_LAYERS[name], torch.nn.Identity())
    return hot


@pytest.mark.parametrize("name", CLAMP)
def test_float16_export_fails_without_the_rewrite(make_agent, name):
    make_agent([s for s in registry.PATCHES if s.family == "pytree"])
    with pytest.raises(Exception, match="Could not guard on data-dependent expression"):
        _export16(_build16(name))


@pytest.mark.parametrize("name", CLAMP)
def test_float16_export_with_the_rewrite_matches_eager_on_both_branches(make_agent, name):
    patch_id = f"rewrite.fp16_clamp.{name}"
    own = make_agent([s for s in registry.PATCHES if s.family == "pytree" or s.id == patch_id])
    for model in (_build16(name), _overflowing(_build16(name), name)):
        program = _export16(model)
        assert own.records[patch_id].hits > 0
        for inputs in (_inputs(1, 16, 5, 3), _inputs(4, 4, 2, 4)):
            with torch.no_grad():
                expected, got = model(**inputs), program.module()(**inputs)
            torch.testing.assert_close(got.logits, expected.logits, equal_nan=True)
            torch.testing.assert_close(got.encoder_last_hidden_state, expected.encoder_last_hidden_state,
                                       equal_nan=True)
            assert torch.isfinite(got.encoder_last_hidden_state).all()  # a comparison of numbers, not of nans
    # The last run was the overflowing copy: the program took the clamp branch, as eager did.
    assert got.encoder_last_hidden_state.abs().max() == CLAMPED


# --- EXPORT_PATCHES_REWRITE=auto: the function whose `if` stopped the export is rewritten, the export re-run ----

AUTO_CODE = """
import torch, autopatch, rewrite_target as t
m = {model}
x = torch.randn(2, 4)
try:
    p = torch.export.export(m, (x,), dynamic_shapes=({{0: torch.export.Dim.DYNAMIC}},))
except Exception as exc:
    print("FAILED", type(exc).__name__, getattr(exc, "__notes__", []))
    raise SystemExit(0)
for n in (1, 5):
    y = torch.randn(n, 4) * 10
    torch.testing.assert_close(p.module()(y), m(y))
print("EXPORTED", sorted(autopatch.last_export_report()["patches"]))
print("STATES", {{k: r["state"] for k, r in ((r["id"], r) for r in autopatch.status()["patches"]) if "auto" in k}})
"""


def _auto(model, **env):
    tests = str(registry.__file__).rsplit("/autopatch/", 1)[0] + "/tests"
    done = run_py(AUTO_CODE.format(model=model), EXPORT_PATCHES="1", PYTHONPATH=tests, **env)
    assert done.returncode == 0, done.stderr
    return done


def test_auto_rewrites_the_function_that_stopped_the_export_and_exports_again():
    done = _auto("t.ClampIfLarge()", EXPORT_PATCHES_REWRITE="auto")
    assert "EXPORTED ['rewrite.auto.rewrite_target.ClampIfLarge.forward', " in done.stdout
    assert "'rewrite.auto.rewrite_target.ClampIfLarge.forward': 'applied-late'" in done.stdout
    assert "rewrote rewrite_target.ClampIfLarge.forward (a data-dependent `if` at line 19" in done.stderr
    without = _auto("t.ClampIfLarge()")  # no auto: the export fails as it does without autopatch
    assert "FAILED GuardOnDataDependentSymNode []" in without.stdout


ONNX_AUTO_CODE = """
import torch, autopatch, rewrite_target as t
m = t.ClampIfLarge()
try:
    p = torch.onnx.export(m, (torch.randn(2, 4),), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},), dynamo=True,
                          verbose=False)
except Exception as exc:
    print("FAILED", type(exc).__name__)
    raise SystemExit(0)
for y in (torch.randn(5, 4) * 10, torch.randn(1, 4) * 0.01, -torch.ones(3, 4) * 0.01):  # each branch
    (got,) = p(y)
    torch.testing.assert_close(torch.as_tensor(got), m(y))
print("EXPORTED", sorted(autopatch.last_export_report()["patches"]))
"""


def test_auto_works_under_torch_onnx_export_too():
    """torch.onnx.export wraps torch.export's guard error in a TorchExportError (its __cause__): auto mode finds it
    there, rewrites, converts again; onnxruntime takes every branch as eager does."""
    needs_onnx()
    tests = str(registry.__file__).rsplit("/autopatch/", 1)[0] + "/tests"
    done = run_py(ONNX_AUTO_CODE, EXPORT_PATCHES="1", EXPORT_PATCHES_REWRITE="auto", PYTHONPATH=tests)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "EXPORTED ['rewrite.auto.rewrite_target.ClampIfLarge.forward', " in done.stdout, done.stdout
    without = run_py(ONNX_AUTO_CODE, EXPORT_PATCHES="1", PYTHONPATH=tests)
    assert "FAILED TorchExportError" in without.stdout, without.stdout + without.stderr[-2000:]


def test_auto_says_why_when_the_function_cannot_be_rewritten():
    done = _auto("t.ReturnsInALoop()", EXPORT_PATCHES_REWRITE="auto")
    assert "FAILED GuardOnDataDependentSymNode" in done.stdout
    assert "rewrite_target.ReturnsInALoop.forward not rewritten: skipped: nothing to rewrite" in done.stdout
    assert "it returns from inside a for loop" in done.stdout


@pytest.mark.requires("transformers>=5")  # one version is enough: the shipped rows prove both
def test_auto_finds_a_transformers_layer_on_its_own(make_agent, monkeypatch):
    """Float16 bart with the shipped fp16 rows left out: auto mode finds BartEncoderLayer.forward by itself."""
    monkeypatch.setenv("EXPORT_PATCHES_REWRITE", "auto")
    own = make_agent([s for s in registry.PATCHES if s.family == "pytree"])
    model = _build16("bart")
    program = _export16(model)
    auto_id = "rewrite.auto.transformers.models.bart.modeling_bart.BartEncoderLayer.forward"
    assert autopatch.last_export_report()["patches"][auto_id] > 0
    assert own.records[auto_id].state == "applied-late"
    inputs = _inputs(4, 5, 2, 3)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(**inputs).logits, model(**inputs).logits)
    own.disable()
    assert own.records[auto_id].state == "disabled"


# --- what people write (issue 21): early returns, elif chains, views, helpers, submodules' methods -------------
# Each pattern: the rewritten function equals the original in eager on every path; plain export stops on it;
# EXPORT_PATCHES_REWRITE=auto, in a fresh interpreter running a plain script, exports it, and the program matches
# eager at other batch sizes than traced, on every path.

#: Pattern model -> the function auto mode rewrites in it.
PATTERNS = {"EarlyReturn": "EarlyReturn.forward", "ElifChain": "ElifChain.forward", "CallsAHelper": "gate",
            "WithSubmodule": "Scaler.scale", "ViewInBranch": "ViewInBranch.forward",
            "MinOfSizes": "MinOfSizes.forward", "UpdatesInPlace": "UpdatesInPlace.forward"}

PATTERN_CODE = """
import torch, autopatch, rewrite_target as t
cls = t.{name}
m = cls()
args = cls.inputs(2, 0)
try:
    dim = getattr(cls, "dynamic_dim", 0)
    p = {export}(m, args, dynamic_shapes=tuple({{dim: torch.export.Dim.DYNAMIC}} for _ in args){options})
except Exception as exc:
    print("FAILED", type(exc).__name__, getattr(exc, "__notes__", []))
    raise SystemExit(0)
try:
    for batch in (1, 3, 5):
        for path in range(cls.paths):
            inputs = cls.inputs(batch, path)
            {compare}
except AssertionError as exc:  # the program refuses an input (a guard) or differs from eager
    print("REFUSED", str(exc).splitlines()[0])
    raise SystemExit(0)
print("MATCHED", cls.paths, "paths")
print("EXPORTED", sorted(autopatch.last_export_report()["patches"]))
"""
EXPORT_COMPARE = "torch.testing.assert_close(p.module()(*inputs), m(*inputs))"


def _pattern_run(name, export="torch.export.export", options="", compare=EXPORT_COMPARE, **env):
    tests = str(registry.__file__).rsplit("/autopatch/", 1)[0] + "/tests"
    code = PATTERN_CODE.format(name=name, export=export, options=options, compare=compare)
    done = run_py(code, EXPORT_PATCHES="1", PYTHONPATH=tests, **env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _owner(qualname):
    owner = target
    for part in qualname.split("."):
        owner = getattr(owner, part)
    return owner


@pytest.mark.parametrize("name", PATTERNS)
def test_each_pattern_rewritten_equals_the_original_in_eager_on_every_path(name):
    original = _owner(PATTERNS[name])
    rewritten = rewrite_tensor_conditions(original)
    model = getattr(target, name)()
    torch.manual_seed(0)
    for batch in (1, 4):
        for path in range(model.paths):
            inputs = model.inputs(batch, path)
            expected = model(*inputs)
            if PATTERNS[name].endswith(".forward"):
                got = rewritten(model, *inputs)
            elif name == "WithSubmodule":
                got = rewritten(model.scaler, inputs[0] * 2) + 1
            else:
                got = rewritten(*inputs) * 3
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("patches", ["none", "defaults"])
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
@pytest.mark.parametrize("name", [name for name in PATTERNS if name != "MinOfSizes"])
def test_each_pattern_stops_plain_export(make_agent, name, strict, patches):
    """Plain torch, and every default patch without the rewriter (what EXPORT_PATCHES=1 alone installs): auto mode
    is what exports these (below)."""
    make_agent([] if patches == "none" else registry.PATCHES)
    model = getattr(target, name)()
    args = model.inputs(2, 0)
    with pytest.raises(Exception, match="(?i)data-dependent|aliasing"):
        torch.export.export(model, args, dynamic_shapes=tuple({0: DYN} for _ in args), strict=strict)


@pytest.mark.parametrize("patches", ["none", "defaults"])
def test_min_of_sizes_exports_but_refuses_the_other_order_without_the_rewrite(make_agent, patches):
    make_agent([] if patches == "none" else registry.PATCHES)
    model = target.MinOfSizes()
    program = torch.export.export(model, model.inputs(2, 0), dynamic_shapes=({1: DYN}, {1: DYN}))
    shorter_first = model.inputs(3, 0)
    torch.testing.assert_close(program.module()(*shorter_first), model(*shorter_first))
    with pytest.raises(AssertionError, match=r"Guard failed: x.size\(\)\[1\] == min\(x.size\(\)\[1\], y.size"):
        program.module()(*model.inputs(3, 1))


@pytest.mark.parametrize("name", PATTERNS)
def test_auto_exports_each_pattern_and_matches_eager_on_every_path_at_other_sizes(name):
    done = _pattern_run(name, EXPORT_PATCHES_REWRITE="auto")
    assert "MATCHED" in done.stdout, done.stdout
    assert f"EXPORTED ['rewrite.auto.rewrite_target.{PATTERNS[name]}'" in done.stdout, done.stdout
    # Without auto mode, EXPORT_PATCHES=1 alone: test_each_pattern_stops_plain_export (and MinOfSizes' refusal)


@pytest.mark.parametrize("name", PATTERNS)
def test_auto_exports_each_pattern_under_strict_too(name):
    """dynamo reports an `if` on a tensor as "Data-dependent branching" with the user code's file and line only:
    auto mode finds the function from them (plain strict export fails: test_each_pattern_stops_plain_export)."""
    done = _pattern_run(name, options=", strict=True", EXPORT_PATCHES_REWRITE="auto")
    assert "MATCHED" in done.stdout, done.stdout
    assert f"EXPORTED ['rewrite.auto.rewrite_target.{PATTERNS[name]}'" in done.stdout, done.stdout


ONNX_COMPARE = """expected = m(*inputs)
            for got, want in zip(p(*inputs), expected if isinstance(expected, tuple) else (expected,)):
                torch.testing.assert_close(torch.as_tensor(got), want)"""


@pytest.mark.parametrize("name", ["EarlyReturn", "ElifChain", "MinOfSizes"])
def test_auto_exports_patterns_under_torch_onnx_export(name):
    """torch.onnx.export(dynamo=True): the guard error arrives as the __cause__ of its TorchExportError;
    onnxruntime matches eager on every path at other sizes. The ONNX model of MinOfSizes needs no rewrite: it
    holds no input guard, and its Slice computes the shorter length for either order (measured here)."""
    needs_onnx()
    done = _pattern_run(name, export="torch.onnx.export", options=", dynamo=True, verbose=False",
                        compare=ONNX_COMPARE, EXPORT_PATCHES_REWRITE="auto")
    assert "MATCHED" in done.stdout, done.stdout
    rewritten = f"'rewrite.auto.rewrite_target.{PATTERNS[name]}'" in done.stdout
    assert rewritten == (name != "MinOfSizes"), done.stdout


def test_an_elif_chain_becomes_nested_conds_in_one_function():
    rewritten = rewrite_tensor_conditions(target.ElifChain.forward)
    assert rewritten.__autopatch_rewritten__ == (103, 105)
    source = rewritten.__autopatch_source__
    assert source.count("__autopatch_rt.cond_return(") == 2
    # A name may be an input or a view of one: copied under tracing (the cost: one copy per call).
    assert "return (__autopatch_rt.fresh(y), __autopatch_rt.fresh(total))" in source
    model = target.ElifChain()
    program = torch.export.export(_routed(model, rewritten), model.inputs(2, 0),
                                  dynamic_shapes=({0: DYN},))
    assert sum(n.target is torch.ops.higher_order.cond for n in program.graph.nodes) == 1  # the elif: nested
    for path in range(3):
        inputs = model.inputs(6, path)
        torch.testing.assert_close(program.module()(*inputs), model(*inputs))


def _routed(model, forward):
    """``model`` (of one input) whose forward is ``forward`` (a rewritten copy), without the patch table."""

    class Routed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            return forward(self.inner, x)

    return Routed()


# --- safety: what auto mode does not keep, and what it says ------------------------------------------------------

@pytest.mark.parametrize("name, why", [
    ("DiffersWhileCompiling", "not kept: its program does not match eager on the export's own inputs (output 0: "
                              "Tensor-likes are not close!)"),
    ("TracingChangesState", "not kept: the export with it failed: UncapturedHigherOrderOpError: Explanation: "
                            "Mutating a variable from outside the scope of this HOP is not supported."),
])
def test_auto_keeps_no_rewrite_it_cannot_show_equivalent_and_the_original_error_comes_back(name, why):
    done = _pattern_run(name, EXPORT_PATCHES_REWRITE="auto")
    assert "FAILED GuardOnDataDependentSymNode" in done.stdout, done.stdout  # the original error
    assert f"rewrite.auto.rewrite_target.{name}.forward {why}" in done.stdout, done.stdout


def _export_error(model, strict=False):
    args = model.inputs(2, 0)
    try:
        torch.export.export(model, args, dynamic_shapes=tuple({0: DYN} for _ in args), strict=strict)
    except Exception as exc:  # noqa: BLE001 (any export error is what diagnose hands over)
        return exc
    raise AssertionError("the export was expected to fail")


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_suggest_rewrite_names_the_function_that_stopped_an_export(make_agent, strict):
    """What `autopatch diagnose` can call: an export's exception (or a program) in, one line out."""
    from autopatch.rewrite.auto import suggest_rewrite

    make_agent([])
    assert suggest_rewrite(_export_error(target.CallsAHelper(), strict)) == (
        "rewrite rewrite_target.gate (the `if` on a tensor at line 116): EXPORT_PATCHES_REWRITE=auto, or "
        "EXPORT_PATCHES_REWRITE=rewrite_target:gate")
    model = target.MinOfSizes()
    program = torch.export.export(model, model.inputs(2, 0), dynamic_shapes=({1: DYN}, {1: DYN}), strict=strict)
    assert suggest_rewrite(program).startswith(
        "rewrite rewrite_target.MinOfSizes.forward (the min/max of sizes and the slices it bounds at line 211)")
    assert suggest_rewrite(ValueError("not an export error")) == ""


def test_sizes_through_builtins_are_the_builtins_in_eager():
    from autopatch.rewrite import runtime

    assert runtime.sym_min(3, 1, 2) == 1 and runtime.sym_max(3, 1, 2) == 3 and runtime.sym_min([4, 2]) == 2
    assert runtime.ceil_div(math.ceil, 7, 2) == 4 and runtime.ceil_div(math.ceil, 7.5, 2) == 4
    x = torch.arange(12).reshape(3, 4)
    assert runtime.take(x, (slice(None), slice(None, 2))).data_ptr() == x.data_ptr()  # eager: the view, as before
    rewritten = rewrite_tensor_conditions(target.chunks_of)
    assert "__autopatch_rt.ceil_div(math.ceil, x.shape[-1], size)" in rewritten.__autopatch_source__
    assert "__autopatch_rt.sym_max(count * size - x.shape[-1], 0)" in rewritten.__autopatch_source__
    for length in (1, 4, 5, 13):
        x = torch.randn(2, length)
        torch.testing.assert_close(rewritten(x, 4), target.chunks_of(x, 4), rtol=0, atol=0)


def test_chunked_sizes_export_at_other_lengths():
    rewritten = rewrite_tensor_conditions(target.chunks_of)

    class Chunks(torch.nn.Module):
        def forward(self, x):
            return rewritten(x, 4)

    program = torch.export.export(Chunks(), (torch.randn(2, 13),), dynamic_shapes=({1: DYN},))
    for length in (5, 8, 17, 30):  # not 1 to 4: torch specializes a count of one chunk (`count != 1`)
        x = torch.randn(2, length)
        torch.testing.assert_close(program.module()(x), target.chunks_of(x, 4))


def test_a_slice_is_not_copied_where_the_function_changes_tensors_in_place():
    rewritten = rewrite_tensor_conditions(target.trims_then_updates)
    assert "__autopatch_rt.take" not in rewritten.__autopatch_source__
    assert "__autopatch_rt.sym_min(x.shape[1], y.shape[1])" in rewritten.__autopatch_source__


def test_diff_shows_an_early_return_and_the_copies_it_costs(make_agent):
    own = make_agent([_user_spec("EarlyReturn.forward")])
    diff = format_diff(own.records["rewrite.test.EarlyReturn.forward"].spec)
    assert "+        return __autopatch_rt.fresh(x)\n" in diff  # the copy of the input it returns, under tracing
    assert "__autopatch_rt.cond_return(__autopatch_test_1, __autopatch_then_1, __autopatch_else_1, ()" in diff


def test_auto_rewrites_several_functions_one_round_each():
    done = _pattern_run("TwoInARow", EXPORT_PATCHES_REWRITE="auto")
    assert "MATCHED" in done.stdout, done.stdout
    assert ("EXPORTED ['rewrite.auto.rewrite_target.TwoInARow.forward', 'rewrite.auto.rewrite_target.gate', "
            in done.stdout), done.stdout
    rounds = [line for line in done.stderr.splitlines() if "exporting again" in line]
    assert len(rounds) == 2 and "rewrite_target.gate" in rounds[0] and "TwoInARow.forward" in rounds[1], rounds
    without = _pattern_run("TwoInARow")
    assert "FAILED GuardOnDataDependentSymNode" in without.stdout, without.stdout
