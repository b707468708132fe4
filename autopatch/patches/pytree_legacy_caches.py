"""Pytree registrations for the caches of transformers 4.48-4.53, before caches were made of layers.

Those caches are plain objects holding one list of tensors per kind of state: ``DynamicCache`` and
``StaticCache`` keep ``key_cache`` / ``value_cache`` (one tensor per layer), ``HybridCache`` the same with a
sliding-layer flag per layer, ``MambaCache`` ``conv_states`` / ``ssm_states``.  Each flattens by attribute
(cache_attributes): the attributes holding tensors are the children, in the object's own order, so a plain
``DynamicCache`` flattens to ``[key_cache, value_cache]`` exactly as transformers' own registration of 4.50-4.53
and ``register_dynamic_cache_export_support`` do, and their dynamic_shapes specs keep working:

    cache_dims = [{0: batch, 2: past}] * num_layers
    dynamic_shapes = {"past_key_values": [cache_dims, cache_dims]}

Everything else (``max_cache_len``, a dtype, the sliding flags) is structure, in the context.  Two exceptions,
per-call values that must not become constants of the graph: a batch size kept as an int (read back from the
tensors, see cache_attributes) and ``_seen_tokens``, DynamicCache's count of tokens seen, rebuilt on unflatten
from the traced key length.

transformers 4.50-4.53 register ``DynamicCache`` themselves, with the right layout, but also give torch.fx a
flatten spec that returns the leaves instead of the children: ``ep.module()`` then indexes each key tensor as if
it were the list of keys, and every program, strict or not, fails its guards on the first call.  That
registration is replaced, its fx spec removed, and both are put back on disable.
"""

from __future__ import annotations

import torch

from .. import scope
from ..install import Skip
from . import cache_attributes, pytree_registration
from .pytree_caches import _hook_subclasses, _subclasses

#: Owners of registrations known to be wrong for export (see the module docstring).
REPLACEABLE = ("transformers.cache_utils", "transformers.integrations.executorch")
#: Per-call counters: left out of the context, rebuilt from the key length on unflatten.
COUNTERS = ("_seen_tokens",)


def make_legacy_codec(cls, patch_id: str):
    # transformers 4.48's Cache is a torch.nn.Module: the module machinery's own attributes are not the cache's.
    module_attrs = frozenset(vars(torch.nn.Module())) if issubclass(cls, torch.nn.Module) else frozenset()
    skip = module_attrs | frozenset(COUNTERS)

    def flatten(cache):
        scope.count_hit(patch_id)
        attributes = cache_attributes.split(cache, skip)
        counters = tuple(name for name in COUNTERS if name in vars(cache))
        return [getattr(cache, name) for name in attributes.tensors], (attributes, counters)

    def flatten_with_keys(cache):
        children, context = flatten(cache)
        names = context[0].tensors
        return [(torch.utils._pytree.GetAttrKey(name), child) for name, child in zip(names, children)], context

    def unflatten(children, context):
        attributes, counters = context
        cache = cls.__new__(cls)  # its __init__ wants a config; every attribute comes from the flattened form
        if module_attrs:
            torch.nn.Module.__init__(cache)
        cache_attributes.restore(cache, attributes, list(children))
        for name in counters:
            setattr(cache, name, _seen_tokens(cache))
        return cache

    return flatten, unflatten, flatten_with_keys


def _seen_tokens(cache):
    """The tokens a DynamicCache has seen: the key length of its first attention layer (hybrid caches keep
    2-d placeholders for their other layers). Read from shapes only: the cache's own get_seq_length calls
    ``len(tensor)``, which dynamo (strict=True) turns into a constant batch size."""
    for keys in getattr(cache, "key_cache", ()):
        if isinstance(keys, torch.Tensor) and keys.dim() == 4:
            return keys.shape[-2]
    return 0


