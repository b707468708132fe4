"""torch symbolic-shape fixes (issue 4): replacements used by the ``torch.*`` patches in registry.py.

Broadcasting between independent dynamic dims
    torch 2.13 decides ``a == b`` for two broadcast sizes from their hints (the sizes seen while tracing). When both
    example inputs had the same size, the two dims are *replaced* by one symbol (``s94 -> s27``): the program then
    rejects every broadcasting input (``(1, 3) + (4, 3)``), and named Dims fail with "must always be equal".
    The rule below (``broadcast_dim``) consults only what is statically known; otherwise it defers a
    ``torch._check(a == b or a == 1 or b == 1)`` and the output dim is ``Max(a, b)``.

    - ``infer_size`` / ``get_fast_op_impls``: the FakeTensor fast path of aten add/sub/mul/div.Tensor.
    - ``broadcast_shapes`` / ``maybe_broadcast`` / ``broadcast_in_dim_meta``: the refs path (where, maximum, pow,
      eq, expand_as...). Those only help together with backed_size_oblivious: with backed symbols a contiguity
      test in ``_prim_elementwise_meta`` still guards on the hints.

Min/Max decided by value ranges
    A view of an expanded tensor (``repeat_kv``: ``x[:, :, None].expand(...).reshape(...)``, in every
    grouped-query attention of transformers) yields strides such as ``Min(16*p + 16, 32*p + 32)``; torch then
    guards ``Eq(Min(16*p + 16, 32*p + 32), 16*p + 16)``. True for every p >= -1, but neither the simplifier nor
    the range analysis (which bounds each side separately) can tell, so a named ``Dim("past")`` fails with
    "Not all values of past ... satisfy the generated guard". ``maybe_evaluate_static`` drops the Min/Max
    arguments that the symbols' ranges show can never win, then lets torch decide again.

stop_if_static: ``set_replacement`` raises the moment a dynamic input dim becomes a constant or another input dim.

var-keyword inputs: ``get_range_constraints`` and ``convert_guards_code_to_fn`` (``forward(self, x, **kwargs)``).

Attribute stores after a higher-order op (strict=True): ``proxy_dict_on_current_table``.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import traceback
import weakref
from numbers import Number

import torch

from ... import kit
from ...kit import install_always_on
from ...kit import calls_original

# The hook on torch._subclasses.fake_impls can fire while `import torch` is still running: nothing below imports
# a torch submodule at module level (torch.fx.experimental.symbolic_shapes would start an import cycle).


def statically_known_true(expr):
    from torch.fx.experimental.symbolic_shapes import statically_known_true as known

    return known(expr)


def sym_eq(a, b):
    from torch.fx.experimental.symbolic_shapes import sym_eq as eq

    return eq(a, b)


def sym_or(*exprs):
    from torch.fx.experimental.symbolic_shapes import sym_or as any_of

    return any_of(*exprs)


def sym_and(*exprs):
    from torch.fx.experimental.symbolic_shapes import sym_and as all_of

    return all_of(*exprs)


def is_unbacked(size) -> bool:
    """A SymInt made from data (``.item()``, ``nonzero``, a boolean mask...): torch has no traced value for it."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return bool(free_unbacked_symbols(size))


def is_nested_int(size):
    from torch.fx.experimental.symbolic_shapes import is_nested_int as nested

    return nested(size)

# ---------------------------------------------------------------------------------------------------------------
# Broadcasting
# ---------------------------------------------------------------------------------------------------------------


