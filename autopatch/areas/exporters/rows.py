"""The rows of this area. transformers' own exporters (5.x ``transformers.exporters``): their leaf order and names, and
eager's sliding layers inside them.
"""

from __future__ import annotations

from ...spec import PatchSpec

ROWS = (
    PatchSpec(
        id="transformers.exporters.flat_graph_layout",
        family="pytree",
        trigger="transformers.exporters.base",
        target="HfExporter._export_component",
        mode="install",
        replacement="autopatch.areas.exporters.flat_layout:install_flat_graph_layout",
        requires=("transformers>=5.0", "torch>=2.9"),
        reason="transformers' ONNX, OpenVINO and ExecuTorch exporters name graph inputs and outputs by their own "
        "walk of a cache (layers.0.keys, layers.0.values, layers.1.keys...) and pass the names by position: inside "
        "them a cache flattens in that order under those paths, else keys and values would be wired to each "
        "other's names (wrong numbers, silently). DynamoExporter and plain torch.export keep the agent's layout.",
    ),
    PatchSpec(
        id="transformers.exporters.sliding_layers_as_eager",
        family="transformers",
        trigger="transformers.exporters.exporter_dynamo",
        target="apply_patches",
        mode="install",
        replacement="autopatch.areas.exporters.sliding_as_eager:install_sliding_layers_as_eager",
        requires=("transformers>=5.0", "torch>=2.9"),
        # apply_patches as the installer was written against (5.2x): it rebuilds its list of stand-ins.
        fingerprints=("cf66aa12b6c5",),
        reason="transformers' exporters trace a sliding-window layer as a full one, so their program reads the keys "
        "it is given as every token seen: a cache filled past its window (as eager leaves it) gives wrong numbers, "
        "silently. Where the agent's sliding rows are in place, those three stand-ins are withheld for the export: "
        "the program takes and returns eager's caches, right in every regime.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('transformers.exporters.flat_graph_layout',),
        "transformers' own ONNX, OpenVINO and ExecuTorch exporters (5.x `transformers.exporters`) name a "
        "graph's tensors by their own walk of a cache (`past_key_values.layers.0.keys`, "
        '`...layers.0.values`, `...layers.1.keys`) and hand the names over by position. Inside them a '
        'cache flattens in that order (the rest of the codec unchanged); elsewhere, `DynamoExporter` '
        "included, the agent's layout. Without it the agent's keys-then-values order wires layer 1's keys "
        "to the name of layer 0's values: the graph runs and answers wrong. See [With transformers' own "
        'exporters](#with-transformers-own-exporters).',
    ),
    (
        ('transformers.exporters.sliding_layers_as_eager',),
        "transformers' own exporters trace a sliding-window layer as a full one (three stand-ins of "
        'theirs), so their program reads the keys it is given as every token seen: a cache past its '
        "window, as eager leaves it, answers wrong, silently. Where the agent's sliding rows (next) are "
        "in place, those stand-ins are withheld for the export and the program takes and returns eager's "
        "caches. See [With transformers' own exporters](#with-transformers-own-exporters).",
    ),
)
