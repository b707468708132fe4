"""Post-import hooks, through wrapt.

wrapt keeps hooks forever (it has no way to remove one), so we register at most one hook per trigger module
per process; the hook asks the agent, when it fires, which patches still wait for that module.  A disable()
before the import therefore needs no unhooking: the hook finds nothing pending.
"""

from __future__ import annotations

import threading

_hooked: set[str] = set()
_lock = threading.Lock()


def on_import(module_name: str, callback) -> None:
    """Calls ``callback(module)`` when ``module_name`` has been imported (once per module per process)."""
    with _lock:
        if module_name in _hooked:
            return
        _hooked.add(module_name)
    import wrapt  # only when a hook is needed: the inactive agent never imports it

    wrapt.register_post_import_hook(callback, module_name)
