"""Post-import hooks, through wrapt.

wrapt keeps hooks forever (it has no way to remove one), so we register at most one wrapt hook per trigger
module per process: a dispatcher that calls every listener registered for that module.  Listeners are agents'
bound methods, held weakly so that a private agent (tests, ``autopatch.compat``) that is gone stops listening
without an unregister call.  A listener asks its agent, when it fires, which patches still wait for the
module: a disable() before the import therefore needs no unhooking.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref

#: Trigger module name -> weak references to the listeners of that module.
_listeners: dict[str, list] = {}
_lock = threading.Lock()


def _weak(callback):
    if inspect.ismethod(callback):
        return weakref.WeakMethod(callback)
    return lambda: callback  # a plain function: kept alive, as wrapt would keep it


def on_import(module_name: str, callback) -> None:
    """Calls ``callback(module)`` when ``module_name`` has been imported (each callback once per module)."""
    with _lock:
        listeners = _listeners.get(module_name)
        first = listeners is None
        if first:
            listeners = _listeners[module_name] = []
        if any(ref() == callback for ref in listeners):
            return
        listeners.append(_weak(callback))
    if first:
        import wrapt  # only when a hook is needed: the inactive agent never imports it

        wrapt.register_post_import_hook(functools.partial(_dispatch, module_name), module_name)


def _dispatch(module_name: str, module) -> None:
    # The lock is released before the callbacks run: they import and patch, and may register hooks themselves.
    with _lock:
        live = [ref for ref in _listeners.get(module_name, ()) if ref() is not None]
        _listeners[module_name] = live
        callbacks = [ref() for ref in live]
    for callback in callbacks:
        if callback is not None:
            callback(module)