def _register(cls, patch_id):
    flatten, unflatten, flatten_with_keys = make_legacy_codec(cls, patch_id)
    previous_fx = _remove_fx_spec(cls)
    try:
        undo, detail = pytree_registration.register(
            cls, flatten, unflatten, flatten_with_keys, _to_dumpable, _from_dumpable, replaceable=REPLACEABLE
        )
    except Exception:
        _restore_fx_spec(cls, previous_fx)
        raise
    if previous_fx is not None:
        detail = (detail + "; " if detail else "") + "removed its torch.fx flatten spec (it returned the leaves)"

    def undo_all() -> str:
        problem = undo()
        _restore_fx_spec(cls, previous_fx)
        return problem

    return undo_all, detail


def _remove_fx_spec(cls):
    """Takes out the torch.fx flatten spec registered for ``cls``; returns what to put back. With none, torch.fx
    falls back on the pytree flattening, which is ours."""
    import torch.fx._pytree as fx_pytree

    if cls not in fx_pytree.SUPPORTED_NODES:
        return None
    previous = (fx_pytree.SUPPORTED_NODES.pop(cls), fx_pytree.SUPPORTED_NODES_EXACT_MATCH.pop(cls, None))
    return previous


def _restore_fx_spec(cls, previous) -> None:
    import torch.fx._pytree as fx_pytree

    if previous is not None:
        fx_pytree.SUPPORTED_NODES[cls], fx_pytree.SUPPORTED_NODES_EXACT_MATCH[cls] = previous


def register_legacy_caches(patch_id: str, probe_attribute: str):
    """An installer for a pre-4.56 cache class and every subclass (cache_utils' own, a model's, those defined
    later). ``probe_attribute`` is the list a fresh cache of that generation holds: the class is probed, never
    assumed, since the same names exist with other layouts in other versions."""

    def install(module, name, root):
        if hasattr(module, "CacheLayerMixin") or not _has_list(root, probe_attribute):
            raise Skip(f"{name} here is not the {probe_attribute}-list cache of transformers 4.48-4.53")
        undos, registered, details = [], [], []

        def undo_all() -> str:
            return "; ".join(problem for problem in (u() for u in reversed(undos)) if problem)

        def register_one(cls) -> None:
            undo, detail = _register(cls, patch_id)
            undos.append(undo)
            registered.append(cls.__name__)
            if detail:
                details.append(f"{cls.__name__}: {detail}" if cls is not root else detail)

        for cls in _subclasses(root):
            try:
                register_one(cls)
            except Skip as exc:
                if cls is root:
                    undo_all()
                    raise
                details.append(str(exc))
        undos.append(_hook_subclasses(root, register_one))
        if len(registered) > 1:
            details.insert(0, f"registered {', '.join(registered)}")
        return undo_all, "; ".join(details)

    return install


def _has_list(cls, attribute: str) -> bool:
    """Whether the class's __init__ sets ``attribute`` to a list: read from its source, since building one
    needs a config (StaticCache, MambaCache)."""
    import inspect

    try:
        source = inspect.getsource(cls.__init__)
    except (OSError, TypeError):
        return False
    return f"self.{attribute}" in source


# torch.export.save writes contexts as text: the attributes and the counter names, as JSON.


def _to_dumpable(context) -> str:
    attributes, counters = context
    return cache_attributes.to_dumpable([tuple(attributes), counters])


def _from_dumpable(text: str):
    attributes, counters = cache_attributes.from_dumpable(text)
    return cache_attributes.Attributes(*attributes), counters


register_dynamic_cache = register_legacy_caches("pytree.legacy.dynamic_cache", "key_cache")
register_static_cache = register_legacy_caches("pytree.legacy.static_cache", "key_cache")
register_hybrid_cache = register_legacy_caches("pytree.legacy.hybrid_cache", "key_cache")
register_mamba_cache = register_legacy_caches("pytree.legacy.mamba_cache", "conv_states")
