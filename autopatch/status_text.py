"""`autopatch status` as text: a summary, one row per patch that concerns this interpreter, the rest folded.

Folded by default, one line per reason: patches skipped because they belong to other versions, and default
patches the selection leaves out. ``show_all`` lists them as rows; ``Output(wide=True)`` cuts nothing and
adds the doors' details and each patch's requirements; ``--json`` (not here) holds everything.
"""

from __future__ import annotations

from collections import Counter

from . import state, versions

#: Not a state of the agent: a disabled patch that EXPORT_PATCHES=1 does not select, which a user may name.
OPT_IN = "opt-in"
#: The order the summary counts states in: what needs attention first.
ORDER = (state.FAILED, state.DRIFTED, state.APPLIED, state.APPLIED_LATE, state.PENDING, state.SKIPPED, OPT_IN,
         state.DISABLED)
STYLES = {state.APPLIED: "green", state.APPLIED_LATE: "yellow", state.PENDING: "dim", state.DRIFTED: "red",
          state.FAILED: "red"}
PROBLEMS = (state.FAILED, state.DRIFTED)
NOT_SELECTED = "not selected"
# Narrower than this, a target cell says nothing; wider ids push their own row's cells right.
MIN_TARGET = 14
MIN_NOTE = 20
# A cell cut narrower than this ("dr…") is noise: left out.
MIN_CELL = 8


def shown_state(patch: dict) -> str:
    if patch["state"] == state.DISABLED and not patch["default"]:
        return OPT_IN
    return patch["state"]


def _version_gap(patch: dict) -> str:
    return versions.unmet_clauses(versions.parse_requirement_text(patch["requires"]))


def fold_reason(patch: dict) -> str:
    """Why a patch is folded rather than shown ('need transformers<5', 'not selected'); empty for a row.

    A patch skipped for another reason than its versions (a registration of someone else's kept, a target
    missing) concerns this interpreter: it stays a row, with that reason."""
    if patch["state"] == state.SKIPPED:
        gap = _version_gap(patch)
        return f"need {gap}" if gap else ""
    if patch["state"] == state.DISABLED and patch["default"]:
        return NOT_SELECTED
    return ""


def render(data: dict, out, show_all: bool = False) -> str:
    patches = data["patches"]
    folded = {} if show_all else {p["id"]: fold_reason(p) for p in patches if fold_reason(p)}
    rows = [p for p in patches if p["id"] not in folded]
    lines = _summary(data["header"], patches, out)
    lines += _table(rows, out)
    lines += _folds(data["header"], list(folded.values()), out)
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _summary(h: dict, patches: list, out) -> list[str]:
    count = len(h["selected"])
    selected = f"{count} patch{'es' if count != 1 else ''} selected" if h["active"] else "agent inactive"
    # Two lines, split by meaning rather than by the width: the goldens stay the same whatever the versions.
    lines = out.join([f"autopatch {h['autopatch']}", f"python {h['python']}"])
    lines += out.join([f"{name} {h[name]}" for name in ("torch", "transformers", "wrapt")])
    lines += out.wrap(f"EXPORT_PATCHES={h['EXPORT_PATCHES']!r}: {selected}", "  ")
    if h.get("view") == "probe":
        lines += out.wrap("states from a child interpreter that imported every module the patches wait for "
                          "(--probe)", "  ")
    lines += [line for p in h["problems"] for line in out.wrap(p, "    ", "  problem: ")]
    lines += _doors(h, out)
    lines += out.join(_counts(patches, out))
    return lines


def _doors(h: dict, out) -> list[str]:
    flags = " ".join(h["interpreter_flags"]) or "none"
    used = h["doors_used"]
    if out.width is None:  # --wide: every door, where it is installed, and why it does not run
        lines = [f"doors (interpreter flags: {flags}; used here: {', '.join(used) or 'none'}):"]
        for d in h["doors"]:
            runs = "runs" if d["runs"] else f"does not run: {d['why_not']}"
            lines.append(f"  {d['door']:<14} {runs}  [{d['installed'] or '-'}]")
        return lines
    running = [d["door"] + (" (used here)" if d["door"] in used else "") for d in h["doors"] if d["runs"]]
    idle = [d["door"] for d in h["doors"] if not d["runs"]]
    parts = [f"doors on: {', '.join(running) or 'none'}"]
    if idle:
        parts.append(f"off: {', '.join(idle)} (--wide: why)")
    if h["interpreter_flags"]:
        parts.append(f"interpreter flags: {flags}")
    return out.join(parts)


def _counts(patches: list, out) -> list[str]:
    by_state = Counter(shown_state(p) for p in patches if not fold_reason(p))
    folds = Counter(NOT_SELECTED if fold_reason(p) == NOT_SELECTED else "version" for p in patches if fold_reason(p))
    parts = [f"{by_state[s]} {out.paint(s, STYLES.get(s))}" for s in ORDER if by_state[s]]
    if folds["version"]:
        parts.append(f"{folds['version']} skipped for this version")
    if folds[NOT_SELECTED]:
        parts.append(f"{folds[NOT_SELECTED]} {NOT_SELECTED}")
    return parts or ["no patches"]


