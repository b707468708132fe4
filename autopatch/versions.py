"""Version gates read from installed distribution metadata: nothing is imported to answer them."""

from __future__ import annotations

import functools
from importlib import metadata


@functools.lru_cache(maxsize=None)
def installed(dist: str):
    """The installed version of a distribution, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def unmet(requires) -> str:
    """Empty when every requirement holds, else why not (e.g. 'needs transformers>=5.0, found 4.57.6')."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    for dist, spec in requires:
        version = installed(dist)
        if version is None:
            return f"needs {dist}{spec}, not installed"
        if not SpecifierSet(spec).contains(Version(version), prereleases=True):
            return f"needs {dist}{spec}, found {version}"
    return ""
