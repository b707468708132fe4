"""`autopatch diff` as text: each patch's header and body, colored on a terminal.

Our own sentences ("no diff here: ...") are wrapped to the width, a header is split before its arrow. Diffs
are code and docstrings have their author's layout: both are printed as written, never cut. Patches a glob
matched that belong to other versions are folded into counts at the end, as in `autopatch status` (--all
shows them; a patch named by its id is always shown: that is the question asked).
"""

from __future__ import annotations

from . import status_text, versions

# Unified diff lines by their first characters: file headers before +/- (they start with them too).
_DIFF_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def render(entries: list, out, show_all: bool = False, named=()) -> str:
    chunks, folded = [], []
    for entry in entries:
        gap = "" if entry["applies"] else versions.unmet_clauses(versions.parse_requirement_text(entry["requires"]))
        if gap and not show_all and entry["id"] not in named:
            folded.append(f"need {gap}")
            continue
        chunks.append(_entry(entry, out))
    text = "".join(chunk + "\n" for chunk in chunks)
    if folded:
        lines = [f"{len(folded)} more matched but do not apply to these versions (--all shows them):"]
        text += "\n".join(lines + status_text.count_lines(folded)) + "\n"
    return text


def _entry(entry: dict, out) -> str:
    lines = [out.paint(line, "bold") for line in _header_lines(entry["header"], out)]
    body = entry["body"].splitlines()
    if entry["language"] == "diff":
        lines += [out.paint(line, _diff_style(line)) for line in body]
    elif body:
        lines += out.wrap(body[0]) + body[1:]
    return "\n".join(lines) + "\n"


def _header_lines(header: str, out) -> list[str]:
    """``family: target -> replacement``, split before the arrow when too wide: a target and a replacement
    are each one name, never broken (the line may pass the width to hold one)."""
    if out.width is None or len(header) <= out.width:
        return [header]
    target, _, replacement = header.partition(" -> ")
    return [target, f"    -> {replacement}"]


def _diff_style(line: str):
    for prefix, style in _DIFF_STYLES:
        if line.startswith(prefix):
            return style
    return None
