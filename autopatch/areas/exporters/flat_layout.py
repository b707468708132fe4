"""Caches inside transformers' own exporters: transformers' leaf order and names.

transformers' exporters for flat graphs (ONNX, OpenVINO, ExecuTorch) name a graph's inputs and outputs by their
own walk of the objects (``past_key_values.layers.0.keys``, ``...layers.0.values``, ``...layers.1.keys``: each
layer's tensors in attribute order, layer after layer) and hand those names to the graph *by position*; their
runners then feed and read tensors by name.  A graph's positions follow the pytree flattening in force.  The
agent's own layout (``{"key_cache": [every layer], "value_cache": [every layer]}``, the one users write
``dynamic_shapes`` for) would put layer 1's keys where the name says layer 0's values: same shapes, wrong numbers.

So the convention is decided per export, once:
  * inside a transformers exporter whose artifact is a flat graph (every format but ``dynamo``), a cache flattens
    to transformers' walk: its tensors in the walk's order, under transformers' key paths (the position in that
    walk).  The pytree context records it (``WALK``), so a spec written there unflattens the same way anywhere
    later (the runners rebuild outputs from it), and flattening *by* that spec follows it (``layout_of``).  The
    rest of the codec (what a layer holds, what is rebuilt from sizes) is unchanged: the walk is only a
    permutation of the agent's leaves (plus constants the walk names).  Where no one-to-one permutation exists,
    the cache is flattened by transformers' own function for that export (``DEFERRED``), and the export's report
    says so.
  * everywhere else, including ``DynamoExporter``, whose artifact is an ``ExportedProgram`` run through pytree
    on both sides, the agent's layout.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

import torch
import torch.utils._pytree as pytree

from ... import kit
from ...kit import install_always_on

#: The row whose hits ``to_walk`` counts (its installer sets the flag that leads there).
PATCH_ID = "transformers.exporters.flat_graph_layout"

WALK = "transformers-walk"
DEFERRED = "transformers-own"

#: True while a transformers exporter of a flat-graph format runs in this context.
_FLAT_GRAPH = contextvars.ContextVar("autopatch_flat_graph", default=False)


def flat_graph_layout() -> bool:
    return _FLAT_GRAPH.get()


@contextlib.contextmanager
def layout_of(spec_context):
    """The layout a spec was written with, for flattening by that spec (torch.fx's ``tree_flatten_spec``, as
    transformers' ExecuTorch runner flattens a caller's inputs), wherever it runs."""
    token = _FLAT_GRAPH.set(is_walk(spec_context))
    try:
        yield
    finally:
        _FLAT_GRAPH.reset(token)


# Read by flatten functions, which dynamo traces under strict=True: evaluated at trace time.
flat_graph_layout._dynamo_marked_constant = True


def install_flat_graph_layout(record, owner, name, original):
    """Installer for ``HfExporter._export_component``, through which both ``export`` and ``export_for_generation``
    pass, before any torch.export starts (so no export-scoped router would see it): always on, it sets the
    layout flag for the exporters of flat graphs and does nothing else."""

    @functools.wraps(original)
    def export_component(self, *args, **kwargs):
        if str(getattr(self, "export_format", "dynamo")) == "dynamo":
            return original(self, *args, **kwargs)
        token = _FLAT_GRAPH.set(True)
        try:
            return original(self, *args, **kwargs)
        finally:
            _FLAT_GRAPH.reset(token)

    return install_always_on(record, owner, name, original, export_component)


def _walk(obj) -> list:
    """(dotted path, tensor) in transformers' order: its own function, so that names and positions agree."""
    from transformers.exporters.utils import get_leaf_tensors

    return list(get_leaf_tensors(vars(obj)).items())


