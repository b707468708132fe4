"""A cache object's own attributes as pytree children and context.

Two kinds of caches need this:
  * subclasses of a layered cache that keep state of their own next to ``layers`` (5.x ``MiniMaxCache`` keeps
    its linear-attention states in ``linear_cache``);
  * transformers 4.x model-local caches, plain objects holding lists of tensors (``MambaCache``; 5.x folded
    these into DynamicCache). The 4.57 hybrid caches flatten the same way but are not registered: their models
    fail later, in their own code (registry.py says which).

Rule: an attribute that holds a tensor (directly or inside lists, tuples, dicts) is a child: its tensors are
export inputs. Every other attribute (a flag, a kernel size, a dtype, the layer types, a config: its class and
settings) is structure and goes to the context, frozen into tuples so that the spec stays hashable. The
exception is a batch size kept as an int (``max_batch_size``): that is a per-call value, so it is left out of the
context and read back from the batch dimension of the first tensor on unflatten; otherwise the traced batch would
become a constant.
"""

from __future__ import annotations

import json
import typing

import torch
import torch.utils._pytree as pytree

from ...kit import runtime

#: Int attributes that hold the batch size: rebuilt from the tensors, never kept in the context.
BATCH_ATTRS = ("max_batch_size", "batch_size")
#: Int attributes that count positions, for the caches whose codec is made with them (4.x xLSTMCache's
#: ``seqlen_offset``, which 5.23 keeps in a tensor itself): a per-call value, different at every step. In the
#: context each step would be another structure, so another program; as a child (a one-element int64 tensor) it is
#: an input. Restored as that tensor while tracing (the model adds the new tokens to it, traced; a cache rebuilt so
#: flattens it in the same place) and as the int it was in eager.
COUNTER_ATTRS = ("seqlen_offset",)


def holds_tensor(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple, dict)):
        return any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value))
    return False


#: The frozen form of each config ``freeze`` last saw, by id, and the config of each frozen form: a cache
#: unflattened in the process that flattened it gets the very config object back (xLSTMCache keeps the model's),
#: one loaded from a file an equal one. The configs are kept alive here, so an id is never another object's.
_FROZEN_CONFIGS: dict = {}
_CONFIGS: dict = {}


def _is_config(value) -> bool:
    """A transformers config, without importing transformers (imported already if a config exists)."""
    import sys

    module = sys.modules.get("transformers.configuration_utils")
    return module is not None and isinstance(value, module.PretrainedConfig)


