"""torch family, symbolic shapes (issue 4), on torch 2.13 and later (benchmarks/torch_release.sh runs this file on
other releases; where a release fixed a bug upstream, the test says so with a ``requires`` mark): broadcasting between independent dynamic dims,
backed_size_oblivious, stop_if_static, and forward(**kwargs) range constraints. Each patch: the failure without
it, the export with it matching eager on sizes other than traced, and eager unchanged while it is installed."""

import contextlib
import copy
import importlib
import inspect

import pytest
import torch
from torch.export import Dim
from transformers import DynamicCache

import autopatch
import proving
from autopatch import registry, versions
from autopatch.agent import Agent
from autopatch.models import builders, handmade
from conftest import needs_onnx, requires

BROADCAST = ("torch.broadcast.infer_size", "torch.broadcast.fast_binary")
REFS = tuple(s.id for s in registry.PATCHES if s.id.startswith("torch.broadcast_refs."))
BSO = ("torch.backed_size_oblivious",)
VARKW = ("torch.export.range_constraints_varkw", "torch.export.guards_varkw")
STOP = ("torch.stop_if_static",)
# The torch rows eager code can reach. The ONNX converter's rows (triggered by torch.onnx's exporter modules,
# which a worker may not have imported) act only inside torch.onnx.export's conversion: tests/test_onnx_*.py.
ALL_TORCH = tuple(s.id for s in registry.PATCHES if s.family == "torch" and not s.trigger.startswith("torch.onnx."))
STRICT = pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])


@contextlib.contextmanager
def patches(*ids):
    """A private agent with the real entry points and the named patches (opt-in ones included)."""
    own = Agent(registry.EXPORT_ENTRY_POINTS, [s for s in registry.PATCHES if s.id in ids])
    if ids:
        own.enable(",".join(ids))
    try:
        yield own
    finally:
        own.disable()


# ---------------------------------------------------------------------------------------------------------------
# Broadcasting: x + y traced at equal sizes, run at broadcasting ones
# ---------------------------------------------------------------------------------------------------------------


class Binary(torch.nn.Module):
    def forward(self, x, y):
        return x + y, x - y, x * y, x / (y.abs() + 1)


class Where(torch.nn.Module):
    def forward(self, x, y):
        return torch.where(x > 0, x, y), torch.maximum(x, y)


TRACED = ((2, 3), (2, 3))
# Broadcasting pairs other than traced, and one equal pair.
OTHERS = [((1, 3), (4, 3)), ((4, 1), (4, 5)), ((4, 5), (4, 1)), ((2, 3), (1, 3)), ((4, 5), (1, 1)),
          ((1, 1), (4, 5)), ((3, 3), (3, 3))]
BAD = ((4, 5), (3, 5))  # not broadcastable: eager and the program must both refuse it


def _shapes(named):
    if named:
        return {"x": {0: Dim("a"), 1: Dim("b")}, "y": {0: Dim("c"), 1: Dim("d")}}
    return {"x": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, "y": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}}


def _export_pair(model, named, strict):
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randn(s, generator=gen) for s in TRACED)
    return proving.export(model, (x, y), shapes=_shapes(named), strict=strict)


def _check_pairs(model, program):
    gen = torch.Generator().manual_seed(1)
    for sx, sy in OTHERS:
        x, y = torch.randn(sx, generator=gen), torch.randn(sy, generator=gen)
        torch.testing.assert_close(program.module()(x, y), model(x, y), msg=lambda m: f"{sx}+{sy}: {m}")
    x, y = torch.randn(BAD[0]), torch.randn(BAD[1])
    with pytest.raises(RuntimeError):
        model(x, y)
    with pytest.raises((AssertionError, RuntimeError)):
        program.module()(x, y)


@STRICT
def test_broadcast_without_patch_dims_are_merged(agent, strict):
    # Dim.DYNAMIC: both inputs share one symbol per dim and the program rejects (1,3)+(4,3).
    program = _export_pair(Binary(), named=False, strict=strict)
    with pytest.raises(AssertionError, match="Guard failed"):
        program.module()(torch.randn(1, 3), torch.randn(4, 3))
    # Named Dims: the export itself fails.
    with pytest.raises(torch._dynamo.exc.UserError, match="must always be equal"):
        _export_pair(Binary(), named=True, strict=strict)


@STRICT
def test_broadcast_infer_size_alone_is_not_enough(agent, strict):
    with patches("torch.broadcast.infer_size"):
        program = _export_pair(Binary(), named=False, strict=strict)
    with pytest.raises(AssertionError, match="Guard failed"):
        program.module()(torch.randn(1, 3), torch.randn(4, 3))


