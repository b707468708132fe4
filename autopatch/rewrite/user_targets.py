"""Rewrite patches for the user's own functions, named in EXPORT_PATCHES_REWRITE (no code change needed).

``my_model:MyModel.forward,my_model:helper`` becomes one PatchSpec per entry, family ``rewrite``, installed
when ``my_model`` is imported, like any row of the registry.
"""

from __future__ import annotations

import re

from ..spec import PatchSpec

PREFIX = "rewrite.user."
_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


#: The word that turns on rewriting after a failure (``rewrite.auto``) instead of naming a function.
AUTO = "auto"


def specs_from(text: str) -> tuple[list[PatchSpec], list[str]]:
    """The specs named by ``text``, and one problem line per malformed entry (the others still apply)."""
    specs, problems = [], []
    for entry in (part.strip() for part in text.split(",")):
        if not entry or entry == AUTO:
            continue
        if not _ENTRY.match(entry):
            problems.append(
                f"EXPORT_PATCHES_REWRITE: {entry!r} is not module:qualname or {AUTO!r} "
                "(valid: e.g. my_model:MyModel.forward,auto)"
            )
            continue
        module, target = entry.split(":")
        spec_id = f"{PREFIX}{module}.{target}"
        if any(s.id == spec_id for s in specs):
            continue
        specs.append(
            PatchSpec(
                id=spec_id,
                family="rewrite",
                trigger=module,
                target=target,
                mode="rewrite",
                replacement="autopatch.rewrite:rewrite_tensor_conditions",
                reason=f"named in EXPORT_PATCHES_REWRITE: {entry}",
            )
        )
    return specs, problems


def auto_requested(text: str) -> bool:
    return AUTO in (part.strip() for part in text.split(","))
