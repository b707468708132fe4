"""Per-patch state: what status shows, and the only place a state changes (so every change is logged)."""

from __future__ import annotations

from _thread import allocate_lock

from . import logs

DISABLED = "disabled"  # not selected, or the agent is off
SKIPPED = "skipped"  # selected, but cannot apply here (version requirement, missing target, kept registration)
PENDING = "pending"  # selected; waits for its trigger module to be imported
APPLIED = "applied"  # installed when its trigger was imported
APPLIED_LATE = "applied-late"  # trigger imported before activation: `from x import f` aliases may be stale
DRIFTED = "drifted"  # the original's source no longer matches what the patch was written against
FAILED = "failed"  # installing raised; `detail` holds the traceback

STATES = (DISABLED, SKIPPED, PENDING, APPLIED, APPLIED_LATE, DRIFTED, FAILED)
INSTALLED = (APPLIED, APPLIED_LATE)


class PatchRecord:
    """A plain class rather than a dataclass (``dataclasses`` is slow to import at interpreter start-up); it
    compares and prints as the dataclass did."""

    def __init__(self, spec, state: str = DISABLED, detail: str = "", hits: int = 0, undo=None, _lock=None):
        self.spec = spec
        self.state = state
        self.detail = detail
        #: Times the replacement ran inside an export (route patches) or was used by one (pytree flatten).
        self.hits = hits
        #: How to take the patch out again; set only while installed.
        self.undo = undo
        self._lock = allocate_lock() if _lock is None else _lock  # threading.Lock, without importing threading

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return ((self.spec, self.state, self.detail, self.hits, self.undo, self._lock)
                == (other.spec, other.state, other.detail, other.hits, other.undo, other._lock))

    __hash__ = None

    def __repr__(self):
        return (f"PatchRecord(spec={self.spec!r}, state={self.state!r}, detail={self.detail!r}, hits={self.hits!r}, "
                f"undo={self.undo!r})")

    def set(self, state: str, detail: str = "") -> None:
        if state == self.state and detail == self.detail:
            return
        self.state, self.detail = state, detail
        # DEBUG only: problems worth a warning are logged once by the agent, with context.
        if logs.debug_enabled():
            last_line = detail.strip().splitlines()[-1] if detail.strip() else ""
            logs.debug("autopatch: %s: %s%s", self.spec.id, state, f" ({last_line})" if last_line else "")

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
            "needs": list(spec.needs),
            "reason": spec.reason,
            "link": spec.link,
        }
