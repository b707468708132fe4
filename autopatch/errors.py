"""Where an exception came from: its chain of causes, and the innermost frames of code that is neither torch's,
autopatch's nor the standard library's (the model's or the user's, transformers included).

Shared by ``EXPORT_PATCHES_REWRITE=auto`` (which function's ``if`` stopped the export) and ``autopatch validate``
(which line of model code a failed stage came from). Imports torch only when asked for frames.
"""

from __future__ import annotations

import functools
import os
import sysconfig
import traceback


def causes(exc):
    """``exc``, then what it was raised from or during (``__cause__``, else ``__context__``), to the innermost:
    exporters wrap torch.export's error (``torch.onnx.export``'s TorchExportError, ConversionError)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        yield exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__


@functools.lru_cache(maxsize=None)  # the same for the whole process; asked once per frame by is_outside
def _library_roots() -> tuple[str, ...]:
    import torch

    roots = [os.path.dirname(torch.__file__), os.path.dirname(__file__), sysconfig.get_paths()["stdlib"]]
    return tuple(os.path.realpath(root) + os.sep for root in roots)


def is_outside(filename: str, roots=None) -> bool:
    """``filename`` is neither torch's, autopatch's, the standard library's nor generated code (``<string>``...)."""
    return not filename.startswith("<") and not os.path.realpath(filename).startswith(roots or _library_roots())


def outside_frames(tb) -> list:
    """``(frame, line)`` of a traceback, outermost first, less torch's, autopatch's, the standard library's and
    generated code (``<string>``...)."""
    roots = _library_roots()
    return [(frame, line) for frame, line in traceback.walk_tb(tb) if is_outside(frame.f_code.co_filename, roots)]
