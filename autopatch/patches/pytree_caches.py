"""Pytree registrations for transformers' caches.

Flattened layout of ``DynamicCache`` (write ``dynamic_shapes`` against this; it is also the layout
transformers' own ``register_dynamic_cache_export_support`` uses, so existing specs keep working):

    {"key_cache": [layer0.keys, layer1.keys, ...], "value_cache": [layer0.values, layer1.values, ...]}

    dynamic_shapes = {"past_key_values": [[{0: batch, 2: past}] * n_layers, [{0: batch, 2: past}] * n_layers]}

Only initialised layers contribute tensors.  The context holds structure only: the class of every layer, its
sliding window, whether it is initialised, and the class the cache replicates for new layers.  It never holds
per-call counters (a traced past length must not become a constant of the graph); a sliding layer's
``cumulative_length`` is rebuilt from its key length on unflatten.
"""

from __future__ import annotations

import inspect

from .. import scope
from ..install import Skip
from . import pytree_registration

PATCH_ID = "pytree.dynamic_cache"
#: transformers.integrations.executorch.register_dynamic_cache_export_support flattens to the same layout
#: but rebuilds every layer as a DynamicLayer: sliding-window layers come back as full layers.
REPLACEABLE = ("transformers.integrations.executorch",)


def _qualified(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def register_dynamic_cache(owner, name, cache_cls):
    full_layer = getattr(owner, "DynamicLayer", None)
    sliding_layer = getattr(owner, "DynamicSlidingWindowLayer", None)
    if full_layer is None or not hasattr(cache_cls(), "layers"):
        raise Skip("this transformers has no layered DynamicCache (needs DynamicLayer and DynamicCache.layers)")
    supported = tuple(c for c in (full_layer, sliding_layer) if c is not None)
    # Everything unflatten needs is looked up here, once: under strict=True dynamo traces unflatten, and it
    # cannot trace inspect.signature or module lookups by name.
    by_name = {_qualified(c): c for c in supported}
    init_takes_values = {c: _init_takes_values(c) for c in supported}

    def describe(layer):
        if type(layer) not in supported:
            raise TypeError(
                f"autopatch {PATCH_ID}: cannot flatten a DynamicCache holding a {type(layer).__name__} layer; "
                f"supported layers: {', '.join(c.__name__ for c in supported)}"
            )
        window = getattr(layer, "sliding_window", None) if type(layer) is sliding_layer else None
        return (_qualified(type(layer)), window, layer.keys is not None)

    def context_of(cache):
        replicate = getattr(cache, "layer_class_to_replicate", None)
        return (_qualified(replicate) if replicate is not None else None, tuple(describe(l) for l in cache.layers))

    def children_of(cache):
        filled = [layer for layer in cache.layers if layer.keys is not None]
        return [[layer.keys for layer in filled], [layer.values for layer in filled]]

    def flatten(cache):
        scope.count_hit(PATCH_ID)
        return children_of(cache), context_of(cache)

    def flatten_with_keys(cache):
        from torch.utils._pytree import MappingKey

        children, context = flatten(cache)
        return [(MappingKey("key_cache"), children[0]), (MappingKey("value_cache"), children[1])], context

    def unflatten(children, context):
        keys, values = children
        replicate, layers = context
        cache = cache_cls()
        cache.layer_class_to_replicate = by_name[replicate] if replicate is not None else None
        pairs = iter(zip(keys, values))
        cache.layers = []
        for layer_name, window, filled in layers:
            layer_cls = by_name[layer_name]
            layer = layer_cls(sliding_window=window) if window is not None else layer_cls()
            if filled:
                _fill(layer, *next(pairs), init_takes_values[layer_cls])
            cache.layers.append(layer)
        return cache

    def to_dumpable(context):
        import json

        replicate, layers = context
        return json.dumps({"replicate": replicate, "layers": [list(layer) for layer in layers]})

    def from_dumpable(text):
        import json

        data = json.loads(text)
        return data["replicate"], tuple(tuple(layer) for layer in data["layers"])

    return pytree_registration.register(
        cache_cls, flatten, unflatten, flatten_with_keys, to_dumpable, from_dumpable, replaceable=REPLACEABLE
    )


def _init_takes_values(layer_cls) -> bool:
    # transformers 4.56-4.57: lazy_initialization(self, key_states); 5.x: (self, key_states, value_states).
    return len(inspect.signature(layer_cls.lazy_initialization).parameters) >= 3


def _fill(layer, keys, values, init_takes_values: bool) -> None:
    """Puts traced tensors in a fresh layer the way the layer's own first update would."""
    if init_takes_values:
        layer.lazy_initialization(keys, values)
    else:
        layer.lazy_initialization(keys)
    layer.keys, layer.values = keys, values
    if hasattr(layer, "cumulative_length"):
        # Counters come from the tensors, never from the context: below the window the cumulative length is
        # the number of cached positions.
        layer.cumulative_length = keys.shape[-2]
