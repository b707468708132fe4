"""The patch author's kit: the one core module an area's code imports (``tests/test_layout.py`` enforces it).

An area (``autopatch/areas/<area>/``) declares its rows in ``rows.py`` and writes its replacements and
installers beside them. Everything those need from the agent is here, so the core can change behind this page:

  errors        ``Skip`` (decided not to apply), ``Drifted`` (the source changed), ``NotRewritable``
  routing       ``calls_original`` marks a replacement that receives the function it replaces
  the export    ``in_export``, ``use_patch`` / ``count_hit`` (hits by patch id), ``on_export_start``,
                ``exported_module``, ``current_run``, ``built_before_export`` (what traced code needs built),
                ``note`` (a decision the user should know of: in the export's report, logged once)
  sources       ``fingerprint_of``, ``source_of``, ``check_fingerprint`` (raises ``Drifted`` against the row's
                fingerprints), ``substitute_expressions`` (rewrite a function from its own source), ``runtime``
                (helpers that rewritten code calls)
  installers    an installer is ``fn(record, owner, name, original) -> undo`` (or ``(undo, detail)``); its
                ``record.spec`` is its own row, so it never repeats its id or fingerprints.
                ``install_always_on`` puts a wrapper in place outside the export scope.
  versions      ``installed(dist)``
  frames        ``is_outside(filename)``: neither torch's, autopatch's, the standard library's nor generated code
  ONNX          ``returned_leaves(exported_program)``: which output leaves an ONNX graph returns

Imported by area modules only, which load when their target module is imported: never at start-up.
"""

from __future__ import annotations

from . import fingerprint
from .rewrite import runtime
from .rewrite.control_flow import NotRewritable, substitute_expressions
from .scope import count_hit, current_run, exported_module, in_export, note, on_export_start, use_patch
from .spec import calls_original
from .errors import is_outside
from .onnx_inputs import returned_leaves
from .versions import installed

__all__ = [
    "Skip", "Drifted", "NotRewritable", "calls_original", "in_export", "use_patch", "count_hit", "on_export_start",
    "exported_module", "current_run", "note", "built_before_export", "fingerprint_of", "source_of",
    "check_fingerprint", "substitute_expressions", "runtime", "install_always_on", "installed", "is_outside",
    "returned_leaves",
]


class Skip(Exception):
    """Raised by an installer that decides, after looking at the live objects, not to apply."""


class Drifted(Skip):
    """Raised by an installer whose own fingerprint check finds the source changed: state DRIFTED, as for the
    rows whose fingerprints the agent checks itself."""


fingerprint_of = fingerprint.of
source_of = fingerprint.source_of  # dedented: what a rewriter parses


def built_before_export(module: str, build):
    """A getter of ``build()``'s result, built once: when an export starts with ``module`` loaded (outside any
    trace), or at the getter's first call. For a replacement that strict=True traces with Dynamo and that needs
    what Dynamo cannot build (a rewrite reading a source). Not when the area loads: that may run another module's
    post-import hook while it is half initialised. The result is kept in a plain list, which Dynamo reads, where
    functools' caches take a lock it cannot enter."""
    import sys

    built: list = []

    def get():
        if not built:
            built.append(build())
        return built[0]

    def before_export(entry_args, entry_kwargs):
        if not built and module in sys.modules:
            get()
        return lambda: None

    on_export_start(before_export)
    return get


def check_fingerprint(record, obj, where: str) -> str:
    """The fingerprint of ``obj``'s source, which must be one of ``record.spec.fingerprints``; else ``Drifted``
    naming ``where``. For installers that install on something other than the row's target, or that need to know
    which of several sources they met."""
    found = fingerprint.of(obj)
    expected = record.spec.fingerprints
    if found not in expected:
        raise Drifted(f"source of {where} changed (written against {', '.join(expected)}, found {found}); "
                      "not applied")
    return found


def install_always_on(record, owner, name, original, wrapper):
    """Puts ``wrapper`` in place of ``owner.name`` (for code that runs in ``ep.module()``, after the export, where
    an export-scoped router never sees it) and returns the undo, which refuses to remove a later wrapper."""
    wrapper.__autopatch_original__ = original
    wrapper.__autopatch_id__ = record.spec.id
    setattr(owner, name, wrapper)

    def undo() -> str:
        if getattr(owner, name) is not wrapper:
            return f"could not restore {owner.__name__}.{name}: replaced on top of autopatch's wrapper"
        setattr(owner, name, original)
        return ""

    return undo
