"""The export scope: a per-thread flag that says "torch.export is tracing here, use the patched code".

Entry points (``torch.export.export`` and friends) are wrapped by ``make_entry``; calling one sets the flag
for the current thread for the duration of the call.  Patched functions are replaced by ``make_router``
routers that test the flag on every call.

Why a ContextVar: each thread (and each asyncio task) sees its own value, so an export in one thread never
changes what eager code in another thread runs, and ``reset(token)`` restores the outer value on exit, on
exceptions and when exports nest.

Why ``_dynamo_marked_constant``: under ``strict=True`` dynamo traces the router's bytecode, and it cannot
trace ``ContextVar.get`` (it stops with "Unsupported method call").  A function marked as a constant result
is *called* by dynamo at trace time, in the tracing thread, and its return value is baked into the graph,
which is exactly the decision we want.  ``torch._dynamo.assume_constant_result`` sets this attribute and
nothing else; setting it ourselves avoids importing torch._dynamo when a patch is installed (a test keeps the
two in step).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

from . import config, runs

_RUN: contextvars.ContextVar = contextvars.ContextVar("autopatch_export_run", default=None)
#: Records of installed patches by id. Hits are counted by id because dynamo passes only constants (the id
#: string) to a constant-result function.  A patch missing here is not installed: its router is inert.
_RECORDS: dict = {}
#: ``fn(entry_args, entry_kwargs) -> undo`` run when an outermost export starts in this thread, undone when it
#: ends: for patches that must see the module being exported (forward pre-hooks). A hook that raises is logged
#: and left out; it never fails the export.
_START_HOOKS: list = []
#: The key prefix of the node annotations routers write (``node.meta["custom"]["autopatch:<id>"]``); read by
#: ``attribution``.
ANNOTATION = "autopatch:"


def in_export() -> bool:
    """True while the current thread is inside an export entry point."""
    return _RUN.get() is not None


# Called from pytree flatten functions too (see count_hit).
in_export._dynamo_marked_constant = True


def current_run():
    return _RUN.get()


@contextlib.contextmanager
def outside_export():
    """This thread out of export scope for the duration: code runs as it does in the user's eager program."""
    token = _RUN.set(None)
    try:
        yield
    finally:
        _RUN.reset(token)


def count_hit(patch_id: str) -> None:
    """Counts one use of a patch by the export running in this thread (no-op outside export)."""
    run = _RUN.get()
    record = _RECORDS.get(patch_id)
    if run is None or record is None:
        return
    run.hits[patch_id] = run.hits.get(patch_id, 0) + 1
    record.hit()


# Called from pytree flatten functions, which dynamo traces under strict=True: run it at trace time instead.
count_hit._dynamo_marked_constant = True


def use_patch(patch_id: str) -> bool:
    if _RUN.get() is None or patch_id not in _RECORDS:
        return False
    count_hit(patch_id)
    return True


use_patch._dynamo_marked_constant = True


#: The notes already logged by this process (``note``): each once, however many exports make it.
_NOTES_SAID: set = set()


def note(message: str) -> None:
    """Records ``message`` in this thread's export run (once per run: ``last_export_report()["notes"]``) and logs
    it as a warning once per process: what the agent decided for an export that the user should know of."""
    run = _RUN.get()
    if run is not None and message not in run.notes:
        run.notes.append(message)
    if message not in _NOTES_SAID:
        _NOTES_SAID.add(message)
        from . import logs

        logs.warning("%s", message)


# Called from code dynamo traces under strict=True (a scan rewrite): run it at trace time instead.
note._dynamo_marked_constant = True


def _given_original(replacement, original):
    """``replacement`` with ``original`` as its first argument. A closure, not ``functools.partial``: under
    ``strict=True`` Dynamo reaches a router it has no source for when a routed ``__init__`` runs for a class it
    instantiates, and it cannot wrap a partial met that way ("Unexpected type in sourceless builder")."""

    def with_original(*args, **kwargs):
        return replacement(original, *args, **kwargs)

    return with_original


def make_router(original, replacement, record):
    """A stand-in for ``original`` that calls ``replacement`` only inside this thread's export."""
    patch_id = record.spec.id
    if getattr(replacement, "__autopatch_calls_original__", False):
        replacement = _given_original(replacement, original)
    # Nodes the replacement produces carry node.meta["custom"]["autopatch:<id>"], so that a graph tells which
    # patch made which node (torch keeps only the innermost user frame in stack traces: not enough).
    annotate = _annotator({ANNOTATION + patch_id: True})

    def router(*args, **kwargs):
        if use_patch(patch_id):
            with annotate():
                return replacement(*args, **kwargs)
        return original(*args, **kwargs)

    functools.update_wrapper(router, original)
    router.__autopatch_original__ = original
    router.__autopatch_id__ = patch_id
    return router


#: (annotate, preserve_node_meta, is_dynamo_compiling) from torch, resolved when the first export starts:
#: routers are built by hooks that may fire while ``import torch`` is still running, when importing
#: torch.compiler would be circular; an export entry point runs as plain Python with torch fully loaded.
_node_tools = None


def _prepare_node_tools() -> None:
    global _node_tools
    if _node_tools is not None:
        return
    try:
        from torch.fx.traceback import annotate, preserve_node_meta
    except ImportError:  # older torch: no node annotations, stack traces only
        _node_tools = ()
        return
    try:
        from torch.compiler import is_dynamo_compiling as is_compiling
    except ImportError:
        from torch.compiler import is_compiling
    _node_tools = (annotate, preserve_node_meta, is_compiling)


