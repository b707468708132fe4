"""Export runs: what one export in scope used (``ExportRun``), the record of every run of this process
(``EXPORT_PATCHES_REPORT``), and the retry protocol an entry point follows when it is given a policy.

Kept apart from ``scope`` (the flag, routers and entries): this is what an export leaves behind, that is how it is
decided whether the patches apply.
"""

from __future__ import annotations

import threading
import time

_last_run = None
#: Every finished run of this process, for EXPORT_PATCHES_REPORT.
_runs: list = []
_runs_lock = threading.Lock()

#: What ``after_result`` returns to ask for one more round.
RETRY = object()
MAX_RETRIES = 8


class RetryPolicy:
    """What an export entry point asks after each round, when the agent that installed it gives one
    (EXPORT_PATCHES_REWRITE=auto); entries installed without a policy run once."""

    def __init__(self, after_failure, after_result):
        #: ``fn(exception) -> bool``: True when it changed something (installed a rewrite): export again.
        self.after_failure = after_failure
        #: ``fn(result, entry_args, entry_kwargs, may_retry) -> result or RETRY``: RETRY when it installed a
        #: rewrite that removes a guard the result holds; else the result to return (it may raise instead).
        self.after_result = after_result


class ExportRun:
    """What one export in scope used: which patches ran and how often."""

    def __init__(self, entry: str):
        self.entry = entry
        self.thread = threading.current_thread().name
        self.started = time.time()
        self.seconds = None
        self.hits: dict[str, int] = {}
        self.error = None
        #: What the agent decided for this export besides patch hits (a layout it stepped aside from).
        self.notes: list[str] = []
        #: The entry points this run called (torch.onnx.export's tries of torch.export, non-strict then strict;
        #: torch.export.export's _export): each with its time, outcome and the hits made inside it.
        self.stages: list[dict] = []
        self._in_stage = False
        #: EXPORT_PATCHES_REWRITE=auto: ``(patch id, what asked for it)`` per rewrite installed during this run:
        #: the export's error, or the program that held a size-relation guard.
        self.rewrites: list = []
        #: EXPORT_PATCHES_VALIDATE=1: the self-checks of the finished export (``self_check.check``).
        self.validation = None

    def stage(self, entry: str, call, args, kwargs):
        """Runs a nested entry point as one stage of this run. Only the first level is a stage: what it calls in
        turn (torch.export.export -> _export) belongs to it."""
        if self._in_stage:
            return call(*args, **kwargs)
        before, started, error = dict(self.hits), time.time(), None
        self._in_stage = True
        try:
            return call(*args, **kwargs)
        except BaseException as exc:
            error = one_line(exc)
            raise
        finally:
            self._in_stage = False
            self.stages.append({"entry": entry, "seconds": round(time.time() - started, 3), "error": error,
                                "patches": _added(before, self.hits)})

    def as_dict(self) -> dict:
        report = {
            "entry": self.entry,
            "thread": self.thread,
            "seconds": self.seconds,
            "error": self.error,
            "patches": dict(sorted(self.hits.items())),
            "notes": list(self.notes),
            "stages": list(self.stages),
        }
        if self.validation is not None:
            report["validation"] = self.validation
        if self.stages and self.seconds is not None:
            # What the outer entry did besides its stages: for torch.onnx.export, the conversion (decompositions
            # and translations included) and the model's eager runs.
            inside = sum(stage["seconds"] for stage in self.stages)
            report["outside_stages"] = {"seconds": round(max(self.seconds - inside, 0.0), 3),
                                        "patches": _added(_summed(self.stages), self.hits)}
        return report


def _added(before: dict, after: dict) -> dict:
    """The hits made since ``before``, by patch."""
    return {key: count - before.get(key, 0) for key, count in sorted(after.items()) if count != before.get(key, 0)}


def _summed(stages: list) -> dict:
    total: dict = {}
    for stage in stages:
        for key, count in stage["patches"].items():
            total[key] = total.get(key, 0) + count
    return total


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``: how a run names its error."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def last_run():
    """The most recent export that finished, in any thread."""
    return _last_run


def finished(run) -> None:
    """Records a finished run: the last one, and EXPORT_PATCHES_REPORT's file. Never raises: a report that cannot
    be written must not turn a successful export into a failure."""
    global _last_run
    run.seconds = round(time.time() - run.started, 3)
    _last_run = run
    from . import config

    path = config.read("EXPORT_PATCHES_REPORT")
    if not path:
        return
    import json
    import logging

    with _runs_lock:
        _runs.append(run.as_dict())
        try:
            with open(path, "w") as f:
                json.dump({"exports": _runs}, f, indent=2)
        except OSError as exc:
            logging.getLogger("autopatch").warning("autopatch: EXPORT_PATCHES_REPORT: cannot write %s: %s", path, exc)
