"""The status structure (``autopatch.status()``, ``autopatch status --json``); ``status_text`` renders it.

(Not ``status.py``: that name would shadow the function ``autopatch.status`` once imported.)"""

from __future__ import annotations

import platform

from . import __version__, _bootstrap, doors, measured, versions


def build(agent) -> dict:
    sel = agent.selection
    header = {
        "autopatch": __version__,
        "python": platform.python_version(),
        "torch": versions.installed("torch") or "not installed",
        "transformers": versions.installed("transformers") or "not installed",
        "wrapt": versions.installed("wrapt") or "not installed",
        "EXPORT_PATCHES": sel.text,
        "active": sel.active,
        "selected": list(sel.ids),
        "problems": list(sel.problems),
        "doors_used": list(_bootstrap.doors),
        "interpreter_flags": doors.interpreter_flags(),
        "doors": doors.describe(),
        # benchmarks/needed.py's measurement of the installed torch + transformers pair, if one was made.
        "measured_needs": {k: v for k, v in measured.here().items() if k in ("torch", "transformers", "commit")},
    }
    patches = [record.as_dict() for record in agent.records.values()]
    for patch in patches:
        patch["measured"] = measured.note(patch["id"]) if patch["default"] else ""
    return {"header": header, "patches": patches}
