"""autopatch's sitecustomize: for interpreters where .pth files are disabled or unwanted.

Put this directory first on PYTHONPATH (`autopatch sitecustomize-path` prints it; `autopatch run` does it for
you).  At start-up it activates autopatch when EXPORT_PATCHES is set, then runs the sitecustomize that would
have run without it (the next one on sys.path), so a site's or a user's own start-up code keeps working.
Nothing here may raise: a broken start-up file would break every Python program.
"""

import os
import sys

__autopatch_template__ = True


def _activate():
    if os.environ.get("EXPORT_PATCHES", "").strip().lower() in ("", "0", "none", "off", "false", "no"):
        return
    try:
        sys._autopatch_door = "sitecustomize"  # read (and removed) by the package's bootstrap
        import autopatch  # noqa: F401  (importing the package is the door)
    except Exception as exc:
        sys.stderr.write(f"autopatch: sitecustomize door failed: {type(exc).__name__}: {exc}\n")


def _chain():
    """Runs the next sitecustomize on sys.path, as if this one had not been there."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # The chained file sees itself as `sitecustomize`, as it would without us.
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.stderr.write(f"autopatch: the chained sitecustomize {spec.origin} failed: {type(exc).__name__}: {exc}\n")


_activate()
_chain()