def broadcast_dim(size_a, size_b, index):
    """The broadcast of two sizes, without reading hints: no guard, at most a deferred runtime check."""
    if statically_known_true(size_a == 1):
        return size_b
    if statically_known_true(size_b == 1) or statically_known_true(size_a == size_b):
        return size_a
    if isinstance(size_a, int) and isinstance(size_b, int):
        torch._check(
            False,
            lambda: f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b}) "
            f"at non-singleton dimension {index}",
        )
    if is_nested_int(size_a) or is_nested_int(size_b):
        torch._check(size_a == size_b, lambda: f"cannot broadcast nested int {size_a} with {size_b}")
        return size_a
    # Two symbols, one of them data-dependent (no traced value, so torch's own rule reads none): as torch, take
    # it as not 1, check the two equal at run time, return the first. The exact sym_ite below, which 0 would
    # need, is what torch's range analysis cannot bound (KeyError: ITE, seen exporting Qwen3-VL).
    both_symbols = isinstance(size_a, torch.SymInt) and isinstance(size_b, torch.SymInt)
    if both_symbols and (is_unbacked(size_a) or is_unbacked(size_b)):
        torch._check(
            size_a == size_b,
            lambda: f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b}) "
            f"at non-singleton dimension {index}",
        )
        return size_a
    torch._check(
        sym_or(size_a == size_b, size_a == 1, size_b == 1),
        lambda: f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b}) "
        f"at non-singleton dimension {index}",
    )
    # A plain int that is not 1 (ruled out above) is the result whichever way the check holds. (Not a symbol
    # whose range excludes 1: export reasons with min 2 for dims the program still accepts at 1.)
    if isinstance(size_b, int):
        return size_b
    if isinstance(size_a, int):
        return size_a
    # One of them is 1 or they are equal, so the result is the max, unless a 0 meets a 1 (eager gives 0, the max
    # 1). Where 0 is possible (every dim under backed_size_oblivious, which torch.onnx.export turns on), that case
    # is refused at run time rather than computed: an exact formula names both sizes twice (sym_ite(a == 1, b, a),
    # or min(max(a, b), a * b)), so a broadcast of a broadcast doubles the expression, exponentially with depth
    # (LFM2-MoE's decode never finished converting), and sym_ite's Piecewise grows a sympy ITE torch's range
    # analysis cannot bound (KeyError: ITE: GPT-Neo's decode). A program refuses the empty-against-one input
    # loudly; an ONNX model has no run-time checks (validate lists the dropped ones).
    if not (statically_known_true(size_a >= 1) and statically_known_true(size_b >= 1)):
        torch._check(
            sym_or(size_a == size_b, sym_and(size_a >= 1, size_b >= 1)),
            lambda: f"The exported program broadcasts a size {size_a} against {size_b} as their maximum "
            f"(dimension {index}): an empty dimension against a 1 is not supported",
        )
    return torch.sym_max(size_a, size_b)


def infer_size(a, b):
    """torch._subclasses.fake_impls.infer_size (same signature), with ``broadcast_dim``."""
    dims_a, dims_b = len(a), len(b)
    ndim = max(dims_a, dims_b)
    out = [0] * ndim
    for i in range(ndim - 1, -1, -1):
        offset = ndim - 1 - i
        dim_a, dim_b = dims_a - 1 - offset, dims_b - 1 - offset
        size_a = a[dim_a] if dim_a >= 0 else 1
        size_b = b[dim_b] if dim_b >= 0 else 1
        out[i] = broadcast_dim(size_a, size_b, i)
    return tuple(out)


def _same_shape(tensor, shape) -> bool:
    return len(tensor.shape) == len(shape) and statically_known_true(sym_eq(tuple(tensor.shape), tuple(shape)))


def _fast_binary(original_impl, promotion):
    """Wraps fake_impls' fast_binary_impl of one op. The original checks ``op.shape == final_shape`` with
    guard_or_false, which guards on the hints for backed symbols. When no operand is statically the output shape
    and every operand is contiguous on one device, the output is simply a contiguous tensor of the broadcast
    shape: built here with no guard. Every other case goes to the original."""
    from torch._prims_common import elementwise_dtypes, is_contiguous_for_memory_format_or_false
    from torch._subclasses.fake_tensor import FakeTensor

    def impl(mode, *args, **kwargs):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        shape = None
        for a in args:
            s = a.shape if isinstance(a, torch.Tensor) else ()
            shape = s if shape is None else infer_size(shape, s)
        if kwargs or not tensors or any(_same_shape(t, shape) for t in tensors):
            return original_impl(mode, *args, **kwargs)  # the original decides this without reading hints
        devices = {t.device for t in tensors if t.dim() > 0} or {t.device for t in tensors}
        if len(devices) != 1 or not all(
            is_contiguous_for_memory_format_or_false(t, memory_format=torch.contiguous_format) for t in tensors
        ):
            return original_impl(mode, *args, **kwargs)
        _, dtype = elementwise_dtypes(*args, type_promotion_kind=promotion)
        return FakeTensor(mode, torch.empty(shape, dtype=dtype, device="meta"), device=devices.pop())

    return impl


