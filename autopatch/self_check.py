"""EXPORT_PATCHES_VALIDATE=1: every export in scope checks what it produced, on its own inputs, before returning.

Two checks, both written into the run's record (``EXPORT_PATCHES_REPORT``, ``autopatch.last_export_report()``):
  * ``matches_eager``: the program (``ep.module()``; for ``torch.onnx.export``, onnxruntime) against the eager
    model on the inputs the export was given, every output leaf by its path, and the output structure;
  * ``dims``: every dim the caller's ``dynamic_shapes`` asked for is still symbolic in the program's inputs. A dim
    torch specialized without a word (``Dim.AUTO``, ``Dim.DYNAMIC``) is a program that refuses every other size.
When the program and eager disagree, the patches whose replacements made nodes of the program are named beside
the discrepancy (``patches_in_program``): the first places to look.
A failed check is a warning line naming it (an exception under EXPORT_PATCHES_STRICT=1): the export's result is
returned as it was. Checks that cannot run (onnxruntime missing, inputs that cannot be copied) say why instead.

Runs outside the export scope (the eager model runs its own code, as the caller's would) and costs an eager call
and a program call per export: for CI and debugging, not for production loops.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import time

#: Float outputs match within this (absolute and relative): float32 programs differ from eager by rounding.
TOLERANCE = 1e-4


def check(original, args: tuple, kwargs: dict, result) -> dict:
    """The checks of one finished export (``original``: the entry point, called with ``args`` and ``kwargs``);
    never raises: a check that fails to run records its error."""
    from . import scope
    from .runs import one_line

    started = time.time()
    report: dict = {}
    try:
        call = inspect.signature(original).bind(*args, **kwargs)
        call.apply_defaults()
        given = call.arguments
        model = given.get("mod", given.get("model"))
        if type(model).__name__ == "ExportedProgram":  # torch.onnx.export of a program: the program is the reference
            model = model.module()
        inputs = (tuple(given.get("args") or ()), dict(given.get("kwargs") or {}))
        with scope.outside_export():
            report["matches_eager"] = _matches_eager(model, inputs, result)
            report["dims"] = _dims(model, inputs, given.get("dynamic_shapes"), _program_of(result))
    except Exception as exc:  # a check must never change what the export returns
        report["error"] = one_line(exc)
    report["seconds"] = round(time.time() - started, 3)
    report["ok"] = "error" not in report and all(
        part.get("ok", True) for part in (report.get("matches_eager", {}), report.get("dims", {})))
    return report


def _program_of(result):
    """The ExportedProgram of a result: itself, or an ONNXProgram's (its inputs are the program's)."""
    return getattr(result, "exported_program", result) if result is not None else None


def _matches_eager(model, inputs, result) -> dict:
    import torch

    from .validate import _paths, leaf_difference  # validate's leaves by path and its comparison of one leaf

    args, kwargs = inputs
    with torch.no_grad(), _buffers_kept(model):
        expected = model(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        if type(result).__name__ == "ONNXProgram":
            try:
                import onnxruntime  # noqa: F401
            except ImportError:
                return {"skipped": "onnxruntime is not installed (pip install 'autopatch[onnx]')"}
            from .onnx_inputs import run

            got = run(result, *copy.deepcopy(args), **copy.deepcopy(kwargs))
            runner = "onnxruntime"
        else:
            got = result.module()(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            runner = "program"
    have, want = _paths(got), _paths(expected)
    if list(have) != list(want):
        return {"ok": False, "runner": runner, "problem": "output structure differs from eager's: program "
                f"{sorted(set(have) - set(want))[:3]}, eager {sorted(set(want) - set(have))[:3]}"}
    worst_path, worst, wrong = "-", 0.0, []
    for path, expected_leaf in want.items():
        leaf = torch.as_tensor(have[path])
        if tuple(leaf.shape) != tuple(expected_leaf.shape):
            wrong.append(f"{path}: shape {tuple(leaf.shape)}, eager {tuple(expected_leaf.shape)}")
            continue
        diff, _, close = leaf_difference(leaf, expected_leaf, TOLERANCE)
        if diff > worst or worst_path == "-":
            worst_path, worst = path, diff
        if not close:
            wrong.append(f"{path}: max abs {diff:.3g}")
    entry = {"ok": not wrong, "runner": runner, "leaves": len(want), "max_abs": worst, "worst": worst_path}
    if wrong:
        entry["problem"] = f"{len(wrong)} of {len(want)} leaves differ from eager beyond {TOLERANCE:g}: " + \
                           "; ".join(wrong[:3])
        from .attribution import patches_in_program

        suspects = patches_in_program(_program_of(result))
        if suspects:
            entry["patches_in_program"] = suspects
            entry["problem"] += "; nodes in the program made by " + ", ".join(suspects)
    return entry


@contextlib.contextmanager
def _buffers_kept(model):
    """The model's buffers as they were before the check's eager call (a forward that counts calls, a batch norm
    in training mode...): the check must leave the caller's model as the export found it."""
    modules = model.modules() if hasattr(model, "modules") else ()
    # The buffer objects themselves, and their values: a forward may update one in place or assign a new tensor.
    kept = [(module, name, buffer, buffer.detach().clone()) for module in modules
            for name, buffer in module._buffers.items() if buffer is not None]
    try:
        yield
    finally:
        for module, name, buffer, values in kept:
            buffer.data.copy_(values)
            module._buffers[name] = buffer


