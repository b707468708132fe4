"""The status structure (``autopatch.status()``, ``autopatch status --json``) and its text rendering."""

from __future__ import annotations

import platform

from . import __version__, _bootstrap, doors, versions

COLUMNS = ("id", "family", "target", "requires", "state", "detail")


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
    }
    return {"header": header, "patches": [record.as_dict() for record in agent.records.values()]}


def render_text(data: dict) -> str:
    h = data["header"]
    lines = [
        f"autopatch {h['autopatch']}  python {h['python']}  torch {h['torch']}  "
        f"transformers {h['transformers']}  wrapt {h['wrapt']}",
        f"EXPORT_PATCHES={h['EXPORT_PATCHES']!r}: "
        + (f"{len(h['selected'])} patch(es) selected" if h["active"] else "agent inactive"),
    ]
    lines += [f"  problem: {p}" for p in h["problems"]]
    flags = " ".join(h["interpreter_flags"]) or "none"
    lines.append(f"doors (interpreter flags: {flags}; used here: {', '.join(h['doors_used']) or 'none'}):")
    for d in h["doors"]:
        where = d["installed"] or "-"
        runs = "runs" if d["runs"] else f"does not run: {d['why_not']}"
        lines.append(f"  {d['door']:<14} {runs}  [{where}]")
    rows = [COLUMNS] + [tuple(_cell(p, c) for c in COLUMNS) for p in data["patches"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    lines.append("")
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _cell(patch: dict, column: str) -> str:
    value = patch[column]
    if column == "detail":
        text = str(value).strip()
        # A traceback is summarised by its last line; --json keeps all of it.
        value = text.splitlines()[-1] if text else ""
        if patch["hits"]:
            value = f"{patch['hits']} hit(s)" + (f"; {value}" if value else "")
    if column == "state" and not patch["default"] and patch["state"] == "disabled":
        value = "disabled (opt-in)"
    return str(value)
