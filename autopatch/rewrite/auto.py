"""EXPORT_PATCHES_REWRITE=auto: when an ``if`` on a tensor stops an export, rewrite that function and export again.

torch says where the data-dependent guard came from only as text; the traceback says it as frames. The deepest
frame outside torch, autopatch and the standard library is the code whose ``if`` (or ``and``/``or``/``not``)
read the tensor. Its code object names the function (``co_qualname``) and its globals the module, which is
enough for an ordinary rewrite patch (``rewrite.auto.<module>.<qualname>``), installed like any other (status,
diff, undo). The export then runs again, at most ``MAX_ROUNDS`` times, one new function per round. When the
function cannot be rewritten, the original error is raised with a note saying why.

Under ``strict=True`` dynamo stops instead ("Data-dependent branching") with the user code's stack as
``real_stack`` (file and line, no frames): the function is the one of an imported module whose lines hold it.
A program that exports but fixed a relation between sizes (``Guard failed: x.size()[1] == min(...)`` on the next
call) holds the ``sym_min``/``sym_max`` node that made it, whose stack trace names the line likewise.
"""

from __future__ import annotations

import inspect
import os
import re
import sys

from ..errors import causes, is_outside, outside_frames
from ..spec import PatchSpec

PREFIX = "rewrite.auto."
MAX_ROUNDS = 8


def failing_function(exc):
    """``(module, qualname, line)`` of the function whose condition raised the data-dependent guard ``exc`` (or
    the guard error it wraps, or dynamo's data-dependent branching under strict=True), or a string saying why
    there is none."""
    # torch.onnx.export raises a TorchExportError whose cause is torch.export's guard error.
    chain = list(causes(exc))
    guard = next((e for e in chain if type(e).__name__ == "GuardOnDataDependentSymNode"), None)
    if guard is not None:
        frames = outside_frames(guard.__traceback__)
        if not frames:
            return "no frame outside torch"
        frame, line = frames[-1]
        code = frame.f_code
        qualname = getattr(code, "co_qualname", code.co_name)  # Python 3.11+: the full dotted name
        return _reachable(frame.f_globals.get("__name__", ""), qualname, line)
    branching = next((e for e in chain if getattr(e, "real_stack", None)
                      and "data-dependent branching" in str(e).lower()), None)
    if branching is None:
        return "not a data-dependent guard"
    user = [summary for summary in branching.real_stack if is_outside(summary.filename)]
    if not user:
        return "no frame outside torch"
    return function_at(user[-1].filename, user[-1].lineno)


def _reachable(module: str, qualname: str, line: int):
    """``(module, qualname, line)``, or why a rewrite patch cannot name the function."""
    if "<locals>" in qualname or "<" in qualname:
        return f"{qualname} is not reachable by name from its module"
    if module not in sys.modules:
        return f"module {module!r} of {qualname} is not imported"
    return module, qualname, line


def function_at(filename: str, line: int):
    """``(module, qualname, line)`` of the innermost function or method, reachable by name from an imported
    module, whose code holds ``filename:line``; or a string saying why there is none."""
    real = os.path.realpath(filename)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or os.path.realpath(path) != real:
            continue
        holding = [f for f in _functions_of(module, name) if _holds(f.__code__, line)]
        if holding:
            innermost = max(holding, key=lambda f: f.__code__.co_firstlineno)
            return _reachable(name, innermost.__qualname__, line)
    return f"no function of an imported module holds {filename}:{line}"


def _holds(code, line: int) -> bool:
    lines = [number for *_, number in code.co_lines() if number is not None]
    return bool(lines) and code.co_firstlineno <= line <= max(lines)


def _functions_of(namespace, module: str, seen=None) -> list:
    """The plain functions defined in ``module`` reachable from ``namespace``: its functions, and its classes'
    methods (static, class, properties), nested classes included."""
    seen = set() if seen is None else seen
    found = []
    for value in list(vars(namespace).values()):
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        if inspect.isclass(value) and value.__module__ == module and id(value) not in seen:
            seen.add(id(value))
            found += _functions_of(value, module, seen)
        elif inspect.isfunction(value) and value.__module__ == module:
            found.append(inspect.unwrap(value))
    return found


