"""Pytree registrations for transformers' caches.

Flattened layout of a layered cache (``DynamicCache``, ``StaticCache`` and their subclasses): a dict of
lists, one list per kind of state, each holding that state for every layer that has it, in layer order.

    {"key_cache":   [layer0.keys, layer1.keys, ...],          # attention layers that hold tensors
     "value_cache": [layer0.values, layer1.values, ...],
     "conv_states": [...], "recurrent_states": [...],         # only when linear-attention (mamba-like) layers exist
     "cumulative_length": [...]}                              # only for static layers (a tensor there)

    cache_dims = [{0: batch, 2: past}] * num_layers
    dynamic_shapes = {"past_key_values": [cache_dims, cache_dims]}          # keys and values only

Keys and values use the layout of transformers' own ``register_dynamic_cache_export_support``, so existing
specs keep working.  ``EncoderDecoderCache`` flattens to ``[self_attention_cache, cross_attention_cache]``.

The context holds structure only: the cache class, each layer's class, its constructor arguments (sliding
window, max cache length, number of states) and which states it holds.  Never per-call counters: a traced past
length must not become a constant of the graph.  A dynamic sliding layer's ``cumulative_length`` is rebuilt on
unflatten from traced tensors: the key length of the full-attention layers when the cache has any (exact past
the window too), else its own key length (exact below the window).  A cache whose sliding layers are past their
window with no full-attention layer to recover the length from is refused with a clear error.
"""

from __future__ import annotations

import inspect

import torch

from .. import scope
from ..install import Skip
from . import pytree_registration

#: transformers.integrations.executorch.register_dynamic_cache_export_support flattens to the same layout
#: but rebuilds every layer as a DynamicLayer: sliding-window layers come back as full layers.
REPLACEABLE = ("transformers.integrations.executorch",)

KV_SLOTS = ("key_cache", "value_cache")
LINEAR_SLOTS = ("conv_states", "recurrent_states")
#: Constructor arguments a layer may need, read from attributes of the same name.
CTOR_ARGS = ("sliding_window", "max_cache_len", "number_of_states")


def _qualified(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class LayerKinds:
    """What the codec knows of each layer class, computed outside any trace (dynamo, under strict=True,
    traces flatten and unflatten and cannot trace inspect)."""

    def __init__(self):
        self.by_name: dict = {}
        self.ctor_args: dict = {}
        self.init_takes_values: dict = {}

    def learn(self, cls) -> None:
        if cls in self.ctor_args:
            return
        params = inspect.signature(cls.__init__).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        self.ctor_args[cls] = tuple(a for a in CTOR_ARGS if a in params or takes_any)
        init = getattr(cls, "lazy_initialization", None)
        # transformers 4.56-4.57: lazy_initialization(self, key_states); 5.x: (self, key_states, value_states).
        self.init_takes_values[cls] = init is not None and len(inspect.signature(init).parameters) >= 3
        self.by_name[_qualified(cls)] = cls

    def learn_module(self, module) -> None:
        for obj in vars(module).values():
            if isinstance(obj, type) and (hasattr(obj, "lazy_initialization") or obj.__name__ == "DummyLayer"):
                try:
                    self.learn(obj)
                except (TypeError, ValueError):
                    pass


def _is_linear(layer) -> bool:
    return isinstance(getattr(layer, "conv_states", None), dict)


def _describe_layer(layer, kinds: LayerKinds):
    cls = type(layer)
    if cls not in kinds.ctor_args:
        kinds.learn(cls)  # a model-local layer class: learnt on first eager flatten
    kwargs = tuple((a, getattr(layer, a)) for a in kinds.ctor_args[cls] if getattr(layer, a, None) is not None)
    kv = getattr(layer, "keys", None) is not None
    # Static layers keep their position in a tensor: that one is data, and travels as a leaf.
    counter = kv and isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)
    linear = ()
    if _is_linear(layer):
        linear = tuple(
            (
                bool(layer.is_conv_states_initialized[i]),
                bool(layer.is_recurrent_states_initialized[i]),
                bool(layer.has_previous_state[i]),
                layer.conv_kernel_size[i],
            )
            for i in range(layer.number_of_states)
        )
    return (_qualified(cls), kwargs, kv, counter, linear)


def _layer_slots(layer, description) -> list:
    _, _, kv, counter, linear = description
    slots = []
    if kv:
        slots += [("key_cache", layer.keys), ("value_cache", layer.values)]
    if counter:
        slots.append(("cumulative_length", layer.cumulative_length))
    for i, (conv, rec, _, _) in enumerate(linear):
        if conv:
            slots.append(("conv_states", layer.conv_states[i]))
        if rec:
            slots.append(("recurrent_states", layer.recurrent_states[i]))
    return slots


