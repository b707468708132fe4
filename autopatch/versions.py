"""Version gates read from installed distribution metadata: nothing is imported to answer them.

``importlib.metadata`` and ``packaging`` are imported on the first question, not with this module: the agent
asks when a patch's trigger module is imported (or when its state is read), never at interpreter start-up.
"""

from __future__ import annotations

_installed: dict = {}


def installed(dist: str):
    """The installed version of a distribution, or None (read once per process)."""
    try:
        return _installed[dist]
    except KeyError:
        pass
    from importlib import metadata

    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        version = None
    return _installed.setdefault(dist, version)


_unmet: dict = {}


def unmet(requires) -> str:
    """Empty when every requirement holds, else why not (e.g. 'needs transformers>=5.0, found 4.57.6').
    Answered once per process for each requirement tuple (installed versions are read once, too)."""
    try:
        return _unmet[requires]
    except (KeyError, TypeError):  # TypeError: a custom spec's requirements given as a list
        pass
    why = _why_unmet(requires)
    try:
        _unmet[requires] = why
    except TypeError:
        pass
    return why


def _text(requirement) -> str:
    """A requirement as written: PEP 508 (``'transformers>=4.56,<5'``), or the older pair
    ``('transformers', '>=4.56,<5')`` joined."""
    return requirement if isinstance(requirement, str) else "".join(requirement)


def _parsed(requirement):
    """A requirement as (distribution, SpecifierSet)."""
    from packaging.requirements import Requirement

    parsed = Requirement(_text(requirement))
    return parsed.name, parsed.specifier


def _why_unmet(requires) -> str:
    from packaging.version import Version

    for requirement in requires:
        dist, spec = _parsed(requirement)
        version = installed(dist)
        if version is None:
            return f"needs {_text(requirement)}, not installed"
        if not spec.contains(Version(version), prereleases=True):
            return f"needs {_text(requirement)}, found {version}"
    return ""


def unmet_clauses(requires) -> str:
    """Only the clauses the installed versions fail, canonical ('transformers<5' for 'transformers>=4.56,<5'
    on 5.23), so that patches gated differently but skipped for the same reason are counted together."""
    from packaging.utils import canonicalize_version
    from packaging.version import Version

    parts = []
    for requirement in requires:
        dist, spec = _parsed(requirement)
        version = installed(dist)
        if version is None:
            parts.append(f"{dist} (not installed)")
            continue
        failed = {f"{s.operator}{canonicalize_version(s.version)}" for s in spec
                  if not s.contains(Version(version), prereleases=True)}
        if failed:
            parts.append(dist + ",".join(sorted(failed)))
    return ", ".join(parts)


def parse_requirement_text(text: str) -> tuple:
    """The inverse of ``PatchSpec.requirement_text`` ('transformers>=4.56,<5, torch>=2.9', or '-'), for code
    that has only the status structure: the PEP 508 strings a row declares."""
    import re

    # A requirement starts with a name; a comma followed by an operator continues the one before.
    return tuple(part.strip() for part in re.split(r", (?=[A-Za-z])", text) if part.strip() not in ("", "-"))
