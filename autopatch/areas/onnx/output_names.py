"""Readable, stable output names for ONNX models that ``torch.onnx.export`` writes.

``torch.onnx.export(dynamo=True)`` names a graph's inputs by their pytree paths (``input_ids``,
``past_key_values_key_cache_0``, ...) but its outputs by the FX node that made them (``linear_14``, ``cat_3``,
``cat_7``): a runtime feeding a decode step's cache back cannot tell which output is which layer's keys without
reading the flattening order.  When the caller gives no ``output_names``, the outputs are named the same way as
the inputs, by their paths in the model's output (``logits``, ``past_key_values_key_cache_0`` ...); an output
whose path is also an input's name (the cache a decode step returns) says ``present`` where the input says
``past_key_values`` or ``cache_params`` (``present_key_cache_0``, ``present_conv_states_0``).  The same names on transformers
4.x and 5.x: the paths come from the agent's cache layout, which is the same on both.

Names given by the caller are kept as they are; where a path cannot be read (a container the agent cannot
rebuild from placeholders) the model keeps torch's names.
"""

from __future__ import annotations

import functools

from ... import kit
from ...kit import install_always_on, returned_leaves

def install_output_names(record, owner, name, original):
    """Installer for ``torch.onnx._internal.exporter._core.export`` (what ``torch.onnx.export(dynamo=True)``
    calls): always in place, it renames only inside this thread's export and only when no names were given."""

    @functools.wraps(original)
    def export(*args, **kwargs):
        program = original(*args, **kwargs)
        if kit.in_export() and not kwargs.get("output_names"):
            names = output_names(program)
            if names is not None:
                from torch.onnx._internal.exporter import _ir_passes

                _ir_passes.rename_outputs(program.model, names)
                _restore_input_names(program.model)
                kit.count_hit(record.spec.id)
        return program

    return install_always_on(record, owner, name, original, export)


def output_names(onnx_program) -> list[str] | None:
    """The outputs' names from their paths, or None when they cannot all be named (then torch's stay)."""
    import torch
    import torch.utils._pytree as pytree

    exported = onnx_program.exported_program
    outputs = list(onnx_program.model.graph.outputs)
    if exported is None or exported.call_spec.out_spec is None:
        return None
    spec = exported.call_spec.out_spec
    returned = returned_leaves(exported)  # the graph does not return the program's constant leaves
    if spec.num_leaves != len(returned) or sum(returned) != len(outputs):
        return None
    try:
        # Placeholders stand in for the tensors: only the structure, and so the paths, matter here.
        rebuilt = pytree.tree_unflatten([torch.zeros(1, 1, 1, 1) for _ in range(spec.num_leaves)], spec)
        paths = [path for (path, _), kept in zip(pytree.tree_flatten_with_path(rebuilt)[0], returned) if kept]
    except Exception:  # noqa: BLE001 - a container that cannot be rebuilt this way keeps torch's names
        return None
    if len(paths) != len(outputs):
        return None
    taken = {_base(value.name) for value in onnx_program.model.graph.inputs}
    names = [_unique_name(_parts(path), taken) for path in paths]
    return names if len(set(names)) == len(names) else None


#: torch renames an input that a graph returns unchanged (a seq2seq step's cross-attention cache) to
#: ``<name>_orig`` and gives ``<name>`` to the output: once the output is named by its own path, the input gets
#: its name back, so that a cache's inputs are named the same whether or not the step changes them.
_PASSED_THROUGH = "_orig"


def _base(name: str) -> str:
    return name[: -len(_PASSED_THROUGH)] if name.endswith(_PASSED_THROUGH) else name


def _restore_input_names(model) -> None:
    used = {value.name for node in model.graph for value in node.outputs}
    used |= {value.name for value in model.graph.outputs} | {value.name for value in model.graph.inputs}
    for value in model.graph.inputs:
        base = _base(value.name)
        if base != value.name and base not in used:
            used.add(base)
            value.name = base


def _parts(path) -> list[str]:
    """``(MappingKey('past_key_values'), MappingKey('key_cache'), SequenceKey(0))`` ->
    ``['past_key_values', 'key_cache', '0']``: the pieces torch joins with ``_`` to name an input."""
    parts = []
    for key in path:
        for attribute in ("key", "idx", "name"):
            if hasattr(key, attribute):
                parts.append(str(getattr(key, attribute)))
                break
        else:
            parts.append(str(key))
    return parts or ["output"]


def _unique_name(parts: list[str], inputs: set) -> str:
    """The output's own path, unless an input has that name (the cache a step takes and returns): then
    ``present`` in place of the path's first piece (``past_key_values``, ``cache_params``), as runtimes name a
    step's new cache."""
    name = "_".join(parts)
    if name not in inputs:
        return name
    return "_".join(["present", *parts[1:]]) if len(parts) > 1 else "output_" + name