def make_layered_codec(cache_cls, kinds: LayerKinds, base_init, patch_id: str):
    """flatten/unflatten for a cache holding ``layers``."""

    def context_of(cache):
        replicate = getattr(cache, "layer_class_to_replicate", None)
        if replicate is not None and replicate not in kinds.ctor_args:
            kinds.learn(replicate)
        layers = tuple(_describe_layer(layer, kinds) for layer in cache.layers)
        _check_sliding_lengths(cache, layers)
        return (_qualified(replicate) if replicate is not None else None, layers)

    def flatten(cache):
        scope.count_hit(patch_id)
        context = context_of(cache)
        grouped: dict = {}
        for layer, description in zip(cache.layers, context[1]):
            for slot, tensor in _layer_slots(layer, description):
                grouped.setdefault(slot, []).append(tensor)
        # Keys and values always lead, so that the layout matches transformers' own for plain caches.
        names = tuple(n for n in KV_SLOTS if n in grouped or not grouped) + tuple(
            n for n in grouped if n not in KV_SLOTS
        )
        return [grouped.get(n, []) for n in names], (names, context)

    def flatten_with_keys(cache):
        from torch.utils._pytree import MappingKey

        children, context = flatten(cache)
        return [(MappingKey(n), child) for n, child in zip(context[0], children)], context

    def unflatten(children, context):
        names, (replicate, layers) = context
        queues = {n: list(child) for n, child in zip(names, children)}
        built = []
        for layer_name, kwargs, kv, counter, linear in layers:
            cls = kinds.by_name[layer_name]
            layer = cls(**dict(kwargs))
            if kv:
                _fill_kv(layer, queues["key_cache"].pop(0), queues["value_cache"].pop(0), kinds.init_takes_values[cls])
            if counter:
                layer.cumulative_length = queues["cumulative_length"].pop(0)
            for i, (conv, rec, previous, kernel) in enumerate(linear):
                if conv:
                    _fill_state(layer, "conv", i, queues["conv_states"].pop(0))
                    layer.conv_kernel_size[i] = kernel
                if rec:
                    _fill_state(layer, "recurrent", i, queues["recurrent_states"].pop(0))
                layer.has_previous_state[i] = previous
            built.append(layer)
        _rebuild_sliding_lengths(built, layers)
        cache = cache_cls.__new__(cache_cls)
        # The base Cache initialiser: subclasses' own __init__ want a config we do not have and do not need.
        # It takes layers or a class to replicate, not both; a cache that grew layers by replication has both.
        if built or replicate is None:
            base_init(cache, layers=built)
        else:
            base_init(cache, layer_class_to_replicate=kinds.by_name[replicate])
        cache.layer_class_to_replicate = kinds.by_name[replicate] if replicate is not None else None
        return cache

    return flatten, unflatten, flatten_with_keys


def _fill_kv(layer, keys, values, init_takes_values: bool) -> None:
    """Puts traced tensors in a fresh layer the way the layer's own first update would."""
    if init_takes_values:
        layer.lazy_initialization(keys, values)
    else:
        layer.lazy_initialization(keys)
    layer.keys, layer.values = keys, values
    layer.is_initialized = True


def _fill_state(layer, kind: str, index: int, tensor) -> None:
    getattr(layer, f"{kind}_states")[index] = tensor
    getattr(layer, f"is_{kind}_states_initialized")[index] = True
    layer.dtype, layer.device = tensor.dtype, tensor.device


def _is_dynamic_sliding(description) -> bool:
    _, kwargs, kv, counter, _ = description
    return kv and not counter and any(name == "sliding_window" for name, _ in kwargs)


def _full_length(layers, descriptions):
    for layer, description in zip(layers, descriptions):
        if description[2] and not _is_dynamic_sliding(description) and not description[3]:
            return layer.keys.shape[-2]
    return None


def _rebuild_sliding_lengths(layers, descriptions) -> None:
    full = _full_length(layers, descriptions)
    for layer, description in zip(layers, descriptions):
        if _is_dynamic_sliding(description):
            layer.cumulative_length = full if full is not None else layer.keys.shape[-2]


def _check_sliding_lengths(cache, descriptions) -> None:
    """Eager inputs only: refuses a cache that the rebuilt lengths would misrepresent."""
    full = _full_length(cache.layers, descriptions)
    for layer, description in zip(cache.layers, descriptions):
        if not _is_dynamic_sliding(description):
            continue
        actual = getattr(layer, "cumulative_length", None)
        if type(actual) is not int or type(layer.keys.shape[-2]) is not int:
            continue  # traced values: nothing to compare without adding guards
        rebuilt = full if full is not None else layer.keys.shape[-2]
        if actual != rebuilt:
            raise ValueError(
                f"autopatch: cannot flatten this {type(cache).__name__}: a sliding-window layer has seen {actual} "
                f"positions but holds {layer.keys.shape[-2]} and the cache has no full-attention layer to recover "
                "the length from (export the cache before it passes its window, or use a model with full layers)"
            )


