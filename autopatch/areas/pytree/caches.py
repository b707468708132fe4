"""Pytree registrations for transformers' caches.

Flattened layout of a layered cache (``DynamicCache``, ``StaticCache`` and their subclasses): a dict of
lists, one list per kind of state, each holding that state for every layer that has it, in layer order.

    {"key_cache":   [layer0.keys, layer1.keys, ...],          # attention layers that hold tensors
     "value_cache": [layer0.values, layer1.values, ...],
     "conv_states": [...], "recurrent_states": [...],         # only when linear-attention (mamba-like) layers exist:
                                                              # each state of each (5.23: a dict of states per layer;
                                                              # 5.3-5.12: one tensor per kind)
     "cumulative_length": [...],                              # only for static layers (a tensor there)
     <attribute>: ...}                                        # a subclass's own tensor attributes, by name

    cache_dims = [{0: batch, 2: past}] * num_layers
    dynamic_shapes = {"past_key_values": [cache_dims, cache_dims]}          # keys and values only

Keys and values use the layout of transformers' own ``register_dynamic_cache_export_support``, so existing
specs keep working.  ``EncoderDecoderCache`` flattens to ``[self_attention_cache, cross_attention_cache]``.

The context holds structure only: the cache class, each layer's class, its constructor arguments (sliding
window, max cache length, number of states), which states it holds, a subclass's non-tensor attributes.  A layer
whose constructor wants more than that (5.23's DeepSeek-V4 layers take the model's config) is rebuilt as its
nearest base class that does not, and its own attributes travel as a cache subclass's do.  Never
per-call counters: a traced past length must not become a constant of the graph, and no leaf exists that only
our own dynamic-shapes guesser would mark.  A dynamic sliding layer's ``cumulative_length`` (tokens seen, more
than it holds once past its window) is rebuilt on unflatten from sizes the caller's keys/values shapes already
mark: the key length of the full-attention layers when the cache has any; else the layer's own keys length,
exact inside the window and replaced by the attention mask's count when the model is given one
(sliding_windows.layers).

Inside transformers' own exporters of flat graphs (ONNX, OpenVINO, ExecuTorch) the same leaves come in
transformers' order instead, the one those exporters name the graph's tensors by (exporters.flat_layout).

Every subclass of DynamicCache and StaticCache is registered, wherever it is defined and whenever: an
``__init_subclass__`` hook registers those defined after activation.
"""

from __future__ import annotations

import inspect

import torch

from ... import kit
from ...kit import Skip
from ..exporters import flat_layout
from ..sliding_windows import layers as sliding_layers
from . import cache_attributes, registration

#: transformers.integrations.executorch.register_dynamic_cache_export_support flattens to the same layout
#: but rebuilds every layer as a DynamicLayer: sliding-window layers come back as full layers.
REPLACEABLE = ("transformers.integrations.executorch",)

KV_SLOTS = ("key_cache", "value_cache")
LINEAR_SLOTS = ("conv_states", "recurrent_states")
#: Constructor arguments a layer may need, read from attributes of the same name.
CTOR_ARGS = ("sliding_window", "max_cache_len", "number_of_states")


