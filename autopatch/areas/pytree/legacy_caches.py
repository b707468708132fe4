"""Pytree registrations for the caches of transformers 4.48-4.55, before 4.56's ``Cache(layers=...)``.

Two generations, told apart by probing the module, never by version alone:

* 4.48-4.53: plain objects of tensor lists (below);
* 4.54-4.55: ``Cache`` holds ``layers`` of ``CacheLayerMixin`` objects, built by ``Cache.__init__`` from a
  config (it calls ``inspect.signature``, which dynamo cannot trace under ``strict=True``).  Flattened to the
  same ``[key_cache, value_cache]`` (one tensor per layer that holds one); the context keeps each layer's class
  and its other attributes, and the cache's own.  Unflatten builds the objects with ``__new__`` and sets their
  attributes: no ``__init__`` runs.  The batch size inside ``layer_init_kwargs`` is read back from the tensors.

4.48-4.53 in detail.

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

from ... import kit
from ...kit import Skip
from . import cache_attributes, registration
from .caches import register_with_subclasses

#: Owners of registrations known to be wrong for export (see the module docstring).
REPLACEABLE = ("transformers.cache_utils", "transformers.integrations.executorch")
#: Per-call counters: left out of the context, rebuilt from the key length on unflatten.
COUNTERS = ("_seen_tokens",)


def make_legacy_codec(cls, patch_id: str):
    # transformers 4.48's Cache is a torch.nn.Module: the module machinery's own attributes are not the cache's.
    module_attrs = frozenset(vars(torch.nn.Module())) if issubclass(cls, torch.nn.Module) else frozenset()
    skip = module_attrs | frozenset(COUNTERS)

    def flatten(cache):
        kit.count_hit(patch_id)
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


def _register(cls, codec):
    flatten, unflatten, flatten_with_keys = codec
    previous_fx = _remove_fx_spec(cls)
    try:
        undo, detail = registration.register(
            cls, flatten, unflatten, flatten_with_keys,
            # JSON of nested tuples; restore() takes plain tuples for Attributes.
            cache_attributes.to_dumpable, cache_attributes.from_dumpable, replaceable=REPLACEABLE,
        )
    except Exception:
        _restore_fx_spec(cls, previous_fx)
        raise
    if previous_fx is not None:
        removed = "removed its torch.fx flatten spec (torch.fx then follows this flattening)"
        detail = f"{detail}; {removed}" if detail else removed

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


#: 4.54-4.55 layers: the attributes that travel as children; every other one is structure.
KV = frozenset({"keys", "values"})
#: Keys of a cache's ``layer_init_kwargs`` that hold the batch size (a per-call value).
BATCH_KWARGS = ("batch_size", "max_batch_size")


def make_layer_object_codec(cls, patch_id: str):
    layer_classes: dict = {}  # qualified name -> class, learnt on eager flattens (dynamo cannot import by name)

    def name_of(layer_cls) -> str:
        name = f"{layer_cls.__module__}:{layer_cls.__qualname__}"
        layer_classes[name] = layer_cls
        return name

    def flatten(cache):
        kit.count_hit(patch_id)
        keys, values, layers = [], [], []
        for layer in cache.layers:
            attributes = cache_attributes.split(layer, KV)
            if attributes.tensors:
                raise TypeError(
                    f"autopatch cannot flatten {type(layer).__name__}: it holds tensors besides keys and values "
                    f"({', '.join(attributes.tensors)})"
                )
            kv = getattr(layer, "keys", None) is not None
            if kv:
                keys.append(layer.keys)
                values.append(layer.values)
            layers.append((name_of(type(layer)), attributes, kv))
        own = cache_attributes.split(cache, frozenset({"layers", "layer_classes", "layer_init_kwargs"}))
        if own.tensors:
            raise TypeError(f"autopatch cannot flatten {type(cache).__name__}: tensors in {', '.join(own.tensors)}")
        chosen = cache.layer_classes
        classes = tuple(name_of(c) for c in chosen) if isinstance(chosen, (list, tuple)) else name_of(chosen)
        init = dict(getattr(cache, "layer_init_kwargs", {}))
        batch = tuple(k for k in BATCH_KWARGS if k in init)
        init = cache_attributes.freeze({k: v for k, v in init.items() if k not in batch})
        return [keys, values], (tuple(layers), own, classes, init, batch)

    def flatten_with_keys(cache):
        children, context = flatten(cache)
        return [(torch.utils._pytree.MappingKey(n), c) for n, c in zip(("key_cache", "value_cache"), children)], context

    def unflatten(children, context):
        layers, own, classes, init, batch = context
        keys, values = (list(child) for child in children)
        first = keys[0] if keys else None
        built = []
        for name, attributes, kv in layers:
            layer = layer_classes[name].__new__(layer_classes[name])
            pair = [keys.pop(0), values.pop(0)] if kv else []
            cache_attributes.restore(layer, attributes, pair)  # pair only feeds a batch size kept as an int
            layer.keys, layer.values = pair if kv else (None, None)
            built.append(layer)
        cache = cls.__new__(cls)
        cache.layers = built
        if isinstance(classes, tuple):
            cache.layer_classes = [layer_classes[n] for n in classes]
        else:
            cache.layer_classes = layer_classes[classes]
        cache.layer_init_kwargs = cache_attributes.thaw(init)
        cache.layer_init_kwargs.update((k, first.shape[0]) for k in batch if first is not None)
        cache_attributes.restore(cache, own, [])
        return cache

    return flatten, unflatten, flatten_with_keys


def register_legacy_caches(probe_attribute: str):
    """An installer for a pre-4.56 cache class and every subclass (cache_utils' own, a model's, those defined
    later). ``probe_attribute`` is the list a fresh cache of that generation holds: the class is probed, never
    assumed, since the same names exist with other layouts in other versions."""

    def install(record, module, name, root):
        import inspect

        # 4.54-4.55: Cache(layer_classes=...); 4.56 replaced it with Cache(layers=...) (caches).
        layered = "layer_classes" in inspect.signature(module.Cache.__init__).parameters
        if not layered and (hasattr(module, "CacheLayerMixin") or not _has_list(root, probe_attribute)):
            raise Skip(f"{name} here is neither the {probe_attribute}-list cache of transformers 4.48-4.53 nor the "
                       "CacheLayerMixin cache of 4.54-4.55")
        if root.__module__ != module.__name__:
            # 4.54-4.55 re-export MambaCache from modeling_mamba with a deprecation: the model-cache row's class.
            raise Skip(f"{name} is {root.__module__}.{root.__qualname__} here, not a class of {module.__name__}")
        make_codec = make_layer_object_codec if layered else make_legacy_codec
        return register_with_subclasses(root, lambda cls: _register(cls, make_codec(cls, record.spec.id)))

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


register_dynamic_cache = register_legacy_caches("key_cache")
register_static_cache = register_legacy_caches("key_cache")
register_hybrid_cache = register_legacy_caches("key_cache")
register_mamba_cache = register_legacy_caches("conv_states")