def _annotator(annotation: dict):
    @contextlib.contextmanager
    def annotated():
        if not _node_tools:
            yield
            return
        annotate, preserve_node_meta, is_compiling = _node_tools
        if is_compiling():  # strict: dynamo records the annotation itself (and would flag the global below)
            with annotate(annotation):
                yield
        else:  # non-strict: the annotation reaches nodes only while node meta is preserved
            with preserve_node_meta(), annotate(annotation):
                yield

    return annotated


def _torchscript_default(original):
    """For ``torch.onnx.export``: a ``kwargs -> bool`` that says whether this call takes the TorchScript exporter
    (``dynamo=False``; the default is True since torch 2.9, False before). That exporter traces with
    ``torch.jit``, which the replacements written for torch.export (scan, cond, run-time asserts) are not for:
    it runs outside the scope, on the original functions, as it does without autopatch. Other entries: None."""
    import inspect

    try:
        parameter = inspect.signature(original).parameters.get("dynamo")
    except (TypeError, ValueError):
        return None
    if parameter is None:
        return None
    default = parameter.default if parameter.default is not inspect.Parameter.empty else True

    def takes_torchscript(args, kwargs) -> bool:
        model = args[0] if args else kwargs.get("model")
        if type(model).__name__ == "ExportedProgram":  # converted as it is, whatever `dynamo` says
            return False
        return kwargs.get("dynamo", default) is False

    return takes_torchscript


def make_entry(original, record, retry=None):
    """Wraps an export entry point so that the current thread is in export scope while it runs. ``retry``: the
    ``runs.RetryPolicy`` of the agent that installs it (EXPORT_PATCHES_REWRITE=auto), or None: one round."""
    entry_name = record.spec.target_name
    takes_torchscript = _torchscript_default(original) if entry_name == "torch.onnx.export" else None

    def export_entry(*args, **kwargs):
        outer = _RUN.get()
        if outer is not None:
            # Nested (torch.onnx.export -> torch.export.export -> _export): the outermost call owns the run, and
            # the first nested level is one of its stages.
            return outer.stage(entry_name, original, args, kwargs)
        if takes_torchscript is not None and takes_torchscript(args, kwargs):
            return original(*args, **kwargs)
        record.hit()
        _prepare_node_tools()
        run = runs.ExportRun(entry_name)
        token = _RUN.set(run)
        undos = _start_hooks(args, kwargs)
        try:
            for attempt in range(runs.MAX_RETRIES + 1):
                try:
                    result = original(*args, **kwargs)
                except Exception as exc:
                    if retry is None or attempt == runs.MAX_RETRIES or not retry.after_failure(exc):
                        raise
                    continue
                outcome = result if retry is None else retry.after_result(result, args, kwargs,
                                                                         attempt < runs.MAX_RETRIES)
                if outcome is not runs.RETRY:
                    if config.read("EXPORT_PATCHES_VALIDATE").lower() in config.TRUE_WORDS:
                        _self_check(run, original, args, kwargs, outcome)
                    return outcome
        except BaseException as exc:
            run.error = runs.one_line(exc)
            raise
        finally:
            for undo in reversed(undos):
                try:
                    undo()
                except Exception:  # a start hook's undo must not hide the export's own outcome
                    pass
            _RUN.reset(token)
            runs.finished(run)

    functools.update_wrapper(export_entry, original)
    export_entry.__autopatch_original__ = original
    export_entry.__autopatch_id__ = record.spec.id
    return export_entry


def _self_check(run, original, args, kwargs, result) -> None:
    """EXPORT_PATCHES_VALIDATE=1: the program against eager on the export's own inputs, and its dims
    (``self_check``), recorded in the run; a failed check is a warning line, or under EXPORT_PATCHES_STRICT=1 an
    exception."""
    from . import self_check

    run.validation = self_check.check(original, args, kwargs, result)
    if run.validation["ok"]:
        return
    problems = [part["problem"] for part in (run.validation.get("matches_eager", {}), run.validation.get("dims", {}))
                if "problem" in part] or [f"the checks could not run: {run.validation.get('error')}"]
    message = f"autopatch: EXPORT_PATCHES_VALIDATE: {run.entry}: " + "; ".join(problems)
    if config.strict():
        raise AssertionError(message)
    import logging

    logging.getLogger("autopatch").warning("%s", message)


def on_export_start(fn):
    """Runs ``fn(entry_args, entry_kwargs) -> undo`` at the start of every outermost export; returns the undo of
    this registration."""
    _START_HOOKS.append(fn)

    def remove() -> str:
        if fn in _START_HOOKS:
            _START_HOOKS.remove(fn)
        return ""

    return remove


def exported_module(entry_args, entry_kwargs):
    """The module an export entry point was given (the first argument of every entry point: ``mod`` for
    torch.export, ``model`` for torch.onnx), or None."""
    return entry_args[0] if entry_args else entry_kwargs.get("mod", entry_kwargs.get("model"))


def _start_hooks(args, kwargs) -> list:
    undos = []
    for fn in list(_START_HOOKS):
        try:
            undos.append(fn(args, kwargs))
        except Exception as exc:
            import logging

            logging.getLogger("autopatch").warning("autopatch: export start hook %s failed: %s", fn.__qualname__, exc)
    return undos


def track(record) -> None:
    _RECORDS[record.spec.id] = record


def forget(patch_id: str) -> None:
    _RECORDS.pop(patch_id, None)
