"""The one start-up path shared by every door (.pth, .start, sitecustomize, `autopatch run`, import).

Contract: runs at most once per process, reads EXPORT_PATCHES, imports neither torch nor transformers (hooks
do that work later, when the user imports them), and never raises into the user's program unless
EXPORT_PATCHES_STRICT=1 asks for it.
"""

from __future__ import annotations

import os
import sys

_done = False
#: Doors that tried to start the agent in this process, in order; the first one did the work.
doors: list[str] = []


def activate(door: str) -> None:
    global _done
    doors.append(door)
    if _done:
        return
    _done = True
    text = os.environ.get("EXPORT_PATCHES", "").strip()
    if text.lower() in ("", "0", "none", "off", "false", "no"):
        return
    try:
        from . import config, logs

        logs.configure(config.read("EXPORT_PATCHES_LOG"))
        from .agent import AGENT

        AGENT.doors = doors
        AGENT.enable(text)
    except Exception as exc:
        from . import config

        if config.strict():
            raise
        sys.stderr.write(f"autopatch: not activated ({door}): {type(exc).__name__}: {exc}\n")


def importer_door() -> str:
    """Which door is importing the package. The .pth door and the sitecustomize template import ``autopatch``
    before they can call ``activate`` themselves, so each names itself first (``sys._autopatch_door``, taken
    away here so that a later import is not mistaken for it); any other import is the ``import`` door."""
    return sys.__dict__.pop("_autopatch_door", "import")


def activate_from_start_file() -> None:
    """Entry point named in autopatch.start (PEP 829, Python 3.15+)."""
    activate("start")
