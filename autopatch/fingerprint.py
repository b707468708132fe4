"""Fingerprints of the source a patch was written against, so an upstream rewrite shows as DRIFTED."""

from __future__ import annotations

import hashlib
import inspect
import textwrap


def source_of(obj) -> str:
    return textwrap.dedent(inspect.getsource(obj))


def of(obj) -> str:
    """A short hash of the source, blank and comment-only lines left out so that reformatting keeps it."""
    lines = [
        line.rstrip()
        for line in source_of(obj).splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