@calls_original
def contiguous_by_strides(original, a, false_if_dde=False):
    """torch._prims_common.is_contiguous (same signature), which the tracer asks of every value it records
    (``_extract_tensor_metadata``) and of every view's result. The original skips dims of size 1 and tensors of
    fewer than 2 elements by evaluating ``size == 1`` and ``numel() < 2`` on the hints: for a size that is an
    expression of symbols (a reshape's ``4*b // 4``, a broadcast's ``Max(b1, b2)``) the guard outlives the trace
    as a bound, and the program refuses batch 1. A tensor whose strides are statically the standard contiguous
    ones (each the product of the sizes after it) is contiguous whatever the sizes are, 0 and 1 included: True
    with no guard. Anything else goes to the original."""
    expected = 1
    for size, stride in reversed(tuple(zip(a.shape, a.stride()))):
        if not statically_known_true(stride == expected):
            return original(a, false_if_dde)
        expected = expected * size
    return True


_FAST_CACHE: dict = {}


@calls_original
def get_fast_op_impls(original):
    """torch._subclasses.fake_tensor.get_fast_op_impls (the alias FakeTensor dispatch looks up): the original
    table with add/sub/mul/div.Tensor wrapped by ``_fast_binary``. Built once per original table."""
    table = original()
    patched = _FAST_CACHE.get(id(table))
    if patched is None or patched[0] is not table:
        from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as KIND

        aten = torch.ops.aten
        new = dict(table)
        for op, kind in (
            (aten.add.Tensor, KIND.DEFAULT),
            (aten.sub.Tensor, KIND.DEFAULT),
            (aten.mul.Tensor, KIND.DEFAULT),
            (aten.div.Tensor, KIND.INT_TO_FLOAT),
        ):
            if op in new:
                new[op] = _fast_binary(new[op], kind)
        patched = (table, new)
        _FAST_CACHE[id(table)] = patched
    return patched[1]


def broadcast_shapes(*_shapes):
    """torch._refs._broadcast_shapes (same signature), with ``broadcast_dim``."""
    from torch._prims_common import IntLike

    shapes = tuple((x,) if isinstance(x, IntLike) else x for x in _shapes if x is not None)
    if len(shapes) == 0:
        return None
    common = [1] * max(len(s) for s in shapes)
    for shape in shapes:
        for idx in range(-1, -1 - len(shape), -1):
            common[idx] = broadcast_dim(common[idx], shape[idx], idx)
    return common


def maybe_broadcast(*args, preserve_cpu_scalar_tensors=True):
    """torch._refs._maybe_broadcast (same signature): expands unless the shape is statically the common one
    (the original asks ``x == y`` with torch._check, which replaces one dim by the other)."""
    from torch._prims_common import TensorLike, is_cpu_scalar_tensor

    common = broadcast_shapes(*(t.shape if isinstance(t, TensorLike) else None for t in args))

    def one(x):
        if x is None or isinstance(x, Number):
            return x
        if isinstance(x, TensorLike):
            if preserve_cpu_scalar_tensors and is_cpu_scalar_tensor(x):
                return x
            if _same_shape(x, common):
                return x
            return x.expand(common)
        raise RuntimeError("Unexpected type when broadcasting: " + str(type(x)) + "!")

    return tuple(one(x) for x in args)


def broadcast_in_dim_meta(a, shape, broadcast_dimensions):
    """prims.broadcast_in_dim's meta (same signature as torch._prims._broadcast_in_dim_meta): same result, but an
    undecided ``a.shape[i] == shape[i]`` becomes a deferred "broadcastable" check instead of an equality (which
    replaced one dim by the other); the input stride is kept, with no guard."""
    for idx, new_idx in enumerate(broadcast_dimensions):
        torch._check(
            sym_or(a.shape[idx] == 1, shape[new_idx] == a.shape[idx]),
            lambda: f"{a.shape[idx]} must be broadcastable to {shape[new_idx]}",
        )
    strides, original_idx = [], 0
    for idx in range(len(shape)):
        if idx in broadcast_dimensions:
            size_in = a.shape[original_idx]
            if statically_known_true(size_in == shape[idx]):
                strides.append(a.stride()[original_idx])
            elif statically_known_true(size_in == 1):
                strides.append(0)
            else:
                strides.append(a.stride()[original_idx])
            original_idx += 1
        else:
            if not statically_known_true(shape[idx] == 1):
                strides.append(0)
            elif original_idx == a.ndim:
                strides.append(1)
            else:
                strides.append(a.stride()[original_idx] * a.size()[original_idx])
    return a.as_strided(shape, strides, a.storage_offset())


