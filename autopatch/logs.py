"""EXPORT_PATCHES_LOG: how much of the `autopatch` logger reaches stderr.

``logging`` is imported only when there is something to log (a warning), or when EXPORT_PATCHES_LOG asks for
it: at interpreter start-up it would cost more than the rest of the activation.  Until ``logging`` is imported
nothing can have configured the `autopatch` logger, so its DEBUG messages would be dropped anyway.
"""

from __future__ import annotations

import sys

LEVELS = ("debug", "info", "warning", "error")


def _logger():
    import logging

    return logging.getLogger("autopatch")


def debug_enabled() -> bool:
    """Would a DEBUG message of the `autopatch` logger be handled? (No import: without ``logging``, no.)"""
    logging = sys.modules.get("logging")
    return logging is not None and logging.getLogger("autopatch").isEnabledFor(logging.DEBUG)


def debug(msg: str, *args) -> None:
    if debug_enabled():
        _logger().debug(msg, *args)


def warning(msg: str, *args) -> None:
    _logger().warning(msg, *args)


def configure(level_name: str) -> None:
    """Empty: leave logging alone (warnings still reach stderr through Python's last-resort handler)."""
    name = level_name.strip().lower()
    if not name:
        return
    import logging

    logger = logging.getLogger("autopatch")
    if name not in LEVELS:
        logger.warning("autopatch: EXPORT_PATCHES_LOG: unknown level %r; valid: %s", level_name, ", ".join(LEVELS))
        return
    if not any(getattr(h, "_autopatch", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._autopatch = True
        logger.addHandler(handler)
    logger.setLevel(name.upper())
