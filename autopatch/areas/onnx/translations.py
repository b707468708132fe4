"""ONNX translations for operators torchlib lacks, added to the registries ``torch.onnx.export`` builds.

``torch.onnx.export(..., dynamo=True)`` converts an exported program node by node through a registry built by
``ONNXRegistry.from_torchlib``; an operator it has no function for stops the conversion ("No ONNX function found
for ..."). The rows below each add one translation, as a custom function, to every registry built while the
current thread exports (``torch.onnx.export`` is an export entry point), so a ``custom_translation_table`` a
caller gives still wins: those are registered later, and the registry puts the latest custom function first.
Rows share one wrapper around ``from_torchlib``; each adds or removes its own entry.

* ``transformers.moe.onnx_grouped_mm``: transformers 5.x runs the experts of a mixture-of-experts block (Mixtral,
  Qwen3-MoE, DeepSeek-V3, ...) through ``_grouped_mm``; on CPU, and whenever ``torch._grouped_mm`` cannot be
  used, through its own custom operator ``transformers::grouped_mm_fallback``.  torch.export keeps that operator
  as one opaque node (its eager body loops over ``offs.tolist()``).  transformers' own ONNX exporter brings a
  translation of its own; a user who calls ``torch.onnx.export`` has none.  Semantics, from the operator's
  schema: rows of ``input [S, K]`` are sorted by expert; ``offs [E]`` holds each expert's cumulative end row;
  ``out[r] = input[r] @ weight[e(r)]`` with ``weight [E, K, N]``; rows past ``offs[-1]`` (expert-parallel
  sentinels) are zero.  The number of experts is a weight dimension, static in every export, so the graph has
  one MatMul per expert over a row slice whose bounds are read from ``offs`` at run time.
* ``torch.onnx.complex_unsqueeze``: the converter holds a complex tensor as its real view (a last dimension of 2)
  and dispatches complex inputs only to translations written for them; torchlib has one for squeeze, none for
  unsqueeze. DeepSeek-V2 and Llama 4 rotate queries and keys in complex numbers (``torch.polar``,
  ``view_as_complex``) and unsqueeze the frequencies: "No ONNX function found for aten.unsqueeze ... complex-valued
  input". Added for complex inputs only; real ones keep torchlib's.
* ``torch.onnx.searchsorted``: torchlib has no ``searchsorted``. The agent's packed-image rows (Qwen2-VL, Qwen2.5-VL,
  Qwen3-VL, GLM-4V, Qwen3.5) find each patch's image by ``searchsorted`` over the cumulative patch counts, so
  those models exported with torch.export and stopped at ONNX conversion. Translated as the count of entries
  below each value (every value against every entry: exact for a sorted sequence, memory values x entries).
* ``torch.onnx.cummax``: nor ``cummax``, with which the same rows carry each token's image and run start forward.
  The running maximum and its index (the latest on ties, as torch), every position against every earlier one.
* ``torch.onnx.floordiv_rounds_down``: torch.export records arithmetic on sizes as Python operators; torchlib
  translates ``//`` on them as ONNX ``Div``, which truncates toward zero, where Python's rounds down. The two differ
  whenever the operands' signs differ and the division is not exact: the ceiling idiom ``-(-n // k)`` then loses
  one, and ``(n - 1) // k`` at ``n = 0`` gives 0 for -1. transformers 4.x Reformer cuts its axial position table to
  ``-(-(max_id + 1) // width)`` columns: the ONNX model cut one column short and onnxruntime refused the gather;
  a slice or a reshape can take the short value silently. Python's floor: the truncated quotient, one less where
  the signs differ and a remainder is left.
* ``torch.onnx.sdpa_masked_rows``: torch's ``scaled_dot_product_attention`` answers zeros for a query row whose
  boolean mask hides every key (its safe softmax); torchlib's translation adds the mask as a large negative
  number and answers the mean of the values instead. Every left-padded batch has such rows (the padding tokens'
  own), and transformers 5.x gives SDPA boolean masks, so the ONNX model of a padded prefill disagrees with
  eager at the padding positions (logits, hidden states, the cache entries there), measured up to 0.5. The
  translation is torchlib's own, with those rows set to zero as torch sets them; float masks are left as they
  are (torch does not zero them either).
"""