@STRICT
@pytest.mark.parametrize("named", [False, True], ids=["DYNAMIC", "named"])
def test_broadcast_with_patch_keeps_both_dims(agent, strict, named):
    model = Binary()
    with patches(*BROADCAST) as own:
        program = _export_pair(model, named=named, strict=strict)
        assert own.records["torch.broadcast.infer_size"].hits > 0
        assert own.records["torch.broadcast.fast_binary"].hits > 0
    x_shape, y_shape = (n.meta["val"].shape for n in program.graph.nodes if n.op == "placeholder")
    assert len({str(d) for d in (*x_shape, *y_shape)}) == 4, (x_shape, y_shape)  # four independent symbols
    _check_pairs(model, program)


class Chained(torch.nn.Module):
    """A broadcast result against one of its own inputs."""

    def forward(self, x, y):
        z = x + y
        return z * x, z - y


@STRICT
@pytest.mark.parametrize("named", [False, True], ids=["DYNAMIC", "named"])
def test_broadcast_chained_needs_infer_size_beside_fast_binary(agent, strict, named):
    """fast_binary alone keeps x + y's dims apart, but z * x has an operand (z) that statically is the output
    shape: the fast path goes to torch's own, whose infer_size checks Max(a, b) == a and the program refuses
    every broadcasting input. torch.broadcast.infer_size decides that dim without a guard."""
    with patches("torch.broadcast.fast_binary"):
        program = _export_pair(Chained(), named=named, strict=strict)
    with pytest.raises(AssertionError, match=r"Guard failed: .*max\(.*\) == "):
        program.module()(torch.randn(1, 3), torch.randn(4, 3))
    with patches(*BROADCAST) as own:
        program = _export_pair(Chained(), named=named, strict=strict)
        assert own.records["torch.broadcast.infer_size"].hits > 0
    _check_pairs(Chained(), program)


class MaskedPlusFixed(torch.nn.Module):
    """A data-dependent length (x[mask]) broadcast against a fixed one: an unbacked SymInt beside a plain int."""

    def forward(self, x, mask, y):
        return x[mask] + y


@STRICT
def test_broadcast_patch_takes_a_data_dependent_size_beside_a_fixed_one(agent, strict):
    """Found by a zero-code Qwen2.5-VL export: the patch's exact formula (torch.sym_ite) refused an int beside
    a SymInt ("type mismatch"). Torch alone exports this; with the patch it must too, and compute the same."""
    model, n = MaskedPlusFixed(), Dim("n")
    mask = torch.tensor([1, 0, 1, 0, 1, 0], dtype=torch.bool)
    with patches(*BROADCAST) as own:
        program = torch.export.export(model, (torch.randn(6), mask, torch.randn(3)),
                                      dynamic_shapes=({0: n}, {0: n}, None), strict=strict)
        assert own.records["torch.broadcast.infer_size"].hits > 0
    for length, kept in ((9, [0, 4, 8]), (4, [2])):  # three kept, or one (broadcast against y)
        x, mask, y = torch.randn(length), torch.zeros(length, dtype=torch.bool), torch.randn(3)
        mask[kept] = True
        assert torch.equal(program.module()(x, mask, y), model(x, mask, y))


