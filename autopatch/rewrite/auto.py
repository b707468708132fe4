"""EXPORT_PATCHES_REWRITE=auto: when an ``if`` on a tensor stops an export, rewrite that function and export again.

torch says where the data-dependent guard came from only as text; the traceback says it as frames. The deepest
frame outside torch, autopatch and the standard library is the code whose ``if`` (or ``and``/``or``/``not``)
read the tensor. Its code object names the function (``co_qualname``) and its globals the module, which is
enough for an ordinary rewrite patch (``rewrite.auto.<module>.<qualname>``), installed like any other (status,
diff, undo). The export then runs again, at most ``MAX_ROUNDS`` times, one new function per round. When the
function cannot be rewritten, the original error is raised with a note saying why.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback

from ..spec import PatchSpec

PREFIX = "rewrite.auto."
MAX_ROUNDS = 8


def _library_roots() -> tuple[str, ...]:
    import torch

    roots = [os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)),
             sysconfig.get_paths()["stdlib"]]
    return tuple(os.path.realpath(root) + os.sep for root in roots)


def _guard_error(exc):
    """The data-dependent guard error behind ``exc``: itself, or the cause an exporter wrapped it in
    (``torch.onnx.export`` raises a TorchExportError whose ``__cause__`` is torch.export's error)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if type(exc).__name__ == "GuardOnDataDependentSymNode":
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def failing_function(exc):
    """``(module, qualname, line)`` of the function whose condition raised the data-dependent guard ``exc`` (or
    the guard error it wraps), or a string saying why there is none."""
    exc = _guard_error(exc)
    if exc is None:
        return "not a data-dependent guard"
    roots = _library_roots()
    frames = [(frame, line) for frame, line in traceback.walk_tb(exc.__traceback__)
              if not os.path.realpath(frame.f_code.co_filename).startswith(roots)
              and not frame.f_code.co_filename.startswith("<")]
    if not frames:
        return "no frame outside torch"
    frame, line = frames[-1]
    code = frame.f_code
    qualname = getattr(code, "co_qualname", code.co_name)  # Python 3.11+: the full dotted name
    if "<locals>" in qualname or "<" in qualname:
        return f"{qualname} is not reachable by name from its module"
    module = frame.f_globals.get("__name__", "")
    if module not in sys.modules:
        return f"module {module!r} of {qualname} is not imported"
    return module, qualname, line


def spec_for(module: str, qualname: str) -> PatchSpec:
    return PatchSpec(
        id=f"{PREFIX}{module}.{qualname}",
        family="rewrite",
        trigger=module,
        target=qualname,
        mode="rewrite",
        replacement="autopatch.rewrite:rewrite_tensor_conditions",
        reason="rewritten after an `if` on a tensor in it stopped an export (EXPORT_PATCHES_REWRITE=auto)",
    )