# ---------------------------------------------------------------------------------------------------------------
# backed_size_oblivious, scoped to one export
# ---------------------------------------------------------------------------------------------------------------


@calls_original
def export_backed_size_oblivious(original, *args, **kwargs):
    """torch.export._trace._export_for_training, run with backed_size_oblivious=True: size checks no longer read
    the hints of backed symbols (a size seen as 2 while tracing is not assumed to be != 1)."""
    from torch.fx.experimental import _config

    with _config.patch(backed_size_oblivious=True):
        return original(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Min/Max decided by value ranges
# ---------------------------------------------------------------------------------------------------------------


@calls_original
def maybe_evaluate_static(original, self, expr, **kwargs):
    """ShapeEnv._maybe_evaluate_static (same signature). Asked only when torch itself cannot decide ``expr``
    (it is about to guard): a Min/Max inside it is reduced to the arguments that can win over the symbols'
    ranges, and torch decides the reduced expression. Ranges only narrow during a trace, so a reduction valid
    now stays valid: the program holds for every size the Dims allow, with no guard."""
    decided = original(self, expr, **kwargs)
    if decided is not None or kwargs.get("compute_hint") or kwargs.get("unbacked_only"):
        return decided
    from torch.utils._sympy.functions import Max, Min

    nodes = expr.atoms(Min, Max)
    if not nodes:
        return None
    given = kwargs.get("var_to_range")
    ranges = dict(given) if given is not None else self.var_to_range
    reduced = expr.xreplace({node: _winners(node, ranges) for node in nodes})
    if reduced != expr:
        decided = original(self, reduced, **kwargs)
        if decided is not None:
            return decided
    return _decided_over_opaque_min_max(original, self, reduced, ranges, kwargs)


def _decided_over_opaque_min_max(original, shape_env, expr, ranges, kwargs):
    """The Min/Max left in ``expr`` each taken as a symbol of its own, ranging over the Min/Max's range: a
    verdict that holds for every value in those ranges, whatever ties them to their arguments, holds for the
    real one. A product of two broadcast dims (``Max(b1, b2) * Max(s1, s2)`` against ``Max(b1, b2)``, from a
    reshape after ``x + position_embeds``) is then decided the way torch decides ``b * s`` against ``b`` for plain
    symbols, instead of becoming a run-time check that refuses a one-token step."""
    import sympy
    from torch.utils._sympy.functions import Max, Min

    nodes = list(expr.atoms(Min, Max))  # their order only names the symbols below, not the verdict
    if not nodes:
        return None
    opaque, opaque_ranges = {}, {}
    for index, node in enumerate(nodes):
        known = _ranges_of(node, ranges)
        if any(r is None for _, r in known):
            return None
        symbol = sympy.Symbol(f"autopatch_min_max_{index}", integer=True)
        opaque[node] = symbol
        opaque_ranges[symbol] = _bound(node, known)
    replaced = expr.xreplace(opaque)
    if replaced.atoms(Min, Max):  # a Min/Max nested in a form xreplace did not reach: nothing decided
        return None
    decided = original(shape_env, replaced, **{**kwargs, "var_to_range": tuple({**ranges, **opaque_ranges}.items())})
    # Only a verdict leaves here, never an expression over the opaque symbols.
    return decided if decided is not None and not decided.free_symbols else None


def _ranges_of(node, ranges) -> tuple:
    """The ranges of ``node``'s own symbols, as a key: (symbol, range or None), by name."""
    return tuple((s, ranges.get(s)) for s in sorted(node.free_symbols, key=lambda s: s.name))


@functools.lru_cache(maxsize=8192)
def _bound(node, known: tuple):
    """The range of ``node`` over ``known`` (``_ranges_of``), remembered: see ``_winners_over``."""
    from torch.utils._sympy.value_ranges import bound_sympy

    return bound_sympy(node, dict(known))


def _winners(node, ranges):
    """``node`` (a Min or Max) without the arguments that some other argument beats over the whole ranges."""
    return _winners_over(node, _ranges_of(node, ranges))


@functools.lru_cache(maxsize=8192)
def _winners_over(node, known: tuple):
    """``_winners`` for the ranges of ``node``'s own symbols (``known``): the same Min/Max meets the same ranges
    thousands of times in one export (every guard of a model under backed_size_oblivious, where each dim may be
    0, names the broadcast dims of every layer), and each try bounds every pair of its arguments."""
    from torch.utils._sympy.functions import Min
    from torch.utils._sympy.value_ranges import bound_sympy

    ranges = {s: r for s, r in known if r is not None}

    def beaten(a, b) -> bool:
        gap = bound_sympy(a - b, {s: ranges[s] for s in (a - b).free_symbols if s in ranges})
        return bool(gap.lower >= 0) if node.func is Min else bool(gap.upper <= 0)

    args = list(node.args)
    dropped = True
    while dropped and len(args) > 1:
        # One at a time: two arguments equal over the ranges beat each other, and one of them must stay.
        loser = next((a for a in args if any(b is not a and beaten(a, b) for b in args)), None)
        dropped = loser is not None
        if dropped:
            args.remove(loser)
    return args[0] if len(args) == 1 else node.func(*args)


# ---------------------------------------------------------------------------------------------------------------
# stop_if_static
# ---------------------------------------------------------------------------------------------------------------


class StopIfStaticError(RuntimeError):
    """A dynamic input dimension was specialized (torch.stop_if_static)."""


#: Path compression and unbacked bookkeeping: not specialisations.
_IGNORED = {"find", "eliminate_unbacked", "rename_unbacked_to", "rename_unbacked_to_dest"}


def _user_frame():
    """The innermost frame outside torch, the stdlib and autopatch: dynamo's user stack under strict=True, the
    Python stack otherwise."""
    stacks = []
    try:
        from torch._guards import TracingContext

        stacks.append(list(TracingContext.extract_stack()))
    except Exception:
        pass
    stacks.append(traceback.extract_stack()[:-1])
    for stack in stacks:
        for frame in reversed(stack):
            if kit.is_outside(frame.filename):
                return frame
    return None


def _source(shape_env, symbol):
    sources = shape_env.var_to_sources.get(symbol)
    if not sources:
        return None
    name = sources[0].name
    return name() if callable(name) else name  # a method before torch 2.13, a property since


@calls_original
def set_replacement(original, self, a, tgt, msg):
    """ShapeEnv._set_replacement: raises StopIfStaticError when ``a`` is an input dim and ``tgt`` a constant or
    an expression of other input dims; every other call goes to the original."""
    if (
        msg not in _IGNORED
        and _source(self, a) is not None
        and tgt != self.replacements.get(a, None)
        and a not in getattr(tgt, "free_symbols", ())
    ):
        others = sorted(
            (s for s in getattr(tgt, "free_symbols", ()) if _source(self, s) is not None), key=lambda s: s.name
        )
        if getattr(tgt, "is_number", False) or others:
            if tgt.is_number:
                what = f"specialized to the constant {tgt}"
            else:
                what = "forced equal to " + ", ".join(f"{_source(self, s)} ({s})" for s in others)
                if not getattr(tgt, "is_Symbol", False):
                    what += f" through {tgt}"
            frame = _user_frame()
            where = f"{frame.filename}:{frame.lineno} in {frame.name}\n    {frame.line}" if frame else "<unknown>"
            raise StopIfStaticError(
                f"stop_if_static: dynamic dimension {_source(self, a)} ({a}) was {what}; "
                f"guard: Eq({a}, {tgt}) [{msg}]\n  user code: {where}"
            )
    return original(self, a, tgt, msg)


# ---------------------------------------------------------------------------------------------------------------
# FakeTensor dispatch cache (torch < 2.13)
# ---------------------------------------------------------------------------------------------------------------


def dispatch_without_cache(self, func, types, args, kwargs):
    """FakeTensorMode._cached_dispatch_impl (same signature): what FakeTensorMode.dispatch runs when its cache is
    disabled. On torch 2.9 a cache hit rebuilds the output tensor with ``set_`` and symbolic strides that the
    export's proxy tracer never tracked, and the trace stops ("8*s72 ... is not tracked with proxy")."""
    return self._dispatch_impl(func, types, args, kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Dynamo: attribute stores after a higher-order op (strict=True)
# ---------------------------------------------------------------------------------------------------------------


class _CurrentSideEffects:
    """Stands for ``output.side_effects``: the table the output graph holds when an attribute is asked for, not the
    one it held when this view was made. Weak, as the output graph owns the tables that end up owning this view."""

    __slots__ = ("_output",)

    def __init__(self, output):
        self._output = weakref.ref(output)

    def __getattr__(self, name):
        return getattr(self._output().side_effects, name)


@calls_original
def proxy_dict_on_current_table(original, self, item, tx):
    """SideEffectsProxyDict.__init__ (same signature): Dynamo's view of an object's ``__dict__``, through which
    ``obj.attr = value`` is recorded. torch 2.13 keeps the side-effect table current when the view is made; tracing
    a higher-order op (torch.cond, scan, map) swaps the output graph's table for a copy taken before the op, so
    every later store through an older view lands in a table nobody reads: ``obj.attr`` still gives the old value,
    and the program returns it (a cache updated after the agent's own scan or cond gives back the past keys)."""
    original(self, item, tx)
    self.side_effects = _CurrentSideEffects(tx.output)


# ---------------------------------------------------------------------------------------------------------------
# **kwargs in forward
# ---------------------------------------------------------------------------------------------------------------


def get_range_constraints(mod, export_artifact, args, kwargs, dynamic_shapes):
    """torch.export._trace._get_range_constraints (same signature). torch 2.13 rebuilds the inputs "in traced
    order" as {signature names not passed by keyword} + {every kwarg}: with ``forward(self, x, **kwargs)`` that
    keeps the ``kwargs`` group AND adds its keys again, and make_constraints fails ("Must provide a tree_name
    when there might be a mismatch"). Here the var-keyword group is flattened into top-level names in both the
    inputs and dynamic_shapes, then both follow the traced order (positional first, kwargs in the call's order)."""
    from torch._export.non_strict_utils import make_constraints
    from torch.export.dynamic_shapes import _combine_args
    from torch.export.graph_signature import InputKind

    gm = export_artifact.aten.gm
    sig = export_artifact.aten.sig
    num_lifted = next(
        (i for i, s in enumerate(sig.input_specs) if s.kind == InputKind.USER_INPUT), len(sig.input_specs)
    )
    kwargs = kwargs or {}
    bound = _combine_args(mod, args, kwargs)
    f = mod.module() if isinstance(mod, torch.export.ExportedProgram) else mod
    signature = inspect.signature(f.forward) if isinstance(f, torch.nn.Module) else inspect.signature(f)
    varkw = next((n for n, p in signature.parameters.items() if p.kind == inspect.Parameter.VAR_KEYWORD), None)

    if dynamic_shapes is not None and not isinstance(dynamic_shapes, dict):
        dynamic_shapes = dict(zip(bound.keys(), dynamic_shapes))  # a tuple follows the signature order

    flat_args, flat_shapes = {}, {}
    for name, value in bound.items():
        if name == varkw and isinstance(value, dict):
            group = (dynamic_shapes or {}).get(name) or {}
            for key, item in value.items():
                flat_args[key] = item
                flat_shapes[key] = group.get(key) if isinstance(group, dict) else None
        else:
            flat_args[name] = value
            flat_shapes[name] = (dynamic_shapes or {}).get(name)

    order = [n for n in flat_args if n not in kwargs] + [k for k in kwargs if k in flat_args]
    combined = {k: flat_args[k] for k in order}
    shapes = {k: flat_shapes[k] for k in order} if dynamic_shapes is not None else None
    return make_constraints(export_artifact.fake_mode, gm, combined, shapes, num_lifted)


_NESTED = re.compile(r"L\['([^']+)'\]\['([^']+)'\]")


def flatten_varkw_guards(guards_code, paths_of_placeholders):
    """Non-strict guards name a var-keyword input ``L['kwargs']['past']`` while the unlifted module's
    placeholders are flat (``['past']``): the generated code keeps ``L[...]`` and fails with
    "NameError: name 'L' is not defined". Rewrites ``L['<group>']['<k>']`` to ``L['<k>']`` when ``<k>`` is a
    top-level placeholder and ``<group>`` is not: only guards that could not run otherwise change."""
    top = {getattr(p[0], "key", None) for p in paths_of_placeholders if len(p) >= 1}

    def fix(match):
        group, key = match.group(1), match.group(2)
        return f"L['{key}']" if group not in top and key in top else match.group(0)

    return [_NESTED.sub(fix, g) for g in guards_code]


def install_varkw_guards(record, owner, name, original):
    """Installer for torch.export._unlift._convert_guards_code_to_fn. It runs in ``ep.module()``, after the export
    returned, so an export-scoped router would never see it: the wrapper is always on, and changes only guard
    text that would raise NameError otherwise."""

    @functools.wraps(original)
    def convert_guards_code_to_fn(guards_code, paths_of_placeholders):
        fixed = flatten_varkw_guards(guards_code, paths_of_placeholders)
        if fixed != list(guards_code):
            kit.count_hit(record.spec.id)
        return original(fixed, paths_of_placeholders)

    return install_always_on(record, owner, name, original, convert_guards_code_to_fn)


def install_parameter_buffers(record, owner, name, original):
    """Installer for torch.export._unlift._unlift_exported_program_lifted_states, the body of ``ep.module()``.

    A module may register an ``nn.Parameter`` as a non-persistent buffer (transformers 5.12 FalconMambaMixer:
    ``register_buffer("b_c_rms", nn.Parameter(...), persistent=False)``); export keeps that Parameter in
    ``ep.constants``. ``_create_stateful_graph_module`` then ``setattr``s every constant the graph module lacks
    (the mixer never reads these buffers, so the graph has no get_attr for them): a Parameter so assigned becomes
    a parameter, and the fix-up of non-persistent buffers that follows calls ``register_buffer`` on the same name:
    "KeyError: attribute 'b_c_rms' already exists". The wrapper unlifts a shallow copy of the program whose
    constants hold those values detached (plain tensors over the same storage, one per original tensor so
    aliases stay aliases); the program itself and every other program are left as they are."""

    @functools.wraps(original)
    def unlift_exported_program_lifted_states(ep, *args, **kwargs):
        constants = ep.constants
        names = [
            n for n in ep.graph_signature.non_persistent_buffers
            if isinstance(constants.get(n), torch.nn.Parameter)
        ]
        if names:
            detached = {}
            constants = dict(constants)
            for n in names:
                value = constants[n]
                constants[n] = detached.setdefault(id(value), value.detach())
            ep = copy.copy(ep)
            ep._constants = constants
            kit.count_hit(record.spec.id)
        return original(ep, *args, **kwargs)

    return install_always_on(record, owner, name, original, unlift_exported_program_lifted_states)


# ---------------------------------------------------------------------------------------------------------------
# Input sizes derived from dynamic dims: the 0/1 leniency
# ---------------------------------------------------------------------------------------------------------------


def without_assumed_two(ranges: dict, var_to_range: dict) -> dict:
    """``ranges`` (an export's range constraints: input size expression -> ValueRanges) with the lower bound of
    every *derived* size (an expression of dims, not a dim) recomputed as if its dims could be 0 or 1.

    Export traces a dynamic dim as at least 2 and still lets it be 0 or 1 at run time: the program's input checks
    skip any lower bound of 2 ("we allow dimensions to be 0/1 at runtime"). A size derived from such a dim
    inherits that 2 multiplied out (MusicGen's ids, ``batch * codebooks``: ``4*s53`` bounded below by 8), the
    checks see a bound above 2 and the program refuses batch 1 ('Guard failed: input_ids.size()[0] >= 8') though
    its dim alone would have passed. Only bounds that come from that assumed 2 drop; a dim whose range starts
    elsewhere (a user's ``Dim(min=5)``) keeps it, and so does every upper bound."""
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    relaxed = {}
    for expr, found in ranges.items():
        symbols = getattr(expr, "free_symbols", ())
        if found.lower > 2 and symbols and not expr.is_Symbol and all(s in var_to_range for s in symbols):
            lenient = {s: ValueRanges(0, var_to_range[s].upper) if var_to_range[s].lower == 2 else var_to_range[s]
                       for s in symbols}
            lower = bound_sympy(expr, lenient).lower
            if lower < found.lower:
                found = ValueRanges(lower if lower > 0 else 0, found.upper)
        relaxed[expr] = found
    return relaxed


def install_derived_ranges(record, owner, name, original):
    """Installer for ``make_constraints`` (torch._export.non_strict_utils, and its alias in torch.export._trace):
    inside this thread's export, its ranges pass through ``without_assumed_two``; a hit is counted only when a
    bound changed, so that an export's report names the row only where it mattered."""

    @functools.wraps(original)
    def make_constraints(fake_mode, *args, **kwargs):
        ranges = original(fake_mode, *args, **kwargs)
        if not kit.in_export() or getattr(fake_mode, "shape_env", None) is None:
            return ranges
        relaxed = without_assumed_two(ranges, fake_mode.shape_env.var_to_range)
        if relaxed != ranges:
            kit.count_hit(record.spec.id)
        return relaxed

    return install_always_on(record, owner, name, original, make_constraints)
