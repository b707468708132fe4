"""Running an ``ONNXProgram`` (``torch.onnx.export(..., dynamo=True)``) on the keyword inputs the model was called with.

torch's ``ONNXProgram.__call__(**kwargs)`` flattens the caller's dict in the caller's order, Python values
included, drops ``None`` and pairs what is left with the graph's inputs by position. The exported program itself
pairs keywords by name, so the same dict that a program accepts can feed an ONNX model wrong inputs:

- ``{"y": ..., "x": ...}`` for ``forward(x, y)`` swaps two tensors of the same shape and dtype: the model runs and
  answers wrong;
- a ``use_cache=True`` before a tensor shifts every later tensor one input along: onnxruntime refuses a bool where
  it wanted a float, if a type differs at all.

:func:`run` orders the keywords as the exported program's own input spec does and passes the tensor leaves only,
which are exactly the graph's inputs (torch.export turns every other leaf into a constant of the program). It is
what ``autopatch validate --onnx`` and the benchmarks' ONNX columns call; user code can call it too.
"""

from __future__ import annotations


def graph_inputs(program, args: tuple = (), kwargs: dict | None = None) -> list:
    """The tensors to feed ``program``'s ONNX graph, in its input order, from the inputs the model was called
    with (positional ``args`` as given, ``kwargs`` reordered by name as the exported program expects them)."""
    import torch
    from torch.export._tree_utils import reorder_kwargs

    spec = program.exported_program.call_spec.in_spec
    ordered = reorder_kwargs(dict(kwargs or {}), spec) if spec is not None else dict(kwargs or {})
    return [leaf for leaf in torch.utils._pytree.tree_leaves((tuple(args), ordered)) if isinstance(leaf, torch.Tensor)]


def run(program, *args, **kwargs):
    """Run ``program`` with onnxruntime (CPU provider) and return its outputs rebuilt into the exported program's
    output tree (a ``ModelOutput`` with its cache, not a flat tuple), so they compare leaf by leaf with eager's."""
    import torch

    flat = list(program(*graph_inputs(program, args, kwargs)))
    out_spec = program.exported_program.call_spec.out_spec
    if out_spec is None:
        return flat
    return torch.utils._pytree.tree_unflatten(program_leaves(program, flat), out_spec)


def program_leaves(program, flat: list) -> list:
    """The exported program's output leaves from the ONNX graph's outputs: those the graph returns, in order, and
    the program's constants (see :func:`returned_leaves`) put back in their places."""
    specs = user_output_specs(program.exported_program)
    returned = returned_leaves(program.exported_program)
    if sum(returned) != len(flat):  # pairing by position would shift: refuse, never guess
        raise ValueError(f"the ONNX model returns {len(flat)} outputs, its exported program returns {sum(returned)} "
                         f"tensors (and {len(returned) - sum(returned)} constants)")
    tensors = iter(flat)
    return [next(tensors) if is_returned else spec.arg.value for spec, is_returned in zip(specs, returned)]


def user_output_specs(exported_program) -> list:
    from torch.export.graph_signature import OutputKind

    return [spec for spec in exported_program.graph_signature.output_specs if spec.kind == OutputKind.USER_OUTPUT]


def returned_leaves(exported_program) -> list[bool]:
    """Per output leaf of the exported program, whether the ONNX graph returns it. torch.onnx returns tensors and
    symbolic numbers only: a leaf the program holds as a constant (``None`` for a hybrid cache's layers of the
    other kind, on 4.57) is no output of the graph, and the outputs after it move up one place."""
    from torch.export.graph_signature import ConstantArgument

    return [not isinstance(spec.arg, ConstantArgument) for spec in user_output_specs(exported_program)]