from __future__ import annotations

import functools
import inspect

from ... import kit

GROUPED_MM = "transformers.moe.onnx_grouped_mm"
SDPA_MASKED_ROWS = "torch.onnx.sdpa_masked_rows"
COMPLEX_UNSQUEEZE = "torch.onnx.complex_unsqueeze"
SEARCHSORTED = "torch.onnx.searchsorted"
CUMMAX = "torch.onnx.cummax"
FLOORDIV = "torch.onnx.floordiv_rounds_down"

#: patch id -> [operator resolver, translation, installs]: the rows installed now; the shared wrapper registers
#: them all.
_ACTIVE: dict = {}
#: (owner, name, original raw attribute, our classmethod wrapper) while the shared wrapper is in place.
_INSTALLED: list = []


def _grouped_mm_op():
    """``torch.ops.transformers.grouped_mm_fallback.default``, or None when transformers (not yet imported, or a
    version without it) has not registered it."""
    import torch

    namespace = getattr(torch.ops, "transformers", None)
    try:
        return namespace.grouped_mm_fallback.default if namespace is not None else None
    except AttributeError:
        return None


def _aten(name: str, overload: str = "default"):
    """The resolver of ``torch.ops.aten.<name>.<overload>``, looked up when a registry is built (as
    ``_grouped_mm_op`` is: torch is imported by then, never when this module loads)."""

    def resolve():
        import torch

        return getattr(getattr(torch.ops.aten, name), overload)

    return resolve


def grouped_mm_to_onnx(input, weight, offs):
    """The ONNX graph of ``transformers::grouped_mm_fallback`` (traced by onnxscript at translation time)."""
    from onnxscript import ir
    from onnxscript import opset18 as op

    kit.count_hit(GROUPED_MM)
    experts = weight.shape[0]
    if not isinstance(experts, int):
        raise ValueError(
            f"{GROUPED_MM}: the number of experts (dimension 0 of the expert weights, {experts!r}) must be static"
        )
    rows_axis = op.Constant(value_ints=[0])
    ends = op.Cast(offs, to=ir.DataType.INT64)
    start = op.Constant(value_ints=[0])
    pieces = []
    for expert in range(experts):
        end = op.Gather(ends, op.Constant(value_ints=[expert]), axis=0)  # [1]: a Slice bound
        rows = op.Slice(input, start, end, rows_axis)
        pieces.append(op.MatMul(rows, op.Gather(weight, op.Constant(value_int=expert), axis=0)))
        start = end
    # Rows past the last expert's end (sentinels) are zero in the operator: a zero block as tall as they are.
    tail_rows = op.Shape(op.Slice(input, start, op.Constant(value_ints=[2**62]), rows_axis), start=0, end=1)
    tail_shape = op.Concat(tail_rows, op.Shape(weight, start=2, end=3), axis=0)
    pieces.append(op.Expand(op.CastLike(op.Constant(value_float=0.0), input), tail_shape))
    return op.Concat(*pieces, axis=0)


