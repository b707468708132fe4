"""Putting one patch in place on an imported module, and taking it out again.

Every function here works on the module it is given and nothing else: a post-import hook may fire while the
parent package is still half initialised, so importing siblings from here could start an import cycle.
"""

from __future__ import annotations

import inspect
import traceback

from . import fingerprint, scope, state
from .kit import Drifted, NotRewritable, Skip
from .spec import owner_and_name


def install(record, module, late: bool, retry=None) -> None:
    """Installs ``record.spec`` on ``module``; any problem becomes the record's state, never an exception.
    ``retry``: the retry policy an export entry point follows (``runs.RetryPolicy``), from the agent."""
    spec = record.spec
    try:
        owner, name = owner_and_name(module, spec.target)
        raw = inspect.getattr_static(owner, name)
    except AttributeError:
        record.set(state.SKIPPED, f"{spec.target_name} does not exist in this version")
        return
    try:
        if spec.mode == "install":
            # An installer gets its own record (its row, so it never repeats its id or fingerprints) and returns
            # its undo, or (undo, detail) when status should say more, e.g. whose registration it replaced.
            result = spec.resolve_replacement()(record, owner, name, raw)
            undo, detail = result if isinstance(result, tuple) else (result, "")
        else:
            undo, detail = _swap(record, owner, name, raw, retry), ""
            if undo is None:
                return
    except Drifted as exc:
        record.set(state.DRIFTED, str(exc))
        return
    except Skip as exc:
        record.set(state.SKIPPED, str(exc))
        return
    except Exception:
        record.set(state.FAILED, traceback.format_exc())
        return
    record.undo = undo
    scope.track(record)
    record.set(state.APPLIED_LATE if late else state.APPLIED, detail)


def _swap(record, owner, name, raw, retry):
    spec = record.spec
    # staticmethod/classmethod objects are unwrapped, routed, and wrapped again in the same descriptor type.
    descriptor = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    original = raw.__func__ if descriptor else raw
    if getattr(original, "__autopatch_id__", None) is not None:
        # An alias bound (`from x import f`) after x.f was patched already holds our router: nothing to do.
        raise Skip(f"{spec.target_name} already routes through {original.__autopatch_id__}")
    if spec.fingerprints:
        found = fingerprint.of(original)
        if found not in spec.fingerprints:
            record.set(
                state.DRIFTED,
                f"source of {spec.target_name} changed (written against {', '.join(spec.fingerprints)}, "
                f"found {found}); not applied",
            )
            return None
    if spec.mode == "route":
        new = scope.make_router(original, spec.resolve_replacement(), record)
    elif spec.mode == "rewrite":
        try:
            rewritten = spec.resolve_replacement()(original)
        except NotRewritable as exc:  # e.g. the if it was written for is gone from this version
            raise Skip(str(exc)) from None
        new = scope.make_router(original, rewritten, record)
    else:
        new = scope.make_entry(original, record, retry)
    new_raw = descriptor(new) if descriptor else new
    had_own = not isinstance(owner, type) or name in vars(owner)
    setattr(owner, name, new_raw)

    def undo() -> str:
        current = inspect.getattr_static(owner, name, None)
        if current is not new_raw:
            return (
                f"could not restore {spec.target_name}: {_describe(current)} was set on top of autopatch's "
                "wrapper; the wrapper stays but is inert"
            )
        if had_own:
            setattr(owner, name, raw)
        else:
            delattr(owner, name)  # the attribute was inherited: remove our override, expose the base again
        return ""

    return undo


def _describe(obj) -> str:
    module = getattr(obj, "__module__", None) or type(obj).__module__
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{qualname}"


def uninstall(record) -> None:
    scope.forget(record.spec.id)
    if record.undo is None:
        record.set(state.DISABLED)
        return
    try:
        problem = record.undo() or ""
    except Exception:
        problem = "undo raised:\n" + traceback.format_exc()
    record.undo = None
    record.set(state.DISABLED, problem)
