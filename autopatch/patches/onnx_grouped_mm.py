"""transformers' grouped expert matmul, translated to ONNX by ``torch.onnx.export``.

transformers 5.x runs the experts of a mixture-of-experts block (Mixtral, Qwen3-MoE, DeepSeek-V3, ...) through
``_grouped_mm``; on CPU, and whenever ``torch._grouped_mm`` cannot be used, through its own custom operator
``transformers::grouped_mm_fallback``.  torch.export keeps that operator as one opaque node (its eager body
loops over ``offs.tolist()``), so the program runs, but ``torch.onnx.export(..., dynamo=True)`` stops with
"No ONNX function found for transformers.grouped_mm_fallback": torchlib knows only aten operators.
transformers' own ONNX exporter brings a translation of its own; a user who calls ``torch.onnx.export`` has none.

The translation below adds one to every ONNX registry built while the current thread exports
(``ONNXRegistry.from_torchlib``), as a custom function, so that a translation given in
``custom_translation_table`` (transformers' exporter gives one) still wins: those are registered after it and the
registry puts the latest custom function first.

Semantics, from the operator's schema: rows of ``input [S, K]`` are sorted by expert; ``offs [E]`` holds each
expert's cumulative end row; ``out[r] = input[r] @ weight[e(r)]`` with ``weight [E, K, N]``; rows past
``offs[-1]`` (expert-parallel sentinels) are zero.  The number of experts is a weight dimension, static in
every export, so the graph has one MatMul per expert over a row slice whose bounds are read from ``offs`` at
run time: any token count, any routing.
"""

from __future__ import annotations

import functools
import inspect

from .. import scope

PATCH_ID = "transformers.moe.onnx_grouped_mm"


def _fallback_op():
    """``torch.ops.transformers.grouped_mm_fallback.default``, or None when transformers (not yet imported, or a
    version without it) has not registered it."""
    import torch

    namespace = getattr(torch.ops, "transformers", None)
    try:
        return namespace.grouped_mm_fallback.default if namespace is not None else None
    except AttributeError:
        return None


def grouped_mm_to_onnx(input, weight, offs):
    """The ONNX graph of ``transformers::grouped_mm_fallback`` (traced by onnxscript at translation time)."""
    from onnxscript import ir
    from onnxscript import opset18 as op

    scope.count_hit(PATCH_ID)
    experts = weight.shape[0]
    if not isinstance(experts, int):
        raise ValueError(
            f"{PATCH_ID}: the number of experts (dimension 0 of the expert weights, {experts!r}) must be static"
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


def install_onnx_grouped_mm(owner, name, raw):
    """Installer for ``ONNXRegistry.from_torchlib`` (a classmethod): always in place, it registers the translation
    only while the current thread exports (``torch.onnx.export`` is an export entry point) and only when
    transformers has defined the operator."""
    # Wrapped, not rewritten: what it needs of the original is a registry with ``register_op`` (torch >= 2.5).
    original = raw.__func__

    @functools.wraps(original)
    def from_torchlib(cls, *args, **kwargs):
        registry = original(cls, *args, **kwargs)
        target = _fallback_op() if scope.in_export() else None
        if target is not None:
            registry.register_op(target, grouped_mm_to_onnx)
        return registry

    from_torchlib.__autopatch_original__ = original
    from_torchlib.__autopatch_id__ = PATCH_ID
    wrapper = classmethod(from_torchlib)
    setattr(owner, name, wrapper)

    def undo() -> str:
        if inspect.getattr_static(owner, name) is not wrapper:
            return f"could not restore {owner.__name__}.{name}: replaced on top of autopatch's wrapper"
        setattr(owner, name, raw)
        return ""

    return undo