def _note(patch: dict) -> str:
    """The last cell: what happened to the patch when something did, else why it exists; first, where measured,
    that this release does not need it."""
    upstream = patch.get("measured", "")
    note = _what_happened(patch)
    return f"{upstream}; {note}" if upstream else note


def _what_happened(patch: dict) -> str:
    detail = patch["detail"].strip().splitlines()[-1] if patch["detail"].strip() else ""
    if patch["hits"]:
        hits = f"{patch['hits']} hit" + ("s" if patch["hits"] > 1 else "")
        return hits + (f"; {detail}" if detail else "")
    if detail:
        return detail
    if shown_state(patch) == OPT_IN:
        gap = _version_gap(patch)
        if gap:
            return f"needs {gap}"
    return patch["reason"]


def _table(rows: list, out) -> list[str]:
    if not rows:
        return []
    pairs = [(p, shown_state(p)) for p in rows]
    # One state width for all: ids start in the same column everywhere. The other columns are sized per
    # family, so that a family of short ids is not pushed right by another's long ones.
    state_w = max(len(shown) for _, shown in pairs)
    lines = []
    for family, members in _by_family(pairs):
        lines += ["", out.paint(family, "bold")]
        if out.width is None:
            lines += _wide_rows(members, state_w, out)
        else:
            lines += _rows(members, state_w, out)
    return lines


def _rows(members: list, state_w: int, out) -> list[str]:
    fixed = 2 + state_w + 2
    id_w = min(max(len(p["id"]) for p, _ in members), max(out.width - fixed - 2 - MIN_TARGET, 1))
    rest = out.width - fixed - id_w - 2
    if rest >= MIN_TARGET + 2 + MIN_NOTE:
        target_w = min(max(len(p["target"]) for p, _ in members), max(MIN_TARGET, (rest - 2) // 2))
    else:
        target_w = rest
    lines = []
    for patch, shown in members:
        # An id longer than its column is printed whole: the cells after it give up the difference.
        room = out.width - fixed - max(id_w, len(patch["id"])) - 2
        t_w = min(target_w, room)
        cells = [out.last_components(patch["target"], t_w).ljust(t_w)] if t_w >= MIN_CELL else []
        note_w = room - t_w - 2
        if shown not in PROBLEMS and note_w >= MIN_NOTE:  # a problem's detail gets lines of its own, whole
            cells.append(out.first_words(_note(patch), note_w))
        lines.append(_row(shown, state_w, patch["id"], id_w, cells, out))
        if shown in PROBLEMS and patch["detail"].strip():
            indent = " " * (fixed + 2)
            lines += out.wrap(patch["detail"].strip().splitlines()[-1], indent, indent)
    return lines


def _wide_rows(members: list, state_w: int, out) -> list[str]:
    id_w = max(len(p["id"]) for p, _ in members)
    target_w = max(len(p["target"]) for p, _ in members)
    req_w = max(len(p["requires"]) for p, _ in members)
    lines = []
    for patch, shown in members:
        note = _note(patch) if shown not in PROBLEMS else patch["detail"].strip().splitlines()[-1]
        cells = [patch["target"].ljust(target_w), patch["requires"].ljust(req_w), note]
        lines.append(_row(shown, state_w, patch["id"], id_w, cells, out))
    return lines


def _row(shown: str, state_w: int, patch_id: str, id_w: int, cells: list, out) -> str:
    # Padding is computed on the plain word: escape codes take no columns.
    state_cell = out.paint(shown, STYLES.get(shown)) + " " * (state_w - len(shown))
    return "  " + "  ".join([state_cell, patch_id.ljust(id_w), *cells])


def _by_family(pairs):
    """Rows grouped by family, families in the order they first appear (the registry's)."""
    groups: dict = {}
    for patch, shown in pairs:
        groups.setdefault(patch["family"], []).append((patch, shown))
    return groups.items()


def _folds(h: dict, reasons: list, out) -> list[str]:
    skipped = [r for r in reasons if r != NOT_SELECTED]
    lines = []
    if skipped:
        lines += [""] + out.wrap(f"skipped for this version ({len(skipped)}; --all lists them):", "  ")
        lines += count_lines(skipped)
    not_selected = len(reasons) - len(skipped)
    if not_selected:
        lines += [""] + out.wrap(
            f"{not_selected} {NOT_SELECTED} by EXPORT_PATCHES={h['EXPORT_PATCHES']!r} (--all lists them)")
    return lines


def count_lines(reasons: list) -> list[str]:
    """One line per reason, the most frequent first: '  46 need transformers<5'."""
    counts = sorted(Counter(reasons).items(), key=lambda rn: (-rn[1], rn[0]))
    width = len(str(counts[0][1]))
    # "1 needs", "46 need": the reason reads as a sentence whose subject is the count.
    return [f"  {n:>{width}} {r if n > 1 else r.replace('need ', 'needs ', 1)}" for r, n in counts]