def _qualified(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _constructible(cls) -> bool:
    """Whether ``cls(**CTOR_ARGS)`` builds the class: every argument its constructor requires is one of them."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return all(p.name in CTOR_ARGS or p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in params)


class LayerKinds:
    """What the codec knows of each layer class, computed outside any trace (dynamo, under strict=True,
    traces flatten and unflatten and cannot trace inspect)."""

    def __init__(self):
        self.by_name: dict = {}
        self.ctor_args: dict = {}
        self.init_takes_values: dict = {}
        #: The class a layer is rebuilt as before its own attributes are set: itself, or, when its constructor
        #: wants more than CTOR_ARGS (5.23's DeepSeek-V4 layers take the model's config), the nearest base class
        #: that does not.
        self.built_as: dict = {}
        #: The attributes that class's constructor and lazy_initialization set (empty when it is the class itself):
        #: the layer's other attributes are its own state, which travels (own_state).
        self.base_attrs: dict = {}

    def learn(self, cls) -> None:
        if cls in self.ctor_args:
            return
        built_as = next((base for base in cls.__mro__ if hasattr(base, "lazy_initialization")
                         and _constructible(base)), cls)
        params = inspect.signature(built_as.__init__).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        self.ctor_args[cls] = tuple(a for a in CTOR_ARGS if a in params or takes_any)
        self.built_as[cls] = built_as
        self.base_attrs[cls] = _base_attrs(built_as, self.ctor_args[cls]) if built_as is not cls else frozenset()
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


def _base_attrs(built_as, ctor_args) -> frozenset:
    """The attributes ``built_as``'s constructor and its first update's lazy_initialization set, on a probe."""
    try:
        probe = built_as(**{name: 1 for name in ctor_args})
    except Exception:  # not rebuilt from a base then: the class's own constructor is called, as before
        return frozenset()
    try:
        probe.lazy_initialization(torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1))
    except Exception:  # 4.56-4.57 take the keys only; a layer of another kind keeps what its constructor set
        try:
            probe.lazy_initialization(torch.zeros(1, 1, 1, 1))
        except Exception:
            pass
    return frozenset(vars(probe))


#: Python int counters a layer of its own kind keeps beside the tensors they count, by attribute: a dict of
#: ints, each the length (dim 1) of the tensor under the same key of another attribute (0 where that holds None).
#: 5.23's DeepSeek-V4 layers count their compressed entries (entry_count) beside them (compressed_kv). Such a
#: count is a per-call value: in the context it would make the traced count a constant of the program, so it
#: is rebuilt from the sizes the tensors' own dynamic shapes mark.
COUNTS_OF = (("entry_count", "compressed_kv"),)


def _counted_length(tensor) -> int:
    return tensor.shape[1] if isinstance(tensor, torch.Tensor) else 0


def _own_state(layer, kinds: LayerKinds):
    """A layer's attributes besides those its rebuilt class sets (see LayerKinds.built_as): tensors as children
    (as cache_attributes splits them), the rest as structure, COUNTS_OF counters as the names of what they count."""
    base = kinds.base_attrs[type(layer)]
    if not base:
        return None
    state = {name: value for name, value in vars(layer).items()
             if name not in base and not name.startswith("_autopatch") and name not in ("dtype", "device")}
    counts = []
    for name, counted in COUNTS_OF:
        value, tensors = state.get(name), state.get(counted)
        if isinstance(value, dict) and isinstance(tensors, dict) and set(value) == set(tensors) and all(
            type(value[key]) is not int or value[key] == _counted_length(tensors[key]) for key in value
        ):
            counts.append((name, counted, tuple(value)))
            del state[name]
    return cache_attributes.split_items(state.items()), tuple(counts)


def _restore_own_state(layer, own, queues) -> None:
    attributes, counts = own
    attributes = cache_attributes.Attributes(*attributes)
    children = [queues[name].pop(0) for name in attributes.tensors]
    cache_attributes.restore(layer, attributes, children)
    for name, counted, keys in counts:
        tensors = getattr(layer, counted)
        setattr(layer, name, {key: _counted_length(tensors[key]) for key in keys})


def _is_linear(layer) -> bool:
    return getattr(layer, "conv_states", _ABSENT) is not _ABSENT


#: Index of the state in a linear-attention layer that keeps one tensor per kind (transformers 5.3-5.12; 5.23
#: keeps a dict per state index).
SINGLE = None


def _linear_states(layer) -> tuple:
    """(conv initialised, recurrent initialised, has previous state, conv kernel size, index) per state."""
    if isinstance(layer.conv_states, dict):
        return tuple(
            (
                bool(layer.is_conv_states_initialized[i]),
                bool(layer.is_recurrent_states_initialized[i]),
                bool(layer.has_previous_state[i]),
                layer.conv_kernel_size[i],
                i,
            )
            for i in range(layer.number_of_states)
        )
    return ((
        bool(layer.is_conv_states_initialized),
        bool(layer.is_recurrent_states_initialized),
        bool(layer.has_previous_state),
        getattr(layer, "conv_kernel_size", None),
        SINGLE,
    ),)


def _state(layer, kind: str, index):
    states = getattr(layer, f"{kind}_states")
    return states if index is SINGLE else states[index]


_ABSENT = object()


#: Python int counters some layers branch on besides their tensors (5.x StaticSlidingWindowLayer: whether its
#: window is full). Traced, such an int is a constant of the program: it goes to the context, so a program is
#: refused (its input spec differs) at any other count, never run with the traced one.
INT_COUNTERS = ("cumulative_length_int",)


#: Tensors some layers keep besides keys and values, by attribute, with the method that initialises the layer for
#: them (None: nothing to initialise). 5.23's DynamicIndexedLayer (DeepSeek-V3.2's sparse-attention indexer, and
#: the models built on it) keeps the indexer's keys, grown by concatenation like the keys: a cache rebuilt
#: without them starts the indexer afresh, and its scores no longer span the past.
LAYER_TENSORS = (("indexer_keys", "lazy_initialization_indexer"), ("indexer_position_ids", None))


def _describe_layer(layer, kinds: LayerKinds):
    cls = type(layer)
    if cls not in kinds.ctor_args:
        kinds.learn(cls)  # a model-local layer class: learnt on first eager flatten
    kwargs = tuple((a, _ctor_value(layer, a)) for a in kinds.ctor_args[cls] if _ctor_value(layer, a) is not None)
    kv = getattr(layer, "keys", None) is not None
    # Static layers keep their position in a tensor: that one is data, and travels as a leaf.
    counter = kv and isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)
    linear = _linear_states(layer) if _is_linear(layer) else ()
    ints = tuple((name, getattr(layer, name)) for name in INT_COUNTERS if type(getattr(layer, name, None)) is int)
    tensors = tuple(name for name, _ in LAYER_TENSORS if isinstance(getattr(layer, name, None), torch.Tensor))
    own = _own_state(layer, kinds)
    if own is None:
        return (_qualified(cls), kwargs, kv, counter, linear, ints, tensors)
    return (_qualified(cls), kwargs, kv, counter, linear, ints, tensors, own)


def _ctor_value(layer, name: str):
    """The constructor argument ``name`` as the layer keeps it. A static sliding layer keeps no window, only
    ``max_cache_len = min(window, max_cache_len)``: passing that as both rebuilds the same layer."""
    value = getattr(layer, name, None)
    if value is None and name == "sliding_window" and getattr(layer, "is_sliding", False):
        value = getattr(layer, "max_cache_len", None)
    return value


def _layer_slots(layer, description) -> list:
    _, _, kv, counter, linear, *_ = description
    slots = []
    if kv:
        slots += [("key_cache", layer.keys), ("value_cache", layer.values)]
    if counter:
        slots.append(("cumulative_length", layer.cumulative_length))
    for conv, rec, _, _, index in linear:
        if conv:
            slots.append(("conv_states", _state(layer, "conv", index)))
        if rec:
            slots.append(("recurrent_states", _state(layer, "recurrent", index)))
    slots += [(name, getattr(layer, name)) for name in _layer_tensors(description)]
    own = _own(description)
    if own is not None:
        slots += [(name, getattr(layer, name)) for name in cache_attributes.Attributes(*own[0]).tensors]
    return slots


def _own(description):
    """The layer's own state (_own_state) a description carries; None for a layer rebuilt as its own class."""
    return description[7] if len(description) > 7 else None


def _layer_tensors(description) -> tuple:
    """The LAYER_TENSORS a layer description names (none in contexts saved before they travelled)."""
    return description[6] if len(description) > 6 else ()


def _fill_layer_tensor(layer, name: str, tensor) -> None:
    initialise = dict(LAYER_TENSORS)[name]
    if initialise is not None and isinstance(tensor, torch.Tensor):
        getattr(layer, initialise)(tensor)  # dtype, device, "initialised" as the layer's first update sets them
    setattr(layer, name, tensor)


def make_layered_codec(cache_cls, kinds: LayerKinds, base_init, base_attrs, patch_id: str):
    """flatten/unflatten for a cache holding ``layers``. Attributes a subclass keeps besides those of the base
    ``Cache`` (``base_attrs``) travel too: the ones holding tensors as further children after the slots, the
    others as context (see cache_attributes)."""

    def context_of(cache):
        replicate = getattr(cache, "layer_class_to_replicate", None)
        if replicate is not None and replicate not in kinds.ctor_args:
            kinds.learn(replicate)
        layers = tuple(_describe_layer(layer, kinds) for layer in cache.layers)
        return (_qualified(replicate) if replicate is not None else None, layers)

    def flatten_own(cache):
        kit.count_hit(patch_id)
        context = context_of(cache)
        grouped: dict = {}
        if kit.in_export():
            _contiguous_inputs(cache.layers)
        for layer, description in zip(cache.layers, context[1]):
            for slot, tensor in _layer_slots(layer, description):
                grouped.setdefault(slot, []).append(tensor)
        # Keys and values always lead, so that the layout matches transformers' own for plain caches.
        names = tuple(n for n in KV_SLOTS if n in grouped or not grouped) + tuple(
            n for n in grouped if n not in KV_SLOTS
        )
        extras = cache_attributes.split(cache, base_attrs)
        clash = set(names) & set(extras.tensors)
        if clash:
            raise ValueError(f"autopatch: {type(cache).__name__} has attributes named like cache slots: {sorted(clash)}")
        children = [grouped.get(n, []) for n in names] + [getattr(cache, n) for n in extras.tensors]
        return children, (names, context, extras)

    def flatten_keyed(cache):
        """(children, context, keys): the agent's layout, or transformers' inside its flat-graph exporters."""
        children, context = flatten_own(cache)
        if flat_layout.flat_graph_layout():
            return flat_layout.to_walk(cache, children, context)
        from torch.utils._pytree import MappingKey

        return children, context, [MappingKey(n) for n in context[0] + context[2].tensors]

    def flatten(cache):
        children, context, _ = flatten_keyed(cache)
        return children, context

    def flatten_with_keys(cache):
        children, context, keys = flatten_keyed(cache)
        if flat_layout.is_walk(context):
            return flat_layout.keyed(children, keys), context
        return list(zip(keys, children)), context

    def unflatten(children, context):
        if flat_layout.is_walk(context):
            return flat_layout.unflatten_walk(children, context, unflatten_own)
        return unflatten_own(children, context)

    def unflatten_own(children, context):
        names, (replicate, layers), extras = context
        children = list(children)
        queues = {n: list(child) for n, child in zip(names, children)}
        built = []
        for description in layers:
            layer_name, kwargs, kv, counter, linear, *ints = description[:6]  # ints: absent from older contexts
            cls = kinds.by_name[layer_name]
            own = _own(description)
            if own is None:
                layer = cls(**dict(kwargs))
            else:  # its constructor wants more than the layer keeps (a config): its base's, then its own state
                layer = cls.__new__(cls)
                kinds.built_as[cls].__init__(layer, **dict(kwargs))
            for name, value in (ints[0] if ints else ()):
                setattr(layer, name, value)
            if kv:
                _fill_kv(layer, queues["key_cache"].pop(0), queues["value_cache"].pop(0), kinds.init_takes_values[cls])
            if counter:
                layer.cumulative_length = queues["cumulative_length"].pop(0)
            for conv, rec, previous, kernel, index in linear:
                if conv:
                    _fill_state(layer, "conv", index, queues["conv_states"].pop(0))
                    _set(layer, "conv_kernel_size", index, kernel)
                if rec:
                    _fill_state(layer, "recurrent", index, queues["recurrent_states"].pop(0))
                _set(layer, "has_previous_state", index, previous)
            for name in _layer_tensors(description):
                _fill_layer_tensor(layer, name, queues[name].pop(0))
            if own is not None:
                _restore_own_state(layer, own, queues)
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
        cache_attributes.restore(cache, extras, children[len(names):])
        return cache

    def flatten_spec(cache, spec):
        with flat_layout.layout_of(spec.context):
            return flatten(cache)[0]

    return flatten, unflatten, flatten_with_keys, flatten_spec


def _contiguous_inputs(layers) -> None:
    """Gives an export contiguous keys and values. A sliding layer past its window holds a slice of a longer
    tensor; torch.export traces a view input with symbolic strides and guards that it is *not* contiguous, so
    the program refuses every cache inside the window (whose keys are whole tensors). The copy has the same
    values and replaces the view in the caller's layer, once: torch.export flattens its inputs several times and
    matches them by identity. Real tensors only: traced ones are the program's own."""
    for layer in layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if type(tensor) is torch.Tensor and not tensor.is_contiguous():
                setattr(layer, name, tensor.contiguous())


def _fill_kv(layer, keys, values, init_takes_values: bool) -> None:
    """Puts traced tensors in a fresh layer the way the layer's own first update would. Leaves that are not
    tensors are placed as they are: some tools rebuild a spec's structure with placeholder leaves (ExecuTorch's
    emitter unflattens the input spec with ints to describe it), and unflattening must not raise for them."""
    if isinstance(keys, torch.Tensor):
        if init_takes_values:
            layer.lazy_initialization(keys, values)
        else:
            layer.lazy_initialization(keys)
    layer.keys, layer.values = keys, values
    layer.is_initialized = True


def _fill_state(layer, kind: str, index, tensor) -> None:
    _set(layer, f"{kind}_states", index, tensor)
    _set(layer, f"is_{kind}_states_initialized", index, True)
    if not isinstance(tensor, torch.Tensor):  # a placeholder leaf (see _fill_kv)
        return
    layer.dtype, layer.device = tensor.dtype, tensor.device
    if index is SINGLE and kind == "conv":
        layer.max_batch_size = tensor.shape[0]  # what the layer's own lazy_initialization reads off its state


def _set(layer, name: str, index, value) -> None:
    if index is SINGLE:
        setattr(layer, name, value)
    else:
        getattr(layer, name)[index] = value


def _is_dynamic_sliding(description) -> bool:
    _, kwargs, kv, counter, *_ = description
    return kv and not counter and any(name == "sliding_window" for name, _ in kwargs)


def _full_length(layers, descriptions):
    for layer, description in zip(layers, descriptions):
        if description[2] and not _is_dynamic_sliding(description) and not description[3]:
            return _length(layer)
    return None


def _length(layer):
    """The keys' length; None for a placeholder leaf (see _fill_kv)."""
    return layer.keys.shape[-2] if isinstance(layer.keys, torch.Tensor) else None


def _rebuild_sliding_lengths(layers, descriptions) -> None:
    """A sliding layer's count of seen tokens, from sizes the caller's dynamic shapes already mark: the keys of
    a full-attention layer (they hold every token), else the layer's own keys (exact inside the window, where
    the layer still holds every token it has seen; see sliding_windows.layers)."""
    full = _full_length(layers, descriptions)
    for layer, description in zip(layers, descriptions):
        if _is_dynamic_sliding(description) and isinstance(layer.keys, torch.Tensor):
            layer.cumulative_length = full if full is not None else _length(layer)
            if full is None:
                setattr(layer, sliding_layers.SEEN_FROM_KEYS, True)


def _register(cls, codec):
    """``codec``: (flatten, unflatten, flatten_with_keys[, flatten_spec]). Without a flatten_spec of its own a cache
    flattens by a spec into its usual children, so that torch.fx goes on into them (an EncoderDecoderCache's two
    caches follow their own specs)."""
    flatten, unflatten, flatten_with_keys, *own_spec = codec
    flatten_spec = own_spec[0] if own_spec else (lambda obj, spec: flatten(obj)[0])
    return registration.register(
        cls, flatten, unflatten, flatten_with_keys, cache_attributes.to_dumpable, cache_attributes.from_dumpable,
        replaceable=REPLACEABLE, flatten_spec=flatten_spec,
    )


def _eligible(cls) -> bool:
    # Quantized and offloaded caches hold state outside their layers' tensors (quantized blocks, CPU copies).
    return "Quantized" not in cls.__name__ and "Offloaded" not in cls.__name__


def _subclasses(root) -> list:
    """``root`` and every subclass of it loaded so far, whatever module defines it, root first."""
    found, todo = [root], [root]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return [cls for cls in found if cls is root or _eligible(cls)]


def register_layered_caches(root_name: str):
    """An installer for ``root_name`` and all its subclasses: those loaded already (the 4.57 SlidingWindowCache
    variants in cache_utils, a model's own such as MiniMaxCache, a user's) and, through an ``__init_subclass__``
    hook on the root, those defined later. Pytree registration is per exact class."""

    def install(record, module, name, root):
        if not hasattr(module, "Cache") or "layers" not in inspect.signature(module.Cache.__init__).parameters:
            raise Skip(f"this transformers has no layered {root_name} (Cache(layers=...) appeared in 4.56)")
        kinds = LayerKinds()
        kinds.learn_module(module)
        probe = module.Cache.__new__(module.Cache)
        module.Cache.__init__(probe, layers=[])
        base_attrs = frozenset(vars(probe))
        init = module.Cache.__init__
        undo, detail = register_with_subclasses(
            root, lambda cls: _register(cls, make_layered_codec(cls, kinds, init, base_attrs, record.spec.id))
        )
        # Caches of sliding layers only take their seen count from the exported module's attention mask.
        stop_hooking = kit.on_export_start(sliding_layers.hook_exported_module)
        return (lambda: stop_hooking() + undo()), detail

    return install


def register_with_subclasses(root, register):
    """Registers ``root`` and its subclasses, those loaded now and (through an ``__init_subclass__`` hook on the
    root) those defined later, with ``register(cls) -> (undo, detail)``. Returns an installer's ``(undo,
    detail)``. All or nothing for the root: if it is skipped, nothing stays registered; a subclass skipped only
    says why in the detail."""
    undos, details, registered = [], [], []

    def undo_all() -> str:
        return "; ".join(problem for problem in (u() for u in reversed(undos)) if problem)

    def register_one(cls) -> None:
        undo, detail = register(cls)
        undos.append(undo)
        registered.append(cls.__name__)
        if detail:
            details.append(detail if cls is root else f"{cls.__name__}: {detail}")

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


def _hook_subclasses(root, register_one):
    """Registers every subclass of ``root`` defined from now on (a model module imported later); returns the undo.
    A subclass that cannot be registered is logged, never raised: the user's class statement must succeed."""
    previous = vars(root).get("__init_subclass__")

    def init_subclass(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(root, cls).__init_subclass__(**kwargs)
        if _eligible(cls):
            try:
                register_one(cls)
            except Exception as exc:
                import logging

                logging.getLogger("autopatch").warning(
                    "autopatch: %s: cannot register %s.%s: %s", root.__name__, cls.__module__, cls.__qualname__, exc
                )

    hook = classmethod(init_subclass)
    root.__init_subclass__ = hook

    def undo() -> str:
        if vars(root).get("__init_subclass__") is not hook:
            return f"{root.__name__}.__init_subclass__ was replaced on top of autopatch's hook; left as is"
        if previous is None:
            del root.__init_subclass__
        else:
            root.__init_subclass__ = previous
        return ""

    return undo


register_dynamic_cache = register_layered_caches("DynamicCache")
register_static_cache = register_layered_caches("StaticCache")


def register_encoder_decoder_cache(record, module, name, cache_cls):
    """EncoderDecoderCache -> [self_attention_cache, cross_attention_cache]; each is itself a registered cache."""
    patch_id = record.spec.id

    def flatten(cache):
        kit.count_hit(patch_id)
        return [cache.self_attention_cache, cache.cross_attention_cache], None

    def flatten_with_keys(cache):
        from torch.utils._pytree import GetAttrKey

        children, context = flatten(cache)
        return [(GetAttrKey("self_attention_cache"), children[0]), (GetAttrKey("cross_attention_cache"), children[1])], context

    def unflatten(children, context):
        if any(not isinstance(getattr(layer, "keys", None), (torch.Tensor, type(None)))
               for child in children for layer in getattr(child, "layers", ())):
            # Placeholder leaves (see _fill_kv): __init__ would read their lengths. The structure, as attributes.
            cache = cache_cls.__new__(cache_cls)
            cache.self_attention_cache, cache.cross_attention_cache = children
            cache.is_updated = {}
            return cache
        return cache_cls(children[0], children[1])

    return _register(cache_cls, (flatten, unflatten, flatten_with_keys))


def register_attribute_cache(record, module, name, cache_cls):
    """transformers 4.x model-local caches (``MambaCache``): plain objects of tensor lists, flattened by
    attribute (cache_attributes). Hits count for the row that installs it."""
    return _register(cache_cls, cache_attributes.make_attribute_codec(cache_cls, record.spec.id))


def register_counted_attribute_cache(record, module, name, cache_cls):
    """``register_attribute_cache`` for a cache that counts positions in a Python int (4.x xLSTMCache): the
    counter a child (cache_attributes.COUNTER_ATTRS)."""
    codec = cache_attributes.make_attribute_codec(cache_cls, record.spec.id, counters=cache_attributes.COUNTER_ATTRS)
    return _register(cache_cls, codec)
