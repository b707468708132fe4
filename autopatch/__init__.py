"""autopatch: makes torch.export work on Hugging Face models without changing the code that calls it.

Zero-code use:   EXPORT_PATCHES=1 python your_script.py
Explicit use:    import autopatch; autopatch.enable("all") ... autopatch.disable()
                 with autopatch.patched("pytree,transformers"): torch.export.export(...)

Importing this package is cheap: torch, transformers and wrapt are imported only when needed.
"""

from __future__ import annotations

from . import _bootstrap

__version__ = "0.1.0"
__all__ = [
    "enable", "disable", "patched", "status", "patches", "last_export_report", "in_export", "guess_dynamic_shapes",
    "register", "patches_involved_in_graph", "make_report", "__version__",
]


def _agent():
    from .agent import AGENT

    return AGENT


def enable(selection: str = "all"):
    """Activates the agent with a selection in the EXPORT_PATCHES grammar; returns the parsed selection.

    Re-enabling replaces the previous selection. Problems (unknown names) are logged, or raised under
    EXPORT_PATCHES_STRICT=1."""
    _bootstrap.doors.append("enable()")
    return _agent().enable(selection)


def disable() -> None:
    """Removes every patch, restoring the original objects and pytree registrations."""
    _agent().disable()


def patched(selection: str = "all", extra_patches=()):
    """Patches active inside the block; the previous selection (or none) is restored after it.

    ``extra_patches``: custom patches (``PatchSpec``, or ``compat.PatchInfo``) for this block only; they are
    selected with ``selection`` and taken out of the table when the block ends."""
    import contextlib  # here, not at the top: importing the package at interpreter start-up must stay cheap

    return contextlib.contextmanager(_patched)(selection, extra_patches)


def _patched(selection, extra_patches):
    agent = _agent()
    specs = [getattr(p, "spec", p) for p in extra_patches]
    added = [spec for spec in specs if spec.id not in agent.records]
    for spec in added:
        agent.add(spec)
    before = agent.selection.text if agent.active else ""
    enable(_with_ids(selection, [spec.id for spec in specs]))
    try:
        yield agent
    finally:
        agent.disable()
        # Left in the table, a later selection of their family would pick them up again.
        for spec in added:
            agent.remove(spec.id)
        if before:
            agent.enable(before)


def _with_ids(selection: str, ids) -> str:
    """``selection`` plus patch ids (a selection that selects nothing becomes just the ids)."""
    from .selection import NONE_WORDS

    items = [] if selection.strip().lower() in ("",) + NONE_WORDS else [selection]
    return ",".join(items + list(ids)) or "none"


def status() -> dict:
    """The structure `autopatch status --json` prints: header and one row per patch."""
    from . import status_data

    return status_data.build(_agent())


def patches() -> list:
    """The live record of every patch (entry points first): spec, state, detail, hits."""
    return list(_agent().records.values())


def register(spec_or_none=None, /, **fields):
    """Adds a custom patch, declared like the built-in ones (``autopatch.spec.PatchSpec`` or its fields as
    keywords). It is lazy, scoped, version-gated and fingerprinted like them, and selected by the next
    ``enable()`` (by its id, its family or a glob; ``EXPORT_PATCHES=1`` selects it when ``default=True``)."""
    from .spec import PatchSpec

    spec = spec_or_none if spec_or_none is not None else PatchSpec(**fields)
    _agent().add(spec)
    return spec


def patches_involved_in_graph(graph):
    """``[(patch, [nodes])]``: the patches whose replacement code produced nodes of an exported graph."""
    from .attribution import involved_in_graph

    return involved_in_graph(patches(), graph)


def make_report(pairs, format: str = "raw") -> str:
    """Text (``raw``) or markdown (``md``) for ``patches_involved_in_graph`` results, with each diff."""
    from .attribution import make_report as render

    return render(pairs, format)


def last_export_report():
    """What the most recent export (in any thread) used: entry point, thread, seconds, error, patch hits."""
    from . import runs

    run = runs.last_run()
    return run.as_dict() if run is not None else None


def guess_dynamic_shapes(inputs_a, inputs_b):
    """A ``dynamic_shapes`` for torch.export: every dimension that differs between the two input sets is
    dynamic. Caches are laid out as autopatch flattens them (see README)."""
    from .dynamic_shapes import guess_dynamic_shapes as guess

    return guess(inputs_a, inputs_b)


def in_export() -> bool:
    """True while the current thread is inside a torch.export entry point."""
    from . import scope

    return scope.in_export()


# `import autopatch` is a door too: with EXPORT_PATCHES set, importing the package activates the agent. The
# other doors import the package on their way in, so the door is named after the importer.
_bootstrap.activate(_bootstrap.importer_door())