def sdpa_to_onnx(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``aten::scaled_dot_product_attention`` as torchlib translates it, then, under a boolean mask, the rows
    that attend to no key set to zero (torch's answer for them)."""
    from onnxscript import ir
    from onnxscript import opset18 as op
    from onnxscript.function_libs.torch_lib.ops import nn

    output = nn.aten_scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                  enable_gqa)
    if attn_mask is None or attn_mask.dtype != ir.DataType.BOOL:
        return output
    kit.count_hit(SDPA_MASKED_ROWS)
    # [..., L, 1]: 1 where the row attends to some key; broadcasts over heads and the value dim like the mask.
    attends = op.ReduceMax(op.Cast(attn_mask, to=ir.DataType.FLOAT), op.Constant(value_ints=[-1]), keepdims=1)
    hides_every_key = op.Equal(attends, op.Constant(value_float=0.0))
    return op.Where(hides_every_key, op.CastLike(op.Constant(value_float=0.0), output), output)


def complex_unsqueeze_to_onnx(self, dim: int):
    """``aten::unsqueeze`` of a complex tensor, which the converter holds as its real view (a last dimension of 2:
    real, imaginary): a non-negative ``dim`` is the same axis there; a negative one counts from the end, one
    further left, past that last dimension."""
    from onnxscript import opset18 as op

    kit.count_hit(COMPLEX_UNSQUEEZE)
    return op.Unsqueeze(self, op.Constant(value_ints=[dim if dim >= 0 else dim - 1]))


complex_unsqueeze_to_onnx.complex_valued = True  # registered for complex inputs only (register_op's is_complex)


def install_complex_unsqueeze(record, owner, name, raw):
    """Installer of ``torch.onnx.complex_unsqueeze`` on ``ONNXRegistry.from_torchlib``."""
    return _install(record, _aten("unsqueeze"), complex_unsqueeze_to_onnx, owner, name, raw)


def searchsorted_to_onnx(sorted_sequence, self, out_int32=False, right=False, side=None, sorter=None):
    """``aten::searchsorted.Tensor``: for each value, how many entries of the sorted sequence (its last axis) lie
    below it (``<=`` with ``right`` or ``side="right"``, ``<`` otherwise): the insertion index, exactly, for a
    sorted sequence. A comparison of every value with every entry, summed; a ``sorter`` is refused."""
    from onnxscript import ir
    from onnxscript import opset18 as op

    if sorter is not None:
        raise ValueError(f"{SEARCHSORTED}: searchsorted with a sorter has no translation here")
    kit.count_hit(SEARCHSORTED)
    last = op.Constant(value_ints=[-1])
    values = op.Unsqueeze(self, last)  # [..., M, 1]
    entries = sorted_sequence if len(sorted_sequence.shape) == 1 else op.Unsqueeze(
        sorted_sequence, op.Constant(value_ints=[-2]))  # [N] or [..., 1, N]
    entries = op.CastLike(entries, values)
    below = op.LessOrEqual(entries, values) if right or side == "right" else op.Less(entries, values)
    count = op.ReduceSum(op.Cast(below, to=ir.DataType.INT64), last, keepdims=0)
    return op.Cast(count, to=ir.DataType.INT32) if out_int32 else count


def install_searchsorted(record, owner, name, raw):
    """Installer of ``torch.onnx.searchsorted`` on ``ONNXRegistry.from_torchlib``."""
    return _install(record, _aten("searchsorted", "Tensor"), searchsorted_to_onnx, owner, name, raw)


def cummax_to_onnx(self, dim: int):
    """``aten::cummax``: along ``dim``, the running maximum and the index where it was taken (the latest on ties,
    as torch). Every position against every earlier one (a lower-triangular mask), reduced: values x length
    memory along that axis."""
    import numpy as np
    from onnxscript import ir
    from onnxscript import opset18 as op

    kit.count_hit(CUMMAX)
    rank = len(self.shape)
    if rank == 0:
        return op.Identity(self), op.Constant(value_int=0)
    axis = dim % rank
    perm = [a for a in range(rank) if a != axis] + [axis]  # the scanned axis last
    back = [perm.index(a) for a in range(rank)]
    scanned = op.Transpose(self, perm=perm)  # [..., L]
    length = op.Squeeze(op.Shape(scanned, start=-1))
    positions = op.Range(op.Constant(value_int=0), length, op.Constant(value_int=1))  # [L]
    earlier = op.LessOrEqual(op.Unsqueeze(positions, op.Constant(value_ints=[0])),
                             op.Unsqueeze(positions, op.Constant(value_ints=[1])))  # [i, j]: j <= i
    dtype = self.dtype.numpy()
    lowest = -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min
    rows = op.Unsqueeze(scanned, op.Constant(value_ints=[-2]))  # [..., 1, L]: row i sees every x[j]
    seen = op.Where(earlier, rows, op.CastLike(op.Constant(value=ir.tensor(np.array(lowest, dtype=dtype))), rows))
    values = op.ReduceMax(seen, op.Constant(value_ints=[-1]), keepdims=0)  # [..., L]
    at_max = op.And(earlier, op.Equal(rows, op.Unsqueeze(values, op.Constant(value_ints=[-1]))))
    indices = op.ReduceMax(op.Where(at_max, positions, op.Constant(value_int=-1)), op.Constant(value_ints=[-1]),
                           keepdims=0)
    return op.Transpose(values, perm=back), op.Transpose(indices, perm=back)


def install_cummax(record, owner, name, raw):
    """Installer of ``torch.onnx.cummax`` on ``ONNXRegistry.from_torchlib``."""
    return _install(record, _aten("cummax"), cummax_to_onnx, owner, name, raw)


def floordiv_to_onnx(self, other):
    """``operator.floordiv`` of two sizes (int64 scalars or Python ints), as Python rounds it: down. ONNX ``Div``
    truncates toward zero, which is the floor only when the signs agree or nothing remains. (A symbolic float's
    ``//`` reaches the program as ``truediv`` then ``math.floor``, never as this operator.)"""
    from onnxscript import ir
    from onnxscript import opset18 as op

    kit.count_hit(FLOORDIV)
    numerator, divisor = (op.Constant(value_int=v) if isinstance(v, int) else op.Cast(v, to=ir.DataType.INT64)
                          for v in (self, other))
    truncated = op.Div(numerator, divisor)
    zero = op.Constant(value_int=0)
    signs_differ = op.Xor(op.Less(numerator, zero), op.Less(divisor, zero))
    remainder_left = op.Not(op.Equal(op.Mul(truncated, divisor), numerator))
    return op.Sub(truncated, op.Cast(op.And(signs_differ, remainder_left), to=ir.DataType.INT64))


def install_floordiv(record, owner, name, raw):
    """Installer of ``torch.onnx.floordiv_rounds_down`` on ``ONNXRegistry.from_torchlib``."""
    import operator

    return _install(record, lambda: operator.floordiv, floordiv_to_onnx, owner, name, raw)


def install_sdpa_masked_rows(record, owner, name, raw):
    """Installer of ``torch.onnx.sdpa_masked_rows`` on ``ONNXRegistry.from_torchlib``."""
    return _install(record, _aten("scaled_dot_product_attention"), sdpa_to_onnx, owner, name, raw)


def install_onnx_grouped_mm(record, owner, name, raw):
    """Installer of ``transformers.moe.onnx_grouped_mm`` on ``ONNXRegistry.from_torchlib``."""
    return _install(record, _grouped_mm_op, grouped_mm_to_onnx, owner, name, raw)


def _install(record, operator, translation, owner, name, raw):
    """Adds this row's translation; puts the shared wrapper in place if no row has yet. The undo removes the
    row's entry, and the wrapper with the last one."""
    patch_id = record.spec.id
    if not _INSTALLED:
        _INSTALLED.append((owner, name, raw, _wrap(owner, name, raw)))
    # Counted: two agents (the process-wide one and a private one) may each install the same row.
    _ACTIVE.setdefault(patch_id, [operator, translation, 0])[2] += 1

    def undo() -> str:
        entry = _ACTIVE.get(patch_id)
        if entry is not None:
            entry[2] -= 1
            if entry[2] <= 0:
                del _ACTIVE[patch_id]
        if _ACTIVE or not _INSTALLED:
            return ""
        owner_, name_, raw_, wrapper = _INSTALLED.pop()
        if inspect.getattr_static(owner_, name_) is not wrapper:
            return f"could not restore {owner_.__name__}.{name_}: replaced on top of autopatch's wrapper"
        setattr(owner_, name_, raw_)
        return ""

    return undo


def _wrap(owner, name, raw):
    """``from_torchlib`` (a classmethod) wrapped: the registry it builds, plus the active rows' translations while
    the current thread exports, for operators this process has defined."""
    # Wrapped, not rewritten: what it needs of the original is a registry with ``register_op`` (torch >= 2.5).
    original = raw.__func__

    @functools.wraps(original)
    def from_torchlib(cls, *args, **kwargs):
        registry = original(cls, *args, **kwargs)
        if kit.in_export():
            for operator, translation, _ in list(_ACTIVE.values()):
                target = operator()
                if target is not None:
                    registry.register_op(target, translation,
                                         is_complex=getattr(translation, "complex_valued", False))
        return registry

    from_torchlib.__autopatch_original__ = original
    from_torchlib.__autopatch_id__ = "onnx translations"
    wrapper = classmethod(from_torchlib)
    setattr(owner, name, wrapper)
    return wrapper