def _dims(model, inputs, dynamic_shapes, program) -> dict:
    """The dims ``dynamic_shapes`` requested dynamic, and those the program's inputs hold as constants."""
    import torch
    from torch.export.graph_signature import InputKind

    if not dynamic_shapes or program is None or not hasattr(program, "graph_signature"):
        return {"requested": 0, "specialized": []}
    named = _named_inputs(model, inputs)
    pairs = (
        [(name, named[name], spec) for name, spec in dynamic_shapes.items() if name in named]
        if isinstance(dynamic_shapes, dict)
        else list(zip(named, named.values(), dynamic_shapes))
    )
    requested = []  # (path, tensor, dim)
    for name, value, spec in pairs:
        requested += _requested(name, value, spec)
    # User-input placeholders are the inputs' leaves, in the order the export flattened (args, kwargs): keywords
    # in the order of forward's parameters, as torch.export reorders them.
    args, kwargs = inputs
    order = list(_named_inputs(model, ((), kwargs)))
    leaves = torch.utils._pytree.tree_leaves((args, {name: kwargs[name] for name in order if name in kwargs}))
    users = [s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    node_of = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    placeholder = {id(leaf): node_of.get(name) for leaf, name in zip(leaves, users)}
    specialized, unmatched = [], 0
    for path, tensor, dim in requested:
        node = placeholder.get(id(tensor))
        value = node.meta.get("val") if node is not None else None
        if value is None or value.dim() != tensor.dim():
            unmatched += 1
            continue
        size = value.shape[dim]
        if not isinstance(size, torch.SymInt) or size.node.maybe_as_int() is not None:
            specialized.append(f"{path}.shape[{dim}] = {int(size)}")
    entry = {"ok": not specialized, "requested": len(requested), "specialized": specialized}
    if unmatched:
        entry["unmatched"] = unmatched  # requested dims of inputs the program does not take as such
    if specialized:
        entry["problem"] = f"{len(specialized)} of {len(requested)} dims requested dynamic were specialized: " + \
                           ", ".join(specialized[:4])
    return entry


def _named_inputs(model, inputs) -> dict:
    """The inputs by the names of ``forward``'s parameters, in order (how torch.export reads a dict of shapes)."""
    args, kwargs = inputs
    try:
        signature = inspect.signature(model.forward)
        bound = signature.bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError, AttributeError):
        return {f"args[{i}]": value for i, value in enumerate(args)} | dict(kwargs)
    named = {}
    for name, value in bound.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)  # **kwargs: torch.export names them by their own keys
        else:
            named[name] = value
    return named


def _requested(path: str, value, spec) -> list:
    """(path, tensor, dim) for each dim ``spec`` asks to be dynamic in ``value`` (a tensor, a container of them,
    or a pytree node such as a cache, whose spec lists its tensors in flattening order)."""
    import torch

    if spec is None:
        return []
    if isinstance(value, torch.Tensor):
        per_dim = spec.items() if isinstance(spec, dict) else enumerate(spec) if isinstance(spec, (list, tuple)) \
            else ()
        return [(path, value, int(dim)) for dim, kind in per_dim if _is_dynamic(kind)]
    if isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)) and len(value) == len(spec):
        return [item for i, (v, s) in enumerate(zip(value, spec)) for item in _requested(f"{path}[{i}]", v, s)]
    if isinstance(value, dict) and isinstance(spec, dict):
        return [item for key, s in spec.items() if key in value for item in _requested(f"{path}.{key}", value[key], s)]
    # A pytree node (a cache): its tensors in flattening order against the spec's per-tensor entries.
    tensors = [leaf for leaf in torch.utils._pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]
    per_tensor = torch.utils._pytree.tree_leaves(spec, is_leaf=_is_tensor_spec)
    if len(tensors) != len(per_tensor):
        return []
    return [item for i, (t, s) in enumerate(zip(tensors, per_tensor)) for item in _requested(f"{path}#{i}", t, s)]


def _is_tensor_spec(spec) -> bool:
    return spec is None or (isinstance(spec, dict) and all(isinstance(k, int) for k in spec)) or (
        isinstance(spec, (list, tuple)) and all(not isinstance(s, (list, tuple, dict)) for s in spec))


def _is_dynamic(kind) -> bool:
    """A per-dim entry of dynamic_shapes that asks for a dynamic dim: a ``Dim``, ``Dim.AUTO``/``Dim.DYNAMIC`` or a
    name; not None, an int or ``Dim.STATIC``."""
    from torch.export import Dim

    return kind is not None and not isinstance(kind, int) and kind != Dim.STATIC
