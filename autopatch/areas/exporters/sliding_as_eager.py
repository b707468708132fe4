"""Sliding-window layers inside transformers' own exporters: eager's layer, not a full one.

transformers' exporters trace a ``DynamicSlidingWindowLayer`` as if it were a full ``DynamicLayer`` (three
stand-ins in ``_PATCHES["dynamo"]``: ``update``, ``get_mask_sizes``, ``get_seq_length``), because a plain trace
bakes in the layer's token count and its cut to the window.  The program they make then takes the keys it is
given for *every* token seen.  A cache that eager code, or a runtime that keeps eager's layout, filled past the
window holds only the last ``window - 1`` tokens: the program places them at the wrong positions and answers
with wrong numbers, silently (at the traced sizes as at others).

The agent's sliding rows (``transformers.cache.sliding_update`` / ``sliding_mask_sizes``) already trace the
layer as eager runs it, for every past length: the cut is a ``sym_min``, the count comes from sizes.  Where they
are in place, transformers' stand-ins are withheld for that export (every other patch of theirs still applies),
so the program takes and returns eager's caches.  Where they are not (deselected, drifted), transformers' own
stand-ins apply unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

from ... import kit
from ...kit import install_always_on
from ..sliding_windows import layers as sliding_layers


#: The stand-ins withheld: transformers' full-layer methods on the sliding layer.
SLIDING_LAYER = "transformers.cache_utils.DynamicSlidingWindowLayer"
STAND_INS = frozenset({"update", "get_mask_sizes", "get_seq_length"})

#: True while transformers' stand-ins are withheld in this context (for the export's report).
_WITHHELD = contextvars.ContextVar("autopatch_sliding_withheld", default=False)


def _agent_routes_sliding_layers() -> bool:
    """Whether the agent's two sliding rows are the sliding layer's methods right now: the two go together, so
    withholding transformers' three stand-ins is right only when both are there."""
    from transformers import cache_utils

    layer = cache_utils.DynamicSlidingWindowLayer
    return (
        getattr(vars(layer).get("update"), "__autopatch_id__", None) == sliding_layers.PATCH_UPDATE
        and getattr(vars(layer).get("get_mask_sizes"), "__autopatch_id__", None)
        == sliding_layers.PATCH_MASK_SIZES
    )


def install_sliding_layers_as_eager(record, owner, name, original):
    """Installer for ``transformers.exporters.exporter_dynamo.apply_patches`` (the name every exporter enters
    around its ``torch.export``). Always on: it runs before the export starts, where no export-scoped router is."""
    # The row's fingerprints are of transformers' apply_patches, whose stand-ins _without_stand_ins rebuilds.
    kit.check_fingerprint(record, original, f"{owner.__name__}.{name}")
    from transformers.exporters import utils

    @functools.wraps(original)
    def apply_patches(backend):
        if backend != "dynamo" or not _agent_routes_sliding_layers():
            return original(backend)
        return _without_stand_ins(utils, backend)

    undo_wrapper = install_always_on(record, owner, name, original, apply_patches)
    stop_counting = kit.on_export_start(functools.partial(_count_when_withheld, record.spec.id))
    return lambda: stop_counting() + undo_wrapper()


@contextlib.contextmanager
def _without_stand_ins(utils, backend):
    """transformers' ``apply_patches(backend)`` less the sliding layer's stand-ins (fingerprinted above)."""
    kept = [
        (obj, attribute, factory)
        for path, attribute, factory in utils._PATCHES.get(backend, [])
        if not (path == SLIDING_LAYER and attribute in STAND_INS)
        and (obj := utils.import_dotted_path(path, missing_ok=True)) is not None
    ]
    token = _WITHHELD.set(True)
    try:
        with utils.patch_attributes(kept):
            yield
    finally:
        _WITHHELD.reset(token)


def _count_when_withheld(patch_id, entry_args, entry_kwargs):
    if _WITHHELD.get():
        kit.count_hit(patch_id)
    return lambda: None