class WindowsOfATable(torch.nn.Module):
    """Slices of a table broadcast against sizes they may not reach (GPT-Neo's causal-mask buffer): under
    backed_size_oblivious every dim may be 0, a slice's length Max(0, Min(16, p + n) - Min(16, p)) included, and
    the second slice is sized by the first broadcast, so broadcast results nest."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(16, 4, generator=torch.Generator().manual_seed(0)))

    def forward(self, x, past):
        p, n = past.shape[1], x.shape[1]
        y = x + self.table[p:p + n]
        z = y + self.table[past.shape[0]:past.shape[0] + y.shape[1]]
        return z.transpose(1, 2).contiguous().view(z.shape[0], -1)


# Traced at ((2, 3, 4), (2, 5)); other sizes, the last window ending at the table's last row.
WINDOW_SIZES = [((3, 4, 4), (3, 7)), ((2, 6, 4), (2, 2)), ((4, 2, 4), (4, 14))]
EMPTY_AGAINST_ONE = ((2, 1, 4), (2, 16))  # the first window is empty (past at the table's end), x has one row


def _windows_export(export):
    dims = {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}
    return export(WindowsOfATable(), (torch.randn(2, 3, 4), torch.randn(2, 5)), shapes=(dims, dims))


def test_broadcast_where_a_size_may_be_zero_takes_the_max_and_refuses_empty_against_one(agent):
    """Where 0 is possible the patch used an exact formula, sym_ite(a == 1, b, a): its Piecewise, once a later size
    is compared with 1, holds a sympy ITE that torch's range analysis cannot bound (KeyError: ITE, GPT-Neo), and
    any exact formula names both sizes twice, so nested broadcasts grow exponentially (LFM2-MoE never finished).
    Now: the max, with a run-time check refusing the one case where it is wrong. The program matches eager at
    other sizes and refuses an empty window against one row loudly (eager answers an empty tensor)."""
    with patches(*BROADCAST, *BSO) as own:
        program = _windows_export(proving.export)
        assert own.records["torch.broadcast.fast_binary"].hits > 0  # x + window: through its broadcast_dim
    model = WindowsOfATable()
    for sx, sp in WINDOW_SIZES:
        x, past = torch.randn(sx), torch.randn(sp)
        torch.testing.assert_close(program.module()(x, past), model(x, past))
    x, past = (torch.randn(s) for s in EMPTY_AGAINST_ONE)
    assert model(x, past).numel() == 0
    with pytest.raises((AssertionError, RuntimeError), match="not supported|Guard failed"):  # the check, as a guard
        program.module()(x, past)


@requires("torch>=2.13")  # the torch.onnx rows' range
def test_broadcast_where_a_size_may_be_zero_through_onnx(make_agent):
    """torch.onnx.export turns backed_size_oblivious on itself, so every dim may be 0: the module converts with
    every default row and onnxruntime matches eager at other sizes."""
    needs_onnx()
    make_agent()
    program, model = _windows_export(proving.export_onnx), WindowsOfATable()
    assert autopatch.last_export_report()["patches"]["torch.broadcast.fast_binary"] > 0
    for sx, sp in WINDOW_SIZES:
        x, past = torch.randn(sx), torch.randn(sp)
        proving.assert_onnx_matches(program(x, past), [model(x, past)])


# ---------------------------------------------------------------------------------------------------------------
# Refs path (torch.where, torch.maximum): needs backed_size_oblivious
# ---------------------------------------------------------------------------------------------------------------


def _where_program(strict):
    return _export_pair(Where(), named=False, strict=strict)


def _fails_some_pair(model, program):
    """True when the program rejects or mis-computes one of the broadcasting pairs eager accepts."""
    for sx, sy in OTHERS:
        x, y = torch.randn(sx), torch.randn(sy)
        try:
            got = program.module()(x, y)
        except (AssertionError, RuntimeError):
            return True
        if any(not torch.equal(a, b) for a, b in zip(got, model(x, y))):
            return True
    return False


def test_backed_size_oblivious_is_opt_in_and_scoped(agent):
    spec = proving.row("torch.backed_size_oblivious")
    assert not spec.default and all(not s.default for s in registry.PATCHES if s.id in REFS + STOP)
    assert "torch.backed_size_oblivious" not in autopatch.selection.parse("all", registry.PATCHES).ids
    from torch.fx.experimental import _config

    seen = []

    class Spy(torch.nn.Module):
        def forward(self, x):
            seen.append(_config.backed_size_oblivious)
            return x * 2

    with patches(*BSO) as own:
        torch.export.export(Spy(), (torch.ones(3),), dynamic_shapes=({0: Dim.DYNAMIC},), strict=False)
        Spy()(torch.ones(3))  # eager: the flag is untouched
        assert own.records["torch.backed_size_oblivious"].hits == 1
    assert seen == [True, False] and _config.backed_size_oblivious is False


@STRICT
def test_where_needs_refs_patches_and_backed_size_oblivious(agent, strict):
    with patches(*BROADCAST, *REFS):  # default (backed) mode: the refs patches alone do not help
        assert _fails_some_pair(Where(), _where_program(strict))
    with patches(*BROADCAST, *BSO):  # backed_size_oblivious without the refs patches: dims still merged
        assert _fails_some_pair(Where(), _where_program(strict))
    model = Where()
    with patches(*BROADCAST, *REFS, *BSO) as own:
        program = _where_program(strict)
        hit = {i for i in REFS if own.records[i].hits}
        assert {"torch.broadcast_refs.maybe_broadcast", "torch.broadcast_refs.broadcast_in_dim"} <= hit, hit
    _check_pairs(model, program)


# ---------------------------------------------------------------------------------------------------------------
# stop_if_static
# ---------------------------------------------------------------------------------------------------------------


class Specializes(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 3:  # SPECIALIZES
            return x * 2
        return x


class Merges(torch.nn.Module):
    def forward(self, x, y):
        return x + y  # MERGES


def _line(cls, marker):
    lines, start = inspect.getsourcelines(cls.forward)
    return start + next(i for i, text in enumerate(lines) if marker in text)


@STRICT
def test_stop_if_static_names_the_specializing_line(agent, strict):
    x = torch.ones(3, 4)
    # Without it: torch reports the constraint violation at the end, with no file or line.
    with pytest.raises(Exception) as plain:
        torch.export.export(Specializes(), (x,), dynamic_shapes=({0: Dim.DYNAMIC},), strict=strict)
    if not strict:  # strict: dynamo's message has the user stack already
        assert __file__ not in str(plain.value)
    with patches(*STOP):
        with pytest.raises(Exception, match="stop_if_static") as caught:
            torch.export.export(Specializes(), (x,), dynamic_shapes=({0: Dim.DYNAMIC},), strict=strict)
    text = str(caught.value)
    assert f"{__file__}:{_line(Specializes, 'SPECIALIZES')}" in text, text
    assert "Eq(" in text and "constant 3" in text, text


@STRICT
def test_stop_if_static_reports_dims_forced_equal(agent, strict):
    x, y = torch.ones(2, 3), torch.ones(2, 3)
    shapes = _shapes(named=False)
    torch.export.export(Merges(), (x, y), dynamic_shapes=shapes, strict=strict)  # silently merged without it
    with patches(*STOP):
        with pytest.raises(Exception, match="stop_if_static") as caught:
            torch.export.export(Merges(), (x, y), dynamic_shapes=shapes, strict=strict)
        text = str(caught.value)
        assert "forced equal to" in text and f"{__file__}:{_line(Merges, 'MERGES')}" in text, text
        # A model that keeps its dims dynamic exports as before, and matches eager on another size.
        program = torch.export.export(Specializes(), (torch.ones(5, 4),), dynamic_shapes=({1: Dim.DYNAMIC},),
                                      strict=strict)
    other = torch.randn(5, 7)
    torch.testing.assert_close(program.module()(other), Specializes()(other))


# ---------------------------------------------------------------------------------------------------------------
# forward(self, input_ids, attention_mask=None, **kwargs)
# ---------------------------------------------------------------------------------------------------------------


class VarKw(torch.nn.Module):
    def forward(self, input_ids, attention_mask=None, **kwargs):
        return input_ids.float().sum(dim=1) + attention_mask.sum(dim=1) + kwargs["past"].sum(dim=1) * kwargs["cache"].shape[1]


def _varkw_inputs(batch, seq, mask, past, cache, seed):
    gen = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(0, 9, (batch, seq), generator=gen),
            "attention_mask": torch.randn(batch, mask, generator=gen),
            "past": torch.randn(batch, past, generator=gen), "cache": torch.randn(batch, cache, generator=gen)}


def _varkw_export(strict, order):
    batch = Dim("batch", min=1, max=8)
    shapes = {"input_ids": {0: batch, 1: Dim("seq", min=2, max=64)},
              "attention_mask": {0: batch, 1: Dim("mask", min=3, max=128)},
              "kwargs": {"past": {0: batch}, "cache": {0: batch, 1: Dim("cache", min=4, max=100)}}}
    traced = _varkw_inputs(2, 6, 7, 5, 9, seed=0)
    return proving.export(VarKw(), {k: traced[k] for k in order}, shapes=shapes, strict=strict)


ORDERS = [["input_ids", "attention_mask", "past", "cache"], ["cache", "attention_mask", "past", "input_ids"]]


@STRICT
@requires("torch<2.14")
def test_varkw_fails_without_patch(agent, strict):
    with pytest.raises(AssertionError, match="Must provide a tree_name"):
        _varkw_export(strict, ORDERS[0])


@STRICT
@requires("torch>=2.14")
def test_varkw_range_constraints_exports_without_patch_from_2_14(agent, strict):
    """2.14 builds the traced order itself (_combine_args_for_tracing): the range row is not needed there, and
    its requirement says so instead of the fingerprint reporting drift."""
    with patches(*VARKW) as own:
        assert own.records[VARKW[0]].state == "skipped", own.records[VARKW[0]].detail
        assert f"needs {proving.row(VARKW[0]).requirement_text}" in own.records[VARKW[0]].detail
    with patches():
        program = _varkw_export(strict, ORDERS[1])
    assert sorted((int(v.lower), int(v.upper)) for v in program.range_constraints.values()) == \
        [(1, 8), (2, 64), (3, 128), (4, 100)]


def test_varkw_non_strict_program_fails_to_run_without_guards_patch(agent):
    """Once the export passes (with the range row before 2.14, by itself after), the non-strict program's guards
    still name L['kwargs']['past'] while its inputs are flat."""
    with patches(*VARKW[:1]):
        program = _varkw_export(False, ORDERS[0])
    with pytest.raises(NameError, match="name 'L' is not defined"):
        program.module()(**_varkw_inputs(3, 40, 110, 5, 60, seed=1))


@STRICT
@pytest.mark.parametrize("order", ORDERS, ids=["signature-order", "shuffled"])
def test_varkw_with_patch(agent, strict, order):
    with patches(*VARKW) as own:
        program = _varkw_export(strict, order)
        applies = not versions.unmet(proving.row(VARKW[0]).requires)
        assert own.records[VARKW[0]].hits == (1 if applies else 0)
        ranges = {str(k): (int(v.lower), int(v.upper)) for k, v in program.range_constraints.items()}
        assert sorted(ranges.values()) == sorted([(1, 8), (2, 64), (3, 128), (4, 100)]), ranges
        other = _varkw_inputs(3, 40, 110, 5, 60, seed=1)
        torch.testing.assert_close(program.module()(**other), VarKw()(**other))
        with pytest.raises(AssertionError, match="Guard failed"):  # batch mismatch between inputs
            program.module()(**{**other, "past": torch.randn(4, 5)})


@STRICT
def test_varkw_patch_changes_no_other_export(agent, strict):
    class Plain(torch.nn.Module):
        def forward(self, x, mask=None, *, scale=None):
            return x * mask.sum() + scale

    inputs = {"x": torch.randn(2, 3), "mask": torch.randn(2, 4), "scale": torch.randn(3)}
    shapes = {"x": {0: Dim("b"), 1: Dim("n")}, "mask": {0: Dim("b"), 1: Dim("m")}, "scale": {0: Dim("n")}}
    programs = []
    for ids in ((), VARKW):
        with patches(*ids):
            program = torch.export.export(Plain(), (), dict(reversed(inputs.items())), dynamic_shapes=shapes,
                                          strict=strict)
            programs.append((str(program.graph), {str(k): str(v) for k, v in program.range_constraints.items()},
                             program._guards_code))
    assert programs[0] == programs[1]


# ---------------------------------------------------------------------------------------------------------------
# torch.export.parameter_buffers: ep.module() of a program whose non-persistent buffer holds an nn.Parameter
# ---------------------------------------------------------------------------------------------------------------


class ParameterBuffer(torch.nn.Module):
    """As transformers 5.12's FalconMambaMixer: an nn.Parameter registered as a non-persistent buffer, twice under
    two names (aliases), and one the forward reads."""

    def __init__(self):
        super().__init__()
        shared = torch.nn.Parameter(torch.arange(3.0), requires_grad=False)
        self.register_buffer("unused", shared, persistent=False)
        self.register_buffer("alias", shared, persistent=False)
        self.register_buffer("scale", torch.nn.Parameter(torch.full((3,), 2.0), requires_grad=False),
                             persistent=False)

    def forward(self, x):
        return x * self.scale


def _parameter_buffer_export():
    return proving.export(ParameterBuffer(), (torch.randn(2, 3),), shapes=({0: Dim("b")},))


def test_parameter_buffer_program_fails_to_unlift_without_patch(agent):
    with pytest.raises(KeyError, match="already exists"):
        _parameter_buffer_export().module()


def test_parameter_buffer_program_unlifts_with_patch(agent):
    with patches("torch.export.parameter_buffers"):  # (it runs after the export: no export's hit to count)
        program = _parameter_buffer_export()
        module = program.module()
    x = torch.randn(5, 3)
    torch.testing.assert_close(module(x), ParameterBuffer()(x))
    buffers = dict(module.named_buffers(remove_duplicate=False))
    assert {"unused", "alias", "scale"} <= set(buffers), buffers.keys()
    assert buffers["unused"] is buffers["alias"]  # still one tensor, over the program's storage
    assert buffers["unused"].data_ptr() == program.constants["unused"].data_ptr()
    assert isinstance(program.constants["unused"], torch.nn.Parameter)  # the program itself is unchanged


# ---------------------------------------------------------------------------------------------------------------
# torch.dynamo.stores_after_hop: strict=True, a cache updated after a torch.cond
# ---------------------------------------------------------------------------------------------------------------

STORES = ("torch.dynamo.stores_after_hop",)


class CondThenCacheUpdate(torch.nn.Module):
    """A decode step whose cache update follows a higher-order op, as in a linear-attention layer before a full
    attention one once the agent has rewritten its chunked scan (Kimi-Linear, Bailing-hybrid) or an ``if``."""

    def forward(self, x, past_key_values):
        y = torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: -t, (x,))
        keys, values = past_key_values.update(y, y + 1, 0)
        return keys.sum(-2) + values.mean(-2), past_key_values


def _cond_then_update_case():
    def inputs(batch, past, seq, seed):
        gen = torch.Generator().manual_seed(seed)
        cache = DynamicCache()
        cache.update(*(torch.randn(batch, 2, past, 4, generator=gen) for _ in range(2)), 0)
        return {"x": torch.randn(batch, 2, seq, 4, generator=gen), "past_key_values": cache}

    return CondThenCacheUpdate(), inputs(2, 5, 3, 0), inputs(3, 4, 2, 1), [inputs(4, 6, 5, 2), inputs(1, 3, 1, 3)]


@requires("torch>=2.13")  # 2.9.1 keeps the store (its Dynamo has no __dict__ view to go stale)
def test_cache_update_after_cond_is_silently_lost_without_patch(make_agent):
    model, traced, other, runs = _cond_then_update_case()
    make_agent(registry.PATCHES, "pytree")
    program = proving.export(model, traced, other, strict=True)
    for inputs in runs:
        with torch.no_grad():
            _, got = program.module()(**copy.deepcopy(inputs))
            _, expected = model(**copy.deepcopy(inputs))
        # No error anywhere: the program hands back the past keys, without the step's own.
        past, seq = inputs["past_key_values"].layers[0].keys.shape[-2], inputs["x"].shape[-2]
        assert got.layers[0].keys.shape[-2] == past and expected.layers[0].keys.shape[-2] == past + seq


@requires("torch>=2.13")
def test_cache_update_after_cond_is_kept_with_patch(make_agent):
    case = proving.Proof("cond then cache update", _cond_then_update_case, STORES, "", strict=True)
    proving.exports_with(case, make_agent)


# ---------------------------------------------------------------------------------------------------------------
# Eager unchanged, and a transformers decode step with the default torch patches
# ---------------------------------------------------------------------------------------------------------------


def test_eager_results_unchanged_with_all_torch_patches(agent):
    model, config = handmade.build("llama")
    inputs = builders.decode_inputs(model, config, batch=2, past=5, seq=3, seed=4)
    gen = torch.Generator().manual_seed(5)
    pairs = [(torch.randn(sx, generator=gen), torch.randn(sy, generator=gen)) for sx, sy in OTHERS]
    varkw = _varkw_inputs(3, 4, 5, 6, 7, seed=6)

    def run():
        with torch.no_grad():
            out = model(**copy.deepcopy(inputs)).logits
        return [out, *[Binary()(x, y) for x, y in pairs], *[Where()(x, y) for x, y in pairs], VarKw()(**varkw),
                torch.broadcast_shapes((1, 3), (4, 1))]

    expected = run()
    for spec in registry.PATCHES:  # every row installed, whatever this worker's earlier tests imported
        if spec.id in ALL_TORCH:
            importlib.import_module(spec.trigger)
    here = [i for i in ALL_TORCH if not versions.unmet(proving.row(i).requires)]
    with patches(*ALL_TORCH) as own:
        assert all(own.records[i].state in ("applied", "applied-late") for i in here), \
            {i: (own.records[i].state, own.records[i].detail) for i in ALL_TORCH}
        got = run()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_decoder_export_with_default_torch_patches(agent, name):
    model, config = handmade.build(name)
    traced = builders.decode_inputs(model, config, batch=2, past=6, seq=3, seed=1)
    other = builders.decode_inputs(model, config, batch=3, past=8, seq=2, seed=2)
    run = builders.decode_inputs(model, config, batch=1, past=9, seq=1, seed=3)
    defaults = [s.id for s in registry.PATCHES if s.default and s.family in ("pytree", "torch")]
    assert set(BROADCAST) | set(VARKW) <= set(defaults)
    with patches(*defaults) as own, torch.no_grad():
        shapes = autopatch.guess_dynamic_shapes(traced, other)
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)
        assert own.records["torch.broadcast.infer_size"].hits > 0
        got = program.module()(**copy.deepcopy(run))
        expected = model(**copy.deepcopy(run))
    torch.testing.assert_close(got.logits, expected.logits)


# ---------------------------------------------------------------------------------------------------------------
# Min/Max decided by value ranges: grouped-query attention with named Dims
# ---------------------------------------------------------------------------------------------------------------

MIN_MAX = ("torch.min_max_by_range",)


def _named_decode_shapes(config):
    """Named Dims, as torch's documentation writes them, for a one-token step: the mask covers the past and it."""
    batch, past = Dim("batch", max=64), Dim("past", max=512)
    layer = {0: batch, 2: past}
    return {
        "input_ids": {0: batch},
        "attention_mask": {0: batch, 1: past + 1},
        "past_key_values": [[layer] * config.num_hidden_layers, [layer] * config.num_hidden_layers],
    }


