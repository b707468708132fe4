"""The program's constant outputs in ``torch.onnx.export`` (``onnx/rows.py`` says which and why).

A model may return plain numbers beside its tensors (4.x Switch Transformers' router losses are the int 0 when no
labels are given). ``torch.export`` keeps such a leaf as a constant of the program: the graph's return holds the
number itself, not a node. torch.onnx already leaves ``None`` out of the ONNX graph's outputs (a constant too), but
reads every other returned item as a node and stopped on the number. Numbers are left out the same way: the graph
returns the tensors, in order, and the program's output spec still holds the constants, which is how
``autopatch.onnx_inputs.run`` and the output names (``output_names.py``) put them back in their places.
"""

from __future__ import annotations

from ...kit import calls_original, note


class _ReturnedNodes:
    """The output node as ``_handle_output_node`` reads it (its name and its returned items), constants left out."""

    def __init__(self, node, returned):
        self.name, self.op, self.target, self.args, self.kwargs = node.name, node.op, node.target, (returned,), {}


@calls_original
def returned_nodes_only(original, node, node_name_to_values, graph_like):
    """``_handle_output_node`` with the returned numbers (int, float, bool) left out, as torch leaves out None;
    the call is unchanged when there are none."""
    items = node.args[0]
    if not isinstance(items, (tuple, list)):
        items = (items,)
    numbers = [item for item in items if isinstance(item, (bool, int, float))]
    if not numbers:
        return original(node, node_name_to_values, graph_like)
    note(f"torch.onnx.export: the program returns {len(numbers)} constant number(s) ({', '.join(map(repr, numbers))}) "
         "that are not ONNX graph outputs; the exported program's output spec holds them")
    kept = tuple(item for item in items if not isinstance(item, (bool, int, float)))
    return original(_ReturnedNodes(node, kept), node_name_to_values, graph_like)
