"""Graph attribution: which patches produced which nodes of an exported program, and an account of it."""

from __future__ import annotations

import inspect

from .diffs import format_diff


def involved_in_graph(records, graph):
    """``[(record, [nodes])]`` for route patches whose replacement produced nodes of ``graph``: nodes the
    router annotated (``node.meta["custom"]``), else nodes whose stack trace points into the replacement."""
    pairs = []
    nodes = list(graph.nodes)
    for record in records:
        spec = record.spec
        if spec.mode == "entry":
            continue
        key = f"autopatch:{spec.id}"
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