#: A guard of an exported program that fixes which of two sizes is the smaller (or larger): the program then
#: refuses every input where the other one is.
_SIZE_RELATION = re.compile(r"(==|!=).*\b(min|max)\(|\b(min|max)\(.*(==|!=)")
_STACK_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def size_relation_function(program):
    """``(module, qualname, line)`` of the function whose builtin ``min``/``max`` of sizes left ``program`` (an
    ExportedProgram, or what holds one as ``exported_program``) guarding which size is the smaller, or a string
    saying why there is none."""
    program = getattr(program, "exported_program", program)
    guards = [g for g in getattr(program, "_guards_code", None) or () if _SIZE_RELATION.search(g)]
    if not guards:
        return "no guard relating sizes through min/max"
    import torch

    for node in program.graph.nodes:
        if node.target in (torch.sym_min, torch.sym_max):
            places = [(f, int(n)) for f, n in _STACK_LINE.findall(node.meta.get("stack_trace") or "") if is_outside(f)]
            if places:
                return function_at(*places[-1])
    return f"the guard {guards[0]!r} names no min/max of user code"


def entry_inputs(entry_args, entry_kwargs) -> tuple[tuple, dict]:
    """The model's positional and keyword inputs an export entry point was given (``args`` second, ``kwargs`` by
    name or, for torch.export's, third)."""
    args = entry_args[1] if len(entry_args) > 1 else entry_kwargs.get("args", ())
    kwargs = entry_kwargs.get("kwargs")
    if kwargs is None and len(entry_args) > 2 and isinstance(entry_args[2], dict):
        kwargs = entry_args[2]
    return (tuple(args) if isinstance(args, (tuple, list)) else (args,)), dict(kwargs or {})


def program_of(result):
    """The ExportedProgram of an entry point's result (torch.onnx's ONNXProgram holds the one it converted)."""
    return getattr(result, "exported_program", result)


def differences(got, expected) -> str:
    """Where two model outputs differ (their pytree leaves, tensors within torch's default tolerance), or ''."""
    import torch
    from torch.utils._pytree import tree_leaves

    got_leaves, expected_leaves = tree_leaves(got), tree_leaves(expected)
    if len(got_leaves) != len(expected_leaves):
        return f"{len(got_leaves)} outputs where eager gives {len(expected_leaves)}"
    for index, (value, want) in enumerate(zip(got_leaves, expected_leaves)):
        if isinstance(want, torch.Tensor):
            try:
                torch.testing.assert_close(value, want, equal_nan=True)
            except (AssertionError, TypeError, ValueError) as exc:
                return f"output {index}: {str(exc).strip().splitlines()[0]}"
        elif value != want:
            return f"output {index}: {value!r} where eager gives {want!r}"
    return ""


def suggest_rewrite(error) -> str:
    """For ``autopatch diagnose``: which rewrite would fix ``error`` (an export's exception, or an exported
    program whose guards fix a size relation), as one line; '' when none applies."""
    found = failing_function(error) if isinstance(error, BaseException) else size_relation_function(error)
    if isinstance(found, str):
        return ""
    module, qualname, line = found
    what = ("the `if` on a tensor" if isinstance(error, BaseException)
            else "the min/max of sizes and the slices it bounds")
    return (f"rewrite {module}.{qualname} ({what} at line {line}): EXPORT_PATCHES_REWRITE=auto, or "
            f"EXPORT_PATCHES_REWRITE={module}:{qualname}")


def spec_for(module: str, qualname: str) -> PatchSpec:
    return PatchSpec(
        id=f"{PREFIX}{module}.{qualname}",
        family="rewrite",
        trigger=module,
        target=qualname,
        mode="rewrite",
        replacement="autopatch.rewrite:rewrite_tensor_conditions",
        reason="rewritten after an `if` on a tensor or a min/max of sizes in it stopped an export "
               "(EXPORT_PATCHES_REWRITE=auto)",
    )
