"""Per-patch state: what status shows, and the only place a state changes (so every change is logged)."""

from __future__ import annotations

import dataclasses
import logging
import threading

log = logging.getLogger("autopatch")

DISABLED = "disabled"  # not selected, or the agent is off
SKIPPED = "skipped"  # selected, but cannot apply here (version requirement, missing target, kept registration)
PENDING = "pending"  # selected; waits for its trigger module to be imported
APPLIED = "applied"  # installed when its trigger was imported
APPLIED_LATE = "applied-late"  # trigger imported before activation: `from x import f` aliases may be stale
DRIFTED = "drifted"  # the original's source no longer matches what the patch was written against
FAILED = "failed"  # installing raised; `detail` holds the traceback

STATES = (DISABLED, SKIPPED, PENDING, APPLIED, APPLIED_LATE, DRIFTED, FAILED)
INSTALLED = (APPLIED, APPLIED_LATE)


@dataclasses.dataclass
class PatchRecord:
    spec: object
    state: str = DISABLED
    detail: str = ""
    #: Times the replacement ran inside an export (route patches) or was used by one (pytree flatten).
    hits: int = 0
    #: How to take the patch out again; set only while installed.
    undo: object = None
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def set(self, state: str, detail: str = "") -> None:
        if state == self.state and detail == self.detail:
            return
        self.state, self.detail = state, detail
        # DEBUG only: problems worth a warning are logged once by the agent, with context.
        last_line = detail.strip().splitlines()[-1] if detail.strip() else ""
        log.debug("autopatch: %s: %s%s", self.spec.id, state, f" ({last_line})" if last_line else "")

    def hit(self) -> None:
        with self._lock:
            self.hits += 1

    # Attribute names of the anchors' patch objects, so that code written against them reads the same.
    @property
    def id(self) -> str:
        return self.spec.id

    name = id

    @property
    def family(self) -> str:
        return self.spec.family

    def format_diff(self, format: str = "raw") -> str:
        """A unified diff original -> replacement (route patches) or what an installer installs."""
        from .diffs import format_diff

        return format_diff(self.spec, format)

    def as_dict(self) -> dict:
        spec = self.spec
        return {
            "id": spec.id,
            "family": spec.family,
            "target": spec.target_name,
            "mode": spec.mode,
            "scope": spec.scope,
            "requires": spec.requirement_text,
            "state": self.state,
            "detail": self.detail,
            "hits": self.hits,
            "default": spec.default,
            "reason": spec.reason,
            "link": spec.link,
        }