def _gqa_decode(ids, strict, runs=()):
    """Exports a llama decode step (grouped-query attention) with named Dims under the patches ``ids`` and runs
    the program on ``runs`` (batch, past) while they are still installed; returns the hit count of the patch."""
    model, config = handmade.build("llama")
    assert config.num_key_value_heads < config.num_attention_heads  # repeat_kv expands the keys and values
    traced = builders.decode_inputs(model, config, batch=2, past=6, seq=1, seed=1)
    with patches(*ids) as own, torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced),
                                      dynamic_shapes=_named_decode_shapes(config), strict=strict)
        for batch, past in runs:
            run = builders.decode_inputs(model, config, batch=batch, past=past, seq=1, seed=past)
            got = program.module()(**copy.deepcopy(run))
            expected = model(**copy.deepcopy(run))
            torch.testing.assert_close(got.logits, expected.logits)
            torch.testing.assert_close(torch.utils._pytree.tree_leaves(got.past_key_values),
                                       torch.utils._pytree.tree_leaves(expected.past_key_values))
        return own.records[MIN_MAX[0]].hits if MIN_MAX[0] in own.records else 0


@requires("torch>=2.13,<2.14")
def test_gqa_decode_with_named_dims_fails_without_min_max_patch(agent):
    # Non-strict only: under strict=True dynamo's own tracing of the same reshape records no such guard.
    # 2.9 and 2.14 decide this Min by themselves; the row is still needed there for the broadcast steps below.
    others = [s.id for s in registry.PATCHES if s.default and s.family == "pytree"] + list(BROADCAST + VARKW)
    with pytest.raises(Exception, match=r"Not all values of past .* satisfy the generated guard min\("):
        _gqa_decode(others, strict=False)


