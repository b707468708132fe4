"""transformers 5.x output capturing, installed before an export traces.

A model whose ``forward`` is decorated with ``capture_outputs`` (5.x ``LlamaModel``, ``CLIPVisionModel``, most
base models and vision towers) installs its output-recording hooks on its first call, under a
``threading.Lock``.  When that first call happens inside a ``strict=True`` export (a model exported straight
after it is built, or a vision tower that eager prefills never reached), Dynamo cannot enter the lock:
"Unsupported context manager ... lock".  Upstream's own first-call path, run before the trace instead: when an
export starts, each submodule whose forward would call ``maybe_install_capturing_hooks(self)`` gets it called,
outside any trace.  That is what its first eager call does, so nothing else changes.
"""

from __future__ import annotations

def _installs_on_first_call(cls) -> bool:
    """True for a class whose forward (through its decorators) is capture_outputs' wrapper: its code calls
    maybe_install_capturing_hooks. functools.wraps copies names and qualnames, not code objects."""
    cache = _INSTALLS.get(cls)
    if cache is None:
        function, cache = getattr(cls, "forward", None), False
        while function is not None and not cache:
            code = getattr(function, "__code__", None)
            cache = code is not None and "maybe_install_capturing_hooks" in code.co_names
            function = getattr(function, "__wrapped__", None)
        _INSTALLS[cls] = cache
    return cache


_INSTALLS: dict = {}


def install_hooks_before_trace(record, owner, name, maybe_install_capturing_hooks):
    """Installer for ``transformers.utils.output_capturing.maybe_install_capturing_hooks``: the function is left as
    it is; an export-start callback calls it for the exported module's capturing submodules."""
    from ... import kit

    def before_export(entry_args, entry_kwargs):
        import torch

        module = kit.exported_module(entry_args, entry_kwargs)
        if isinstance(module, torch.nn.Module):
            pending = [sub for sub in module.modules()
                       if _installs_on_first_call(type(sub)) and not getattr(sub, "_output_capturing_hooks_installed",
                                                                              False)]
            for sub in pending:
                maybe_install_capturing_hooks(sub)
            if pending:
                kit.count_hit(record.spec.id)
        return lambda: None

    return kit.on_export_start(before_export)
