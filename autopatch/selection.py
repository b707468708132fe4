"""The selection grammar of ``EXPORT_PATCHES``.

    1 | all | on           the default patches
    0 | none | off | ''    nothing (the agent stays inactive)
    torch                  a family
    pytree.dynamic_cache   an id
    transformers.rope.*    a glob over ids
    -name                  excludes a family, id or glob; a selection made only of exclusions starts from all

Problems never raise here: they are returned as messages naming the bad token and the valid choices, and the
caller decides (warn, or raise under EXPORT_PATCHES_STRICT=1).
"""

from __future__ import annotations

from .spec import FAMILIES

ALL_WORDS = ("1", "all", "on", "true", "yes")
NONE_WORDS = ("0", "none", "off", "false", "no")
#: What an item is made of, after an optional leading '-' (checked without ``re``, which costs start-up time).
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.*?[]")


def _well_formed(token: str) -> bool:
    body = token[1:] if token.startswith("-") else token
    return bool(body) and _TOKEN_CHARS.issuperset(body)


class Selection:
    """The parsed value (a plain class rather than a dataclass: ``dataclasses`` is slow to import)."""

    def __init__(self, text: str, ids: tuple[str, ...], problems: tuple[str, ...]):
        self.text, self.ids, self.problems = text, ids, problems

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.text, self.ids, self.problems) == (other.text, other.ids, other.problems)

    __hash__ = None

    def __repr__(self):
        return f"Selection(text={self.text!r}, ids={self.ids!r}, problems={self.problems!r})"

    @property
    def active(self) -> bool:
        return bool(self.ids)


def parse(text: str, specs) -> Selection:
    """Returns the ids of ``specs`` that ``text`` selects, in table order."""
    text = (text or "").strip()
    if text.lower() in ("",) + NONE_WORDS:
        return Selection(text, (), ())
    # Every family name is valid, even one with no patch for this table (nothing to select is not an error).
    families = sorted(set(FAMILIES) - {"agent"})
    problems = []
    included: set[str] = set()
    excluded: set[str] = set()
    saw_include = False
    for raw in text.split(","):
        token = raw.strip()
        if not token:
            problems.append(f"EXPORT_PATCHES={text!r}: empty item between commas; {_choices(families)}")
            continue
        if not _well_formed(token) or token.startswith("--"):
            problems.append(f"EXPORT_PATCHES: malformed item {token!r}; {_choices(families)}")
            continue
        negate = token.startswith("-")
        name = token[1:] if negate else token
        if not negate:
            saw_include = True
        if name.lower() in NONE_WORDS:
            problems.append(f"EXPORT_PATCHES: {token!r} cannot be combined with other items; {_choices(families)}")
            continue
        matched = _match(name, specs, negate)
        if matched is None:
            problems.append(f"EXPORT_PATCHES: unknown patch or family {name!r}; {_choices(families)}")
            continue
        (excluded if negate else included).update(matched)
    if not saw_include:
        # Only exclusions: "everything but ..." is what such a value can mean.
        included = {s.id for s in specs if s.default}
    ids = tuple(s.id for s in specs if s.id in included and s.id not in excluded)
    return Selection(text, ids, tuple(problems) + _missing_companions(ids, specs))


def _missing_companions(ids, specs) -> tuple[str, ...]:
    """A problem for patches selected without a companion (``PatchSpec.needs``): one line per set of missing
    companions, naming the patches that need them."""
    chosen = set(ids)
    known = {spec.id for spec in specs}
    by_missing: dict[tuple, list[str]] = {}
    for spec in specs:
        if spec.id not in chosen or not spec.needs:
            continue
        missing = []
        for need in spec.needs:
            if _is_glob(need):  # rare (opt-in rows): fnmatch is not imported at start-up otherwise
                import fnmatch

                missing += [other.id for other in specs if other.id not in chosen
                            and fnmatch.fnmatchcase(other.id, need)]
            elif need in known and need not in chosen:
                missing.append(need)
        if missing:
            by_missing.setdefault(tuple(dict.fromkeys(missing)), []).append(spec.id)
    return tuple(
        f"EXPORT_PATCHES: selected {_some(needers)} without {'its' if len(needers) == 1 else 'their'} "
        f"companion{'' if len(missing) == 1 else 's'} {_some(missing)}; select them together, or none of them"
        for missing, needers in by_missing.items()
    )


def _some(ids) -> str:
    return ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def _is_glob(name: str) -> bool:
    return any(c in name for c in "*?[")


def _match(name: str, specs, negate: bool):
    low = name.lower()
    if low in ALL_WORDS:
        return {s.id for s in specs if s.default}
    by_family = {s.id for s in specs if s.family == name and (s.default or negate)}
    if by_family:
        return by_family
    if name in FAMILIES and name != "agent":
        return set()  # a family with only opt-in patches, or none here: nothing by default, still a valid name
    if any(ch in name for ch in "*?["):
        import fnmatch

        globbed = {s.id for s in specs if fnmatch.fnmatchcase(s.id, name) and (s.default or negate)}
        # A glob that names opt-in patches only (e.g. torch.stop_*) selects them: it was explicit enough.
        return globbed or {s.id for s in specs if fnmatch.fnmatchcase(s.id, name)} or None
    exact = {s.id for s in specs if s.id == name}
    return exact or None


def _choices(families) -> str:
    return (
        "valid: 1/all, 0/none, a family (" + ", ".join(families) + "), a patch id or a glob such as "
        "'transformers.*', each optionally prefixed by '-' to exclude; see 'autopatch status' for the ids"
    )