# torch 2.9's dynamo fails building its shape guards for this strict program (IndexError in SHAPE_ENV), with or
# without any row of ours: an upstream bug, fixed by 2.13.
@pytest.mark.parametrize("strict", [False, pytest.param(True, marks=requires("torch>=2.13"))],
                         ids=["non-strict", "strict"])
def test_gqa_decode_with_named_dims_and_min_max_patch(agent, strict):
    defaults = [s.id for s in registry.PATCHES if s.default and s.family in ("pytree", "torch")]
    assert set(MIN_MAX) <= set(defaults)
    hits = _gqa_decode(defaults, strict, runs=[(3, 9), (1, 17), (4, 2)])
    if not strict:
        assert hits > 0


class EmbedAndProject(torch.nn.Module):
    """GPT-2's first steps: token embeddings plus position embeddings (``position_ids`` given, as generate() gives
    them for a padded batch: its dims are the caller's own, broadcast against the tokens'), then Conv1D's
    ``view(-1, hidden)`` and back to ``(batch, length, out)``."""

    def __init__(self):
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(32, 8), torch.nn.Embedding(64, 8)
        self.weight = torch.nn.Parameter(torch.randn(8, 24))

    def forward(self, input_ids, position_ids):
        hidden = self.tokens(input_ids) + self.positions(position_ids)
        out = hidden.view(-1, hidden.size(-1)) @ self.weight
        return out.view(hidden.size()[:-1] + (24,))