def to_walk(cache, children, context):
    """The agent's ``(children, context)`` of ``cache`` as transformers' walk: ``(tensors, context, paths)``.
    ``children`` are lists of tensors, then single tensors (a subclass's own attributes).  A tensor the walk
    finds that the agent's layout does not carry (5.23's ``_sliding_window_tensor``, a constant of each sliding
    layer) is a leaf too, put back at its path on unflatten: transformers names it a graph input."""
    shapes = tuple(len(child) if isinstance(child, list) else -1 for child in children)
    ours = [t for child in children for t in (child if isinstance(child, list) else [child])]
    walked = _walk(cache)
    position = {id(t): i for i, t in enumerate(ours)}
    order = tuple(position.get(id(t), -1) for _, t in walked)
    if len(position) != len(ours) or sorted(i for i in order if i >= 0) != list(range(len(ours))):
        return _defer(cache)
    kit.count_hit(PATCH_ID)
    paths = tuple(path for path, _ in walked)
    return [t for _, t in walked], (WALK, order, shapes, paths, context), paths


def unflatten_walk(children, context, unflatten_own):
    """The inverse of ``to_walk`` (or of transformers' own flatten, for a deferred cache)."""
    if context[0] == DEFERRED:
        from transformers.exporters import exporter_dynamo

        return exporter_dynamo._pytree_unflatten(children, _thaw(context[1]))
    _, order, shapes, paths, inner = context
    children = list(children)
    ours = [None] * sum(1 for index in order if index >= 0)
    for tensor, index in zip(children, order):
        if index >= 0:
            ours[index] = tensor
    rebuilt, start = [], 0
    for size in shapes:
        take = 1 if size < 0 else size
        rebuilt.append(ours[start] if size < 0 else ours[start:start + size])
        start += take
    cache = unflatten_own(rebuilt, inner)
    for tensor, index, path in zip(children, order, paths):
        if index < 0:
            _set_path(cache, path, tensor)
    rebuilt_paths = tuple(path for path, _ in _walk(cache))
    placeholders = not all(isinstance(child, torch.Tensor) for child in children)  # a spec's structure, described
    if rebuilt_paths != tuple(paths) and not placeholders:
        # Names are taken from the rebuilt object inside the trace, positions from the caller's: they must agree.
        raise ValueError(
            f"autopatch: a rebuilt {type(cache).__name__} walks as {list(rebuilt_paths)[:6]}..., not as the "
            f"cache it stands for ({list(paths)[:6]}...): transformers' names would not match the graph's tensors"
        )
    return cache


def _child(obj, part: str):
    if isinstance(obj, (list, tuple)):
        return obj[int(part)]
    if isinstance(obj, dict):
        return obj[next(key for key in obj if str(key) == part)]
    return getattr(obj, part)


def _set_path(obj, path: str, value) -> None:
    *parents, last = path.split(".")
    for part in parents:
        obj = _child(obj, part)
    if isinstance(obj, list):
        obj[int(last)] = value
    elif isinstance(obj, dict):
        obj[next(key for key in obj if str(key) == last)] = value
    else:
        setattr(obj, last, value)


def _defer(cache):
    """transformers' own flatten for this cache (a layout the walk cannot permute into): never a guess."""
    from transformers.exporters import exporter_dynamo

    message = (
        f"autopatch: {type(cache).__name__} does not map one-to-one onto transformers' names; flattened by "
        "transformers' own function for this export"
    )
    kit.note(message)
    tensors, inner = exporter_dynamo._pytree_flatten(cache)
    paths = [f"{i}" for i in range(len(tensors))]
    return tensors, (DEFERRED, _freeze(inner)), paths


def _freeze(value):
    """transformers' JSON-native context as text: a pytree context must hash and compare, and dump to JSON."""
    import json

    return json.dumps(value, sort_keys=True)


def _thaw(text):
    import json

    return json.loads(text)


def keyed(tensors, paths):
    """Key paths as transformers' own registration gives them: the leaf's position (a dotted path is no valid
    attribute source for dynamo). The dotted names are what transformers' exporters name the graph's tensors."""
    return [(pytree.SequenceKey(i), tensor) for i, tensor in enumerate(tensors)]


def is_walk(context) -> bool:
    return isinstance(context, tuple) and len(context) > 0 and context[0] in (WALK, DEFERRED)
