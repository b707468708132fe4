"""The declarative record of one patch.

A PatchSpec holds only strings and tuples: nothing in it imports torch or transformers, so the whole table
(`registry.py`) can be read at interpreter start-up for free.  Resolution of the lazy references happens in
`install.py`, at the moment the trigger module is imported.
"""

from __future__ import annotations

#: How a patch is put in place.
#:  - ``route``: the target is replaced by a router that calls the replacement while the current thread is
#:    inside ``torch.export`` and the original everywhere else (scope ``export``).
#:  - ``entry``: the target is an export entry point; it is wrapped so that calling it turns the export scope on
#:    for the current thread (scope ``always``: the wrapper itself is always there, it only sets the flag).
#:  - ``install``: the replacement is an installer ``fn(owner, name, original) -> undo`` that does its own work,
#:    e.g. a pytree registration (scope ``always``: pytree registrations are process-wide by nature).
#:  - ``rewrite``: the replacement is a rewriter ``fn(original) -> function`` (``autopatch.rewrite``) run once at
#:    install on the original's source; the result is routed like ``route`` (scope ``export``).
MODES = ("route", "entry", "install", "rewrite")

#: ``custom``: the family of patches users declare themselves when they give no other (``PatchInfo.make``).
FAMILIES = ("agent", "torch", "transformers", "pytree", "rewrite", "custom")


_FIELDS = ("id", "family", "trigger", "target", "mode", "replacement", "requires", "fingerprints", "reason", "link",
           "default", "needs")


class PatchSpec:
    """Immutable; compared, hashed and printed by its fields, like the frozen dataclass it replaces (written out
    by hand: ``dataclasses`` imports ``inspect``, which would double the start-up of an interpreter that
    activates the agent)."""

    __match_args__ = _FIELDS

    def __init__(
        self,
        id: str,
        family: str,
        #: The module that *defines* the target. Hooking a parent package fires while it is half initialised.
        trigger: str,
        #: Attribute path inside the trigger module: ``"func"`` or ``"Class.method"``.
        target: str,
        mode: str,
        #: ``"module:attribute"``, resolved only when the patch is installed (custom patches may give the
        #: callable). Empty for ``entry`` patches.
        replacement: object = "",
        #: PEP 508 requirements on installed distributions (``"transformers>=4.56,<5"``), checked from metadata
        #: before the patch is installed. (``("transformers", ">=4.56,<5")`` pairs, the older form, are accepted.)
        requires: tuple[str, ...] = (),
        #: Fingerprints (``fingerprint.of``) of the original source this patch was written against. Empty: the
        #: original is wrapped rather than rewritten, so its source does not matter.
        fingerprints: tuple[str, ...] = (),
        reason: str = "",
        link: str = "",
        #: Selected by ``EXPORT_PATCHES=1``. Opt-in patches must be named.
        default: bool = True,
        #: Companions: ids (or globs) of the patches this one works only with. Selecting it without them is
        #: reported ("selected X without its companion Y"), never silently half applied.
        needs: tuple[str, ...] = (),
    ):
        fields = self.__dict__
        fields["id"], fields["family"], fields["trigger"], fields["target"], fields["mode"] = (
            id, family, trigger, target, mode)
        requires = tuple(item if isinstance(item, str) else "".join(item) for item in requires)
        fields["replacement"], fields["requires"], fields["fingerprints"] = replacement, requires, fingerprints
        fields["reason"], fields["link"], fields["default"], fields["needs"] = reason, link, default, tuple(needs)
        if mode not in MODES:
            raise ValueError(f"patch {id!r}: mode {mode!r} is not one of {', '.join(MODES)}")
        if family not in FAMILIES:
            raise ValueError(f"patch {id!r}: family {family!r} is not one of {', '.join(FAMILIES)}")
        if mode != "entry" and not callable(replacement) and ":" not in replacement:
            raise ValueError(f"patch {id!r}: replacement {replacement!r} must be 'module:attribute'")

    def _fields(self) -> tuple:
        return tuple(self.__dict__[name] for name in _FIELDS)

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"cannot delete field {name!r}")

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self):
        return hash(self._fields())

    def __repr__(self):
        return f"{type(self).__qualname__}(" + ", ".join(f"{name}={self.__dict__[name]!r}" for name in _FIELDS) + ")"

    @property
    def scope(self) -> str:
        return "export" if self.mode in ("route", "rewrite") else "always"

    @property
    def target_name(self) -> str:
        return f"{self.trigger}.{self.target}"

    @property
    def requirement_text(self) -> str:
        return ", ".join(self.requires) or "-"

    def resolve_replacement(self):
        if callable(self.replacement):  # custom patches may hand the function itself
            return self.replacement
        import importlib

        module_name, _, attr = self.replacement.partition(":")
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


def calls_original(replacement):
    """Marks a route replacement that needs the function it replaces: the router then calls
    ``replacement(original, *args, **kwargs)``. For patches that adjust a call rather than rewrite it."""
    replacement.__autopatch_calls_original__ = True
    return replacement


def owner_and_name(module, target: str):
    """The object that holds the target attribute, and the attribute's name."""
    *path, name = target.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    return owner, name


def table_row(name: str, fields: tuple[str, ...]):
    """The row type of an area's model table: a tuple whose items are also attributes by name, as
    ``collections.namedtuple`` makes them (written out: the tables are read at start-up, where importing
    ``collections`` would cost more than all of them)."""

    def __new__(cls, *values):
        if len(values) != len(fields):
            raise TypeError(f"{name} takes {len(fields)} values ({', '.join(fields)}), got {len(values)}")
        return tuple.__new__(cls, values)

    def __repr__(self):
        return f"{name}(" + ", ".join(f"{field}={value!r}" for field, value in zip(fields, self)) + ")"

    namespace = {"__slots__": (), "_fields": fields, "__new__": __new__, "__repr__": __repr__}
    for index, field in enumerate(fields):
        namespace[field] = property(lambda self, index=index: self[index], doc=f"column {index}: {field}")
    return type(name, (tuple,), namespace)
