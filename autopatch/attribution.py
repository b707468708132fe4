"""Graph attribution: which patches produced which nodes of an exported program, and an account of it."""

from __future__ import annotations

import inspect

from .diffs import format_diff
from .scope import ANNOTATION


def involved_in_graph(records, graph):
    """``[(record, [nodes])]`` for route patches whose replacement produced nodes of ``graph``: nodes the
    router annotated (``node.meta["custom"]``), else nodes whose stack trace points into the replacement."""
    pairs = []
    nodes = list(graph.nodes)
    for record in records:
        spec = record.spec
        if spec.mode == "entry":
            continue
        key = ANNOTATION + spec.id
        annotated = [n for n in nodes if key in (n.meta.get("custom") or {})]
        if annotated:
            pairs.append((record, annotated))
            continue
        try:
            target = spec.resolve_replacement()
            lines, start = inspect.getsourcelines(target)
            filename = inspect.getsourcefile(target)
        except (OSError, TypeError, ImportError, AttributeError):
            continue
        end = start + len(lines)
        hit = [n for n in nodes if _in_range(n.meta.get("stack_trace") or "", filename, start, end)]
        if hit:
            pairs.append((record, hit))
    return pairs


def patches_in_program(program) -> dict:
    """The patches whose replacements made nodes of the program (routers annotate every node they make:
    ``node.meta["custom"]["autopatch:<id>"]``), with their node counts, most first: where to look first when the
    program and eager disagree."""
    counts: dict = {}
    for node in getattr(getattr(program, "graph", None), "nodes", ()):
        for patch_id in annotated_by(node):
            counts[patch_id] = counts.get(patch_id, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def annotated_by(node) -> list:
    """The ids of the patches whose routers made ``node``."""
    return [key[len(ANNOTATION):] for key in node.meta.get("custom") or {} if key.startswith(ANNOTATION)]


def _in_range(stack_trace: str, filename: str, start: int, end: int) -> bool:
    marker = f'File "{filename}", line '
    for line in stack_trace.splitlines():
        line = line.strip()
        if line.startswith(marker):
            try:
                number = int(line[len(marker):].split(",")[0])
            except ValueError:
                continue
            if start <= number < end:
                return True
    return False


def make_report(pairs, format: str = "raw") -> str:
    """A readable account of ``involved_in_graph`` pairs, each patch with its nodes and its diff."""
    if format not in ("raw", "md"):
        raise ValueError(f"make_report: unknown format {format!r}; valid: raw, md")
    out = []
    for record, nodes in pairs:
        names = ", ".join(n.name for n in nodes)
        diff = format_diff(record.spec)
        if format == "md":
            out.append(f"### `{record.spec.id}`\n\nnodes: {names}\n\n```diff\n{diff}```\n")
        else:
            out.append(f"== {record.spec.id}: {len(nodes)} node(s): {names}\n{diff}")
    return "\n".join(out) if out else "no patch produced nodes in this graph\n"
