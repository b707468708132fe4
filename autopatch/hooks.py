"""Post-import hooks, through wrapt.

wrapt keeps hooks forever (it has no way to remove one), so we register at most one wrapt hook per trigger
module per process: a dispatcher that calls every listener registered for that module.  Listeners are agents'
bound methods, held weakly so that a private agent (tests, ``autopatch.compat``) that is gone stops listening
without an unregister call.  A listener asks its agent, when it fires, which patches still wait for the
module: a disable() before the import therefore needs no unhooking.

wrapt is not imported at activation: ``import wrapt`` imports asyncio and importlib.metadata, several times
the cost of starting the interpreter, which every child process under EXPORT_PATCHES would pay even if it
never imports torch.  Until wrapt is needed, ``_Watch`` (a meta-path finder that only looks at the names it
is asked for) waits for the first import of a trigger module or of one of its parent packages; that import
hands every hook to wrapt, before the package's code runs, and wrapt does the rest as if it had been there
from the start.  After the hand-over the finder answers None to every name, at the cost of a set lookup.
"""

from __future__ import annotations

import sys
from _thread import RLock
from _weakref import ref

#: Trigger module name -> weak references to the listeners of that module.
_listeners: dict[str, list] = {}
_lock = RLock()  # re-entrant: importing wrapt during the hand-over asks _Watch about wrapt's own modules
#: Triggers and all their parent packages, while wrapt is not holding the hooks yet.
_watched: set[str] = set()
#: True once wrapt holds the hooks (or this thread is handing them over); then new hooks go to wrapt directly.
_handed_over = False
_finder = None


def _weak(callback):
    """A bound method held weakly (as ``weakref.WeakMethod``, whose module is not worth importing at start-up):
    a callable that returns it, or None once its object is gone. Anything else is kept alive, as wrapt would."""
    owner, function = getattr(callback, "__self__", None), getattr(callback, "__func__", None)
    if owner is None or function is None:
        return lambda: callback
    owner_ref = ref(owner)

    def get():
        obj = owner_ref()
        return None if obj is None else function.__get__(obj, type(obj))

    return get


def on_import(module_name: str, callback) -> None:
    """Calls ``callback(module)`` when ``module_name`` has been imported (each callback once per module)."""
    global _finder
    with _lock:
        listeners = _listeners.get(module_name)
        first = listeners is None
        if first:
            listeners = _listeners[module_name] = []
        if any(ref() == callback for ref in listeners):
            return
        listeners.append(_weak(callback))
        if not first:
            return
        if _handed_over:
            wait = False
        elif "wrapt" in sys.modules:  # imported already, so it costs nothing: no reason to wait
            wait = False
        else:
            parts = module_name.split(".")
            _watched.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
            if _finder is None:
                _finder = _Watch()
                sys.meta_path.insert(0, _finder)
            wait = True
    if not wait:
        if _handed_over:
            _register(module_name)
        else:
            _hand_over()


def _register(module_name: str) -> None:
    import wrapt

    wrapt.register_post_import_hook(lambda module: _dispatch(module_name, module), module_name)


def _hand_over() -> None:
    """Registers with wrapt the hook of every trigger so far (once per process). Other threads that import a
    watched name meanwhile wait on the lock, so that no import slips past before wrapt holds its hook."""
    global _handed_over
    with _lock:
        if _handed_over:
            return  # done, or being done by this thread (wrapt's own imports pass through _Watch)
        _handed_over = True
        try:
            import wrapt  # noqa: F401  (first: a trigger it imports on its way is counted as imported below)

            names = list(_listeners)
            imported = [name for name in names if name in sys.modules]
            for name in names:
                if name not in imported:
                    _register(name)
        finally:
            _watched.clear()
    for name in imported:  # what wrapt would do at once for these, outside the lock as wrapt does
        _dispatch(name, sys.modules[name])


class _Watch:
    """Hands the hooks to wrapt on the first import of a watched name; otherwise takes no part in any import."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _watched:
            return None
        try:
            _hand_over()
        except Exception as exc:  # wrapt missing or broken: the patches stay pending; the import goes on
            from . import config

            if config.strict():
                raise  # as a patch that fails to install: the import statement raises
            sys.stderr.write(f"autopatch: cannot hook imports, patches stay pending: {type(exc).__name__}: {exc}\n")
            return None
        if fullname not in _listeners or fullname in sys.modules:
            return None  # a parent package: wrapt's finder sees the trigger's own import
        # The trigger itself: found by the import system again, through wrapt's finder (first in sys.meta_path
        # now), which chains the loader to the post-import hooks.
        from importlib.util import find_spec

        return find_spec(fullname)


def _dispatch(module_name: str, module) -> None:
    # The lock is released before the callbacks run: they import and patch, and may register hooks themselves.
    with _lock:
        live = [ref for ref in _listeners.get(module_name, ()) if ref() is not None]
        _listeners[module_name] = live
        callbacks = [ref() for ref in live]
    for callback in callbacks:
        if callback is not None:
            callback(module)