def _embed_and_project(ids):
    """Traced with a three-token step (batch 2), run with one-token steps and other batches."""
    model = EmbedAndProject()
    traced = {"input_ids": torch.randint(0, 32, (2, 3)), "position_ids": torch.arange(3).expand(2, 3) + 4}
    other = {"input_ids": torch.randint(0, 32, (3, 4)), "position_ids": torch.arange(4).expand(3, 4) + 2}
    with patches(*ids), torch.no_grad():
        program = torch.export.export(model, (), kwargs=traced,
                                      dynamic_shapes=autopatch.guess_dynamic_shapes(traced, other))
        for batch, length in ((4, 1), (1, 1), (3, 5)):
            run = {"input_ids": torch.randint(0, 32, (batch, length)),
                   "position_ids": torch.arange(length).expand(batch, length) + 7}
            torch.testing.assert_close(program.module()(**run), model(**run))


def test_one_token_step_after_broadcast_refused_without_min_max_patch(agent):
    """The broadcast rows keep the dims of ``position_ids`` apart from the tokens' (``Max(b1, b2)``,
    ``Max(s1, s2)``); the reshape back then asks ``Max(b1, b2) * Max(s1, s2) != Max(b1, b2)``, which torch
    cannot decide over Max terms: a run-time check that refuses every one-token step."""
    with pytest.raises(Exception, match=r"Guard failed: .*max\(.*\) \* (torch\.sym_)?max\(.*\) != (torch\.sym_)?max\("):
        _embed_and_project(BROADCAST)


