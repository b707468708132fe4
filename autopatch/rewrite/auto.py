"""EXPORT_PATCHES_REWRITE=auto: when an ``if`` on a tensor stops an export, rewrite that function and export again.

torch says where the data-dependent guard came from only as text; the traceback says it as frames. The deepest
frame outside torch, autopatch and the standard library is the code whose ``if`` (or ``and``/``or``/``not``)
read the tensor. Its code object names the function (``co_qualname``) and its globals the module, which is
enough for an ordinary rewrite patch (``rewrite.auto.<module>.<qualname>``), installed like any other (status,
diff, undo). The export then runs again, at most ``MAX_ROUNDS`` times, one new function per round. When the
function cannot be rewritten, the original error is raised with a note saying why.
"""

from __future__ import annotations

import sys

from ..errors import causes, outside_frames
from ..spec import PatchSpec

PREFIX = "rewrite.auto."
MAX_ROUNDS = 8


def failing_function(exc):
    """``(module, qualname, line)`` of the function whose condition raised the data-dependent guard ``exc`` (or
    the guard error it wraps), or a string saying why there is none."""
    # torch.onnx.export raises a TorchExportError whose cause is torch.export's guard error.
    exc = next((e for e in causes(exc) if type(e).__name__ == "GuardOnDataDependentSymNode"), None)
    if exc is None:
        return "not a data-dependent guard"
    frames = outside_frames(exc.__traceback__)
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
