"""Every patch autopatch ships: the ordered index of the areas' tables.  Each area (``autopatch/areas/<area>/``)
declares its rows in its own ``rows.py``, next to the code they install; read a row there: what is patched, where,
when, and why.

Two tables:
  EXPORT_ENTRY_POINTS  the functions whose call turns the export scope on for the calling thread. They are
                       part of the agent: installed whenever any patch is selected, never selected by name.
  PATCHES              the patches users select with EXPORT_PATCHES: every area's rows, in the order of AREAS
                       (rows that patch the same function are installed in this order).
"""

from __future__ import annotations

from .areas.bounds import TORCH
from .areas.pytree import rows as pytree
from .areas.exporters import rows as exporters
from .areas.sliding_windows import rows as sliding_windows
from .areas.torch_shapes import rows as torch_shapes
from .areas.distributions import rows as distributions
from .areas.rope import rows as rope
from .areas.state_space import rows as state_space
from .areas.generation import rows as generation
from .areas.positions import rows as positions
from .areas.text_masks import rows as text_masks
from .areas.local_attention import rows as local_attention
from .areas.codebooks import rows as codebooks
from .areas.moe import rows as moe
from .areas.onnx import rows as onnx
from .areas.output_capturing import rows as output_capturing
from .areas.vision import rows as vision
from .areas.packed_vision import rows as packed_vision
from .areas.fp16_clamp import rows as fp16_clamp
from .areas.weight_writes import rows as weight_writes
from .spec import PatchSpec

EXPORT_ENTRY_POINTS = (
    PatchSpec(
        id="agent.scope.export",
        family="agent",
        trigger="torch.export._trace",
        target="_export",
        mode="entry",
        requires=TORCH,
        reason="Every torch.export path (export, draft_export, torch.onnx.export(dynamo=True), transformers' "
        "exporters) ends here, looked up at call time, so aliases bound before activation are covered too.",
    ),
    PatchSpec(
        id="agent.scope.public_export",
        family="agent",
        trigger="torch.export",
        target="export",
        mode="entry",
        requires=TORCH,
        reason="Starts the scope before torch.export.export's own argument processing.",
    ),
    PatchSpec(
        id="agent.scope.draft_export",
        family="agent",
        trigger="torch.export",
        target="draft_export",
        mode="entry",
        requires=TORCH,
        reason="draft_export re-exports several times; one scope covers them all.",
    ),
    PatchSpec(
        id="agent.scope.onnx_export",
        family="agent",
        trigger="torch.onnx",
        target="export",
        mode="entry",
        requires=TORCH,
        reason="torch.onnx.export(dynamo=True) runs the model before and after torch.export; one scope covers it.",
    ),
)

#: The areas, in the order their rows are installed and listed.
AREAS = (pytree, exporters, sliding_windows, torch_shapes, distributions, rope, state_space, generation, positions,
         text_masks, local_attention, codebooks, moe, onnx, output_capturing, vision, packed_vision, weight_writes,
         fp16_clamp)

PATCHES = tuple(row for area in AREAS for row in area.ROWS)


def markdown_table() -> str:
    """The README's "Shipped patches" table: each area's SUMMARIES, in the order of AREAS (tests/test_readme.py
    keeps the README in step). A line's family column is that of the rows it names."""
    import fnmatch

    lines = ["| id | family | what and why |", "| --- | --- | --- |"]
    for area in AREAS:
        for names, text in area.SUMMARIES:
            rows = [row for row in area.ROWS if any(fnmatch.fnmatchcase(row.id, name) for name in names)]
            families = ", ".join(dict.fromkeys(row.family for row in rows))
            lines.append(f"| {_id_cell(names, len(rows))} | {families} | {text} |")
    return "\n".join(lines)


def _id_cell(names, count: int) -> str:
    """``a.b.c``, ``.d`` for ids beside the first (same prefix); a lone glob says how many rows it names."""
    if len(names) == 1 and "*" in names[0]:
        return f"`{names[0]}` ({count} patches)"
    prefix = names[0].rpartition(".")[0]
    return ", ".join(f"`{name}`" if i == 0 or name.rpartition(".")[0] != prefix else f"`.{name.rpartition('.')[2]}`"
                     for i, name in enumerate(names))
