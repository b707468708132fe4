"""Drop-in context managers for users migrating from the anchors' APIs: change the import line, keep the code.

    from autopatch.compat import torch_export_patches        # keywords of onnx-diagnostic's function
    from autopatch.compat import apply_patches_for_model     # keywords of yobx's function
    from autopatch.compat import PatchInfo                   # PatchInfo.make(fn, module_or_class, name, family)

Both yield a ``PatchDetails``: ``n_patches``, iteration over patch objects (``name``, ``family``,
``format_diff``), ``patches_involved_in_graph(graph)`` and ``make_report(pairs, format)``.  Underneath they
are ``autopatch.patched(selection)``: the patches are autopatch's, scoped to the exporting thread.
"""

from __future__ import annotations

import contextlib
import itertools

from . import attribution, state
from .spec import FAMILIES, PatchSpec

_custom_ids = itertools.count(1)


class PatchInfo:
    """A custom patch made from a live function, the way migrating code declares one."""

    def __init__(self, spec: PatchSpec):
        self.spec = spec
        self.name = spec.id
        self.family = spec.family

    @classmethod
    def make(cls, patch, module_or_class, method_or_function_name: str, family: str = "torch"):
        if isinstance(module_or_class, type):
            trigger, target = module_or_class.__module__, f"{module_or_class.__qualname__}.{method_or_function_name}"
        else:
            trigger, target = module_or_class.__name__, method_or_function_name
        name = getattr(patch, "__name__", "patch")
        spec = PatchSpec(
            id=f"custom.{name}.{next(_custom_ids)}",
            # yobx's family is a free label; ours selects, so an unknown label becomes "custom", never "torch".
            family=family if family in FAMILIES and family != "agent" else "custom",
            trigger=trigger,
            target=target,
            mode="route",
            replacement=patch,
            reason=f"custom patch {name} (family {family})",
        )
        return cls(spec)


class PatchDetails:
    """What a compat context manager yields. Inside the block it reports the live state (a patch installs when its
    module is imported); when the block ends it keeps the patches that were installed, so that listing them,
    their diffs and graph attribution still work after the patches are gone, as the anchors' objects do."""

    def __init__(self, agent):
        self._agent = agent
        self._kept = None

    def _records(self):
        if self._kept is not None:
            return self._kept
        return [r for r in self._agent.records.values() if r.spec.id in self._agent.selection.ids]

    def _freeze(self) -> None:
        self._kept = [r for r in self._records() if r.state in state.INSTALLED]

    @property
    def n_patches(self) -> int:
        return sum(1 for _ in self)

    def __iter__(self):
        records = self._records()
        return iter(records if self._kept is not None else [r for r in records if r.state in state.INSTALLED])

    def __len__(self) -> int:
        return self.n_patches

    def patches_involved_in_graph(self, graph):
        return attribution.involved_in_graph(self._records(), graph)

    def make_report(self, pairs, format: str = "raw") -> str:
        return attribution.make_report(pairs, "md" if format in ("md", "rst") else "raw")


def _selection(torch_family: bool, transformers_family: bool) -> str:
    items = []
    if torch_family:
        items.append("torch")
    if transformers_family:
        items += ["transformers", "pytree"]
    return ",".join(items) or "none"


@contextlib.contextmanager
def _patched(selection_text: str, extra_patches=()):
    import autopatch

    with autopatch.patched(selection_text, extra_patches=extra_patches or ()) as agent:
        details = PatchDetails(agent)
        try:
            yield details
        finally:
            details._freeze()  # before patched() takes the patches out


def torch_export_patches(patch_sympy=True, patch_torch=True, patch_transformers=False, stop_if_static=0,
                         custom_patches=None, verbose=0, patch=True, **unused):
    """onnx-diagnostic's keywords. ``patch=False`` disables everything; ``stop_if_static`` adds the opt-in
    torch.stop_if_static patch; ``custom_patches`` takes PatchSpec or PatchInfo objects, for this block only."""
    if not patch:
        return _patched("none")
    selection = _selection(patch_torch, patch_transformers)
    if stop_if_static:
        selection += ",torch.stop_if_static"
    return _patched(selection, custom_patches)


def apply_patches_for_model(patch_torch=False, patch_transformers=False, extra_patches=None, model=None, **unused):
    """yobx's keywords. ``model`` is accepted for compatibility: autopatch patches lazily by module, so every
    model the selection covers is handled. ``extra_patches`` live for this block only."""
    return _patched(_selection(patch_torch, patch_transformers), extra_patches)
