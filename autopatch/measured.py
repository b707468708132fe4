"""What the benchmarks measured about each default patch on the releases they ran: ``measured_needs.json``, written
by ``benchmarks/report.py`` from ``benchmarks/results/needed-*.json`` (``benchmarks/needed.py``).

A patch is *not needed* on a torch + transformers pair when every catalogue case that used it still passes with
every default but that one. ``autopatch status`` says so for the installed pair ("no catalogue case needs it on
..."), so that a user (and we) can see which rows upstream may have made unnecessary. Read on the first question only: never at interpreter start-up.
"""

from __future__ import annotations

from . import versions

_FILE = "measured_needs.json"
_loaded: list = []


def _releases() -> list:
    if not _loaded:
        import json
        from pathlib import Path

        try:
            data = json.loads((Path(__file__).parent / _FILE).read_text())
            _loaded.append(data.get("releases", []))
        except (OSError, ValueError):  # a broken or missing file loses the notes, never the status
            _loaded.append([])
    return _loaded[0]


def _release(version) -> str:
    return (version or "").split("+")[0]


def here() -> dict:
    """The measurement of the installed torch + transformers pair, or {} where none was made."""
    torch, transformers = _release(versions.installed("torch")), _release(versions.installed("transformers"))
    return next((r for r in _releases() if r.get("torch") == torch and r.get("transformers") == transformers), {})


def note(patch_id: str) -> str:
    """'no catalogue case needs it on torch 2.14.1, transformers 5.23.0' where that was measured for the installed
    pair, else ''. Said of the catalogue's cases, not of every model: a row proven by its own tests in a regime
    the catalogue lacks reads so too, and is for us to check before we retire it."""
    release = here()
    if patch_id in release.get("not_needed", ()):
        return f"no catalogue case needs it on torch {release['torch']}, transformers {release['transformers']}"
    return ""