def test_one_token_step_after_broadcast_with_min_max_patch(agent):
    """Each Max taken as a symbol over its own range: decided as torch decides ``b * s != b`` for plain dims."""
    _embed_and_project(BROADCAST + MIN_MAX)


# ---------------------------------------------------------------------------------------------------------------
# Contiguity without guards: Mamba-2's one-token decode at batch 1
# ---------------------------------------------------------------------------------------------------------------


def _batch_one_decode_case(model_type: str) -> proving.Proof:
    """``model_type``'s one-token decode step (the tiny catalogue's model, its own cache class), traced at batches
    2 and 3 as a user's two sample sets give them, then run at batch 1 (the common generation case) with two
    other past lengths, and at batch 3."""
    from autopatch.dynamic_shapes import fit_to_signature
    from autopatch.models import tiny

    def build():
        arch = tiny.architecture(model_type, "causal")
        model = tiny.build(arch)
        traced, other = (tiny.inputs(model, arch, "decode", k) for k in range(2))
        assert traced["input_ids"].shape[1] == 1 and other["input_ids"].shape[0] == 3  # one token, batches 2 and 3
        sets.extend((traced, other))
        positions = "cache_position" in traced  # a recurrent model's step says where it writes
        runs = [builders.decode_inputs(model, model.config, batch=1, past=past, seq=1, seed=past,
                                       cache_position=positions) for past in (5, 11)]
        return model, traced, other, [other, *({k: run[k] for k in traced} for run in runs)]

    def shapes(model):  # Mamba-2 takes cache_position through **kwargs
        return fit_to_signature(model, autopatch.guess_dynamic_shapes(*sets))

    sets = []
    return proving.Proof(f"{model_type}/decode-batch-1", build, rows=("torch.contiguity.static_strides",),
                         fails_with=r"Guard failed: .* >= 2", raises=AssertionError, beside=("all",),
                         fails_at_run=True, shapes=shapes)


@requires("transformers>=5.23")  # 4.57's Mamba-2 decode takes batch 1 without the row (measured)
@pytest.mark.parametrize("model_type", ["mamba2"])
def test_one_token_decode_at_batch_one_needs_contiguity_without_guards(make_agent, model_type):
    proving.prove(_batch_one_decode_case(model_type), make_agent)


def test_contiguity_without_guards_answers_as_the_original():
    """Plain tensors of every layout the fast path may meet, against torch's own answer: standard strides (sizes
    0 and 1 included) are contiguous; a transpose, a strided slice, an expand are not (the original decides)."""
    import torch._prims_common as prims

    from autopatch.areas.torch_shapes.fixes import contiguous_by_strides

    base = torch.zeros(2, 3, 4)
    tensors = [base, torch.zeros(0, 3), torch.zeros(1, 5), torch.zeros(3, 1, 2), torch.zeros(()), base.transpose(0, 1),
               base[:, ::2], torch.zeros(1, 4).expand(3, 4), base[:, :, :1], torch.zeros(2, 1).t()]
    for tensor in tensors:
        got = contiguous_by_strides(prims.is_contiguous, tensor)
        assert got == prims.is_contiguous(tensor) == tensor.is_contiguous(), (tensor.shape, tensor.stride())