def _register_layered(module, cache_cls, patch_id: str, kinds: LayerKinds):
    flatten, unflatten, flatten_with_keys = make_layered_codec(cache_cls, kinds, module.Cache.__init__, patch_id)
    return pytree_registration.register(
        cache_cls, flatten, unflatten, flatten_with_keys, _to_dumpable, _from_dumpable, replaceable=REPLACEABLE
    )


def _to_dumpable(context) -> str:
    import json

    return json.dumps(context)


def _from_dumpable(text: str):
    import json

    def tuples(obj):
        return tuple(tuples(x) for x in obj) if isinstance(obj, list) else obj

    return tuples(json.loads(text))


def _layered_family(module, root_name: str):
    """``root_name`` and its subclasses defined in the same module, e.g. StaticCache and, on 4.57, its
    SlidingWindowCache/HybridCache variants. Pytree registration is per exact class."""
    root = getattr(module, root_name)
    if not hasattr(module, "Cache") or "layers" not in inspect.signature(module.Cache.__init__).parameters:
        raise Skip(f"this transformers has no layered {root_name} (Cache(layers=...) appeared in 4.56)")
    # dict.fromkeys: a module may bind one class under two names (5.x keeps SlidingWindowCache = StaticCache).
    return list(dict.fromkeys(
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, root) and obj.__module__ == module.__name__
        and "Quantized" not in obj.__name__ and "Offloaded" not in obj.__name__
    ))


def register_layered_caches(root_name: str, patch_id: str):
    """An installer for ``root_name`` and its same-module subclasses."""

    def install(module, name, root):
        kinds = LayerKinds()
        kinds.learn_module(module)
        undos, details, registered = [], [], []

        def undo_all() -> str:
            return "; ".join(problem for problem in (u() for u in reversed(undos)) if problem)

        for cls in sorted(_layered_family(module, root_name), key=lambda c: c is not root):
            try:
                undo, detail = _register_layered(module, cls, patch_id, kinds)
            except Skip as exc:
                if cls is root:
                    undo_all()  # all or nothing for the root class
                    raise
                details.append(str(exc))
                continue
            undos.append(undo)
            registered.append(cls.__name__)
            if detail:
                details.append(detail)
        if len(registered) > 1:
            details.insert(0, f"registered {', '.join(registered)}")
        return undo_all, "; ".join(details)

    return install


register_dynamic_cache = register_layered_caches("DynamicCache", "pytree.dynamic_cache")
register_static_cache = register_layered_caches("StaticCache", "pytree.static_cache")


def register_encoder_decoder_cache(module, name, cache_cls):
    """EncoderDecoderCache -> [self_attention_cache, cross_attention_cache]; each is itself a registered cache."""
    patch_id = "pytree.encoder_decoder_cache"

    def flatten(cache):
        scope.count_hit(patch_id)
        return [cache.self_attention_cache, cache.cross_attention_cache], None

    def flatten_with_keys(cache):
        from torch.utils._pytree import GetAttrKey

        children, context = flatten(cache)
        return [(GetAttrKey("self_attention_cache"), children[0]), (GetAttrKey("cross_attention_cache"), children[1])], context

    def unflatten(children, context):
        return cache_cls(children[0], children[1])

    return pytree_registration.register(
        cache_cls, flatten, unflatten, flatten_with_keys, _to_dumpable, _from_dumpable, replaceable=REPLACEABLE
    )


def register_mamba_cache(module, name, cache_cls):
    """transformers 4.56-4.57 ``MambaCache`` (models/mamba): {"conv_states": [...], "ssm_states": [...]}.
    The batch size is not context: it is read back from the tensors."""
    patch_id = "pytree.mamba_cache"
    sizes = ("intermediate_size", "ssm_state_size", "conv_kernel_size")

    def flatten(cache):
        scope.count_hit(patch_id)
        context = (tuple(getattr(cache, s) for s in sizes), str(cache._dtype))
        return [list(cache.conv_states), list(cache.ssm_states)], context

    def flatten_with_keys(cache):
        from torch.utils._pytree import MappingKey

        children, context = flatten(cache)
        return [(MappingKey("conv_states"), children[0]), (MappingKey("ssm_states"), children[1])], context

    def unflatten(children, context):
        values, dtype_name = context
        cache = cache_cls.__new__(cache_cls)
        for attr, value in zip(sizes, values):
            setattr(cache, attr, value)
        cache.conv_states, cache.ssm_states = list(children[0]), list(children[1])
        cache._dtype = getattr(torch, dtype_name.rpartition(".")[2])
        cache.max_batch_size = cache.conv_states[0].shape[0] if cache.conv_states else 0
        return cache

    return pytree_registration.register(
        cache_cls, flatten, unflatten, flatten_with_keys, _to_dumpable, _from_dumpable, replaceable=REPLACEABLE
    )
