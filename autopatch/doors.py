"""Which doors are installed, and whether this interpreter would go through them.

Answered without importing anything heavy: the status header calls this in the CLI process.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path

TEMPLATE_DIR_NAME = "autopatch_sitecustomize"


def _site_dirs() -> list[Path]:
    dirs = [Path(p) for p in site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(Path(site.getusersitepackages()))
    return dirs


def _find(name: str):
    for d in _site_dirs():
        if (d / name).is_file():
            return d / name
    return None


def sitecustomize_dir():
    """The directory holding the sitecustomize template: the checkout's (editable installs, always fresh)
    or the copy the wheel puts in site-packages."""
    checkout = Path(__file__).resolve().parent.parent / "sitecustomize_template"
    if (checkout / "sitecustomize.py").is_file():
        return checkout
    for d in _site_dirs():
        if (d / TEMPLATE_DIR_NAME / "sitecustomize.py").is_file():
            return d / TEMPLATE_DIR_NAME
    return None


def interpreter_flags() -> list[str]:
    flags = sys.flags
    return [
        flag
        for flag, on in (("-S", flags.no_site), ("-I", flags.isolated), ("-E", flags.ignore_environment),
                         ("-s", flags.no_user_site))
        if on
    ]


def describe() -> list[dict]:
    """One entry per door: installed where, and whether this interpreter runs it at start-up."""
    no_site = bool(sys.flags.no_site)
    pth = _find("autopatch.pth")
    start = _find("autopatch.start")
    loaded_site = sys.modules.get("sitecustomize")
    ours_loaded = bool(getattr(loaded_site, "__autopatch_template__", False))
    template = sitecustomize_dir()
    return [
        {
            "door": "pth",
            "installed": str(pth) if pth else "",
            "runs": bool(pth) and not no_site,
            "why_not": "-S disables site" if pth and no_site else ("" if pth else "autopatch.pth not found"),
        },
        {
            "door": "start",
            "installed": str(start) if start else "",
            "runs": bool(start) and not no_site and sys.version_info >= (3, 15),
            "why_not": "" if sys.version_info >= (3, 15) else "PEP 829 .start files need Python 3.15+",
        },
        {
            "door": "sitecustomize",
            "installed": str(template) if template else "",
            "runs": ours_loaded,
            "why_not": "" if ours_loaded else (
                "-S disables site" if no_site else
                f"not on PYTHONPATH (add {template} or use `autopatch run`)" if template else "template not found"
            ),
        },
        {"door": "import", "installed": "always", "runs": True, "why_not": ""},
    ]