def freeze(value):
    """A hashable, JSON-friendly stand-in for a structural value; ``thaw`` gives back an equal object."""
    if _is_config(value):
        # A config object is no constant to Dynamo (strict export stops: "... is not a constant") nor text for
        # torch.export.save; its class and settings are both. Dynamo cannot follow to_dict: under it, the form
        # computed when the export flattened its inputs, just before (a config may change between exports).
        if torch.compiler.is_compiling() and id(value) in _FROZEN_CONFIGS:
            return _FROZEN_CONFIGS[id(value)]
        cls = type(value)
        frozen = ("config", (f"{cls.__module__}:{cls.__qualname__}", freeze(value.to_dict())))
        _FROZEN_CONFIGS[id(value)] = frozen
        _CONFIGS[frozen] = value
        return frozen
    if isinstance(value, list):
        return ("list", tuple(freeze(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((freeze(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, torch.dtype):
        return ("dtype", str(value).rpartition(".")[2])
    if isinstance(value, torch.device):
        return ("device", str(value))
    return ("value", value)


def thaw(frozen):
    kind, value = frozen
    if kind == "list":
        return [thaw(v) for v in value]
    if kind == "tuple":
        return tuple(thaw(v) for v in value)
    if kind == "dict":
        return {thaw(k): thaw(v) for k, v in value}
    if kind == "dtype":
        return getattr(torch, value)
    if kind == "device":
        return torch.device(value)
    if kind == "config":
        return _CONFIGS[frozen] if frozen in _CONFIGS else _config_from(*value)
    return value


def _config_from(path: str, settings):
    import importlib

    module, _, qualname = path.partition(":")
    cls = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    return cls.from_dict(thaw(settings))


class Attributes(typing.NamedTuple):
    """How an object's attributes were split: names of the children, frozen structure, rebuilt batch sizes.
    A tuple, so that dynamo (strict export) can rebuild it as a constant and JSON can write it."""

    tensors: tuple = ()
    static: tuple = ()
    batch: tuple = ()
    #: Every name in the object's own order. Restoring in that order keeps the rebuilt object's attribute order,
    #: hence its flattening order, even when a list that was empty (structure) later fills with tensors (an
    #: attention layer's key_cache in a prefill): otherwise the program's output cache would flatten in another
    #: order than the eager one it stands for. Empty in contexts written before it existed.
    order: tuple = ()
    #: Counters (COUNTER_ATTRS) kept as ints, children after the tensors'. Empty in contexts written before it.
    counters: tuple = ()


def split(obj, skip=frozenset(), counters=()) -> Attributes:
    return split_items(((name, value) for name, value in vars(obj).items() if name not in skip), counters)


def split_items(items, counter_names=()) -> Attributes:
    """``split`` of (name, value) pairs; ``counter_names``: the attributes that are counters (COUNTER_ATTRS) when
    they hold an int (eager) or a one-element tensor (the same counter, traced)."""
    tensors, static, batch, order, counters = [], [], [], [], []
    for name, value in items:
        order.append(name)
        if name in counter_names and (runtime.is_size(value) or isinstance(value, torch.Tensor) and value.numel() == 1):
            counters.append(name)
        elif holds_tensor(value):
            tensors.append(name)
        elif name in BATCH_ATTRS and runtime.is_size(value):
            # A SymInt when torch flattens a cache it rebuilt while tracing: the same batch size, traced.
            batch.append(name)
        else:
            static.append((name, freeze(value)))
    return Attributes(tuple(tensors), tuple(static), tuple(batch), tuple(order), tuple(counters))


def counter_children(obj, attributes) -> list:
    """The counters' children: each int as a one-element int64 tensor (a traced one as it is)."""
    values = [getattr(obj, name) for name in Attributes(*attributes).counters]
    return [value if isinstance(value, torch.Tensor) else torch.tensor([value], dtype=torch.int64)
            for value in values]


def _counter_value(child):
    """A counter restored: the tensor while tracing (fake, or Dynamo compiling), the int it holds in eager."""
    if torch.compiler.is_compiling() or torch._guards.detect_fake_mode(child) is not None:
        return child
    return int(child.reshape(-1)[0])


def restore(obj, attributes, children) -> None:
    """Sets the attributes ``split`` described on ``obj``: children (traced tensors, then the counters),
    structure, batch sizes."""
    attributes = Attributes(*attributes)  # a plain tuple after a round trip through JSON
    values = {name: thaw(frozen) for name, frozen in attributes.static}
    values.update(zip(attributes.tensors, children))
    # Counters are the last children. The ones before them may be more than the attributes' tensors: a caller
    # passes a layer's keys and values only so a batch size kept as an int can be read back from them.
    kept = len(children) - len(attributes.counters)
    values.update((name, _counter_value(child)) for name, child in zip(attributes.counters, children[kept:]))
    children = children[:kept]
    first = next((leaf for leaf in pytree.tree_leaves(list(children)) if isinstance(leaf, torch.Tensor)), None)
    # No tensor: placeholder leaves (see caches._fill_kv), no batch to read.
    values.update((name, first.shape[0] if first is not None else None) for name in attributes.batch)
    for name in attributes.order or tuple(values):
        setattr(obj, name, values[name])


def make_attribute_codec(cls, patch_id: str, counters=()):
    """flatten/unflatten for a cache that is a plain object of attributes (no ``layers``): children in attribute
    order, keyed by attribute name, then ``counters`` (COUNTER_ATTRS)."""
    from ... import kit

    def flatten(cache):
        kit.count_hit(patch_id)
        attributes = split(cache, counters=counters)
        return [getattr(cache, name) for name in attributes.tensors] + counter_children(cache, attributes), attributes

    def flatten_with_keys(cache):
        children, context = flatten(cache)
        names = context.tensors + context.counters
        return [(pytree.GetAttrKey(name), child) for name, child in zip(names, children)], context

    def unflatten(children, attributes):
        cache = cls.__new__(cls)  # its __init__ wants a config; every attribute comes from the flattened form
        restore(cache, attributes, list(children))
        return cache

    return flatten, unflatten, flatten_with_keys


# torch.export.save writes contexts as text: tuples come back from JSON as lists.


def to_dumpable(context) -> str:
    return json.dumps(context)


def from_dumpable(text: str):
    def tuples(obj):
        return tuple(tuples(x) for x in obj) if isinstance(obj, list) else obj

    return tuples(json.loads(text))
