"""EXPORT_PATCHES_LOG: how much of the `autopatch` logger reaches stderr."""

from __future__ import annotations

import logging

LEVELS = ("debug", "info", "warning", "error")


def configure(level_name: str) -> None:
    """Empty: leave logging alone (warnings still reach stderr through Python's last-resort handler)."""
    logger = logging.getLogger("autopatch")
    name = level_name.strip().lower()
    if not name:
        return
    if name not in LEVELS:
        logger.warning("autopatch: EXPORT_PATCHES_LOG: unknown level %r; valid: %s", level_name, ", ".join(LEVELS))
        return
    if not any(getattr(h, "_autopatch", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._autopatch = True
        logger.addHandler(handler)
    logger.setLevel(name.upper())
