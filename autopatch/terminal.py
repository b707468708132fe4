"""Where the command line's text goes: its width, whether it takes color, the glyphs it can print, progress.

The conventions every command follows:
- width: ``shutil.get_terminal_size`` ($COLUMNS, else the terminal's width, else 80 when the output is not a
  terminal). Table cells are cut to fit; prose is wrapped, never cut; ``wide`` turns both off.
- color: only when the stream is a terminal, and never under NO_COLOR (https://no-color.org) or TERM=dumb.
- progress: on stderr, and only when stderr is a terminal, so that a pipe or a --json reader gets the result
  and nothing else.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap

#: Below this, cut cells say nothing; a terminal that narrow gets lines longer than itself instead.
MIN_WIDTH = 40

# SGR parameters (ECMA-48). Plain ones only: every terminal that takes color takes these.
_SGR = {"green": "32", "red": "31", "yellow": "33", "cyan": "36", "dim": "2", "bold": "1"}
_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


def visible_len(text: str) -> int:
    """Columns ``text`` takes on a terminal: its escape codes take none."""
    return len(_ESCAPES.sub("", text))


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def color_wanted(stream) -> bool:
    # no-color.org: NO_COLOR counts when present and not empty.
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return _is_terminal(stream)


def _glyphs(stream) -> tuple[str, str]:
    """The separator and the ellipsis, in ASCII where the stream's encoding has no '·' or '…' (a legacy
    code page), so that printing never raises UnicodeEncodeError."""
    try:
        "·…".encode(getattr(stream, "encoding", None) or "ascii")
        return "·", "…"
    except (UnicodeEncodeError, LookupError):
        return "|", "..."


class Output:
    """Text for one stream. ``width`` is None under --wide: nothing is cut or wrapped."""

    def __init__(self, stream=None, wide: bool = False):
        self.stream = stream if stream is not None else sys.stdout
        self.width = None if wide else max(shutil.get_terminal_size((80, 24)).columns, MIN_WIDTH)
        self.color = color_wanted(self.stream)
        self.dot, self.ellipsis = _glyphs(self.stream)

    def paint(self, text: str, style: str | None) -> str:
        if not (self.color and style and text):
            return text
        return f"\x1b[{_SGR[style]}m{text}\x1b[0m"

    def cut(self, text: str, width: int) -> str:
        """``text`` in at most ``width`` columns: its start, then an ellipsis."""
        if width <= 0:
            return ""
        if len(text) <= width:
            return text
        if width <= len(self.ellipsis):
            return text[:width]
        return text[: width - len(self.ellipsis)].rstrip() + self.ellipsis

    def first_words(self, text: str, width: int) -> str:
        """Like ``cut``, at a word boundary when one is near: a reason reads better cut between words."""
        text = " ".join(text.split())
        if len(text) <= width:
            return text
        room = width - len(self.ellipsis)
        space = text.rfind(" ", 0, room + 1)
        if space >= room // 2:
            return text[:space].rstrip(" ,;:(") + self.ellipsis
        return self.cut(text, width)

    def last_components(self, dotted: str, width: int) -> str:
        """The end of a dotted path in ``width`` columns: the last components that fit, behind an ellipsis
        (``…cache_utils.DynamicCache``); the class and method say more than the package."""
        if len(dotted) <= width:
            return dotted
        parts = dotted.split(".")
        kept = parts[-1]
        for part in reversed(parts[:-1]):
            if len(self.ellipsis) + len(part) + 1 + len(kept) > width:
                break
            kept = f"{part}.{kept}"
        if len(self.ellipsis) + len(kept) > width:  # even the last component is too long
            return self.cut(parts[-1], width)
        return self.ellipsis + kept

    def wrap(self, text: str, indent: str = "", first: str = "") -> list[str]:
        """Prose in the width, never cut: ``first`` prefixes the first line, ``indent`` the others."""
        if self.width is None:
            return [first + text]
        return textwrap.wrap(text, self.width, initial_indent=first, subsequent_indent=indent,
                             break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


    def join(self, parts: list, indent: str = "  ") -> list[str]:
        """``parts`` joined by the separator dot, a new line only between parts: a version or a count is
        never split from its name."""
        sep = f" {self.dot} "
        lines = [parts[0]] if parts else []
        for part in parts[1:]:
            if self.width is not None and visible_len(lines[-1]) + len(sep) + visible_len(part) > self.width:
                lines.append(indent + part)
            else:
                lines[-1] += sep + part
        if self.width is None:
            return lines
        # A part longer than the width on its own is prose: wrapped, like any.
        fitted = []
        for line in lines:
            if visible_len(line) > self.width:
                own = indent if line.startswith(indent) and line is not lines[0] else ""
                fitted += self.wrap(line[len(own):], own + "  ", own)
            else:
                fitted.append(line)
        return fitted


class Progress:
    """One line on stderr that rewrites itself and is erased at the end; silent unless stderr is a terminal."""

    def __init__(self, label: str, stream=None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.on = _is_terminal(self.stream)
        self.shown = False
        if self.on:
            try:
                self.width = os.get_terminal_size(self.stream.fileno()).columns or 80
            except (OSError, ValueError, AttributeError):
                self.width = 80

    def update(self, text: str) -> None:
        if not self.on:
            return
        # \r and "erase to end of line" (ECMA-48 EL): the same line, whatever was on it before.
        line = f"{self.label}: {text}"[: max(self.width - 1, 1)]
        self.stream.write(f"\r\x1b[K{line}")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
