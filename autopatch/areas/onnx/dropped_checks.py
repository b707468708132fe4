"""The conditions of the run-time checks ``torch.onnx.export`` drops, dropped with them.

ONNX has no assertion, so before translating, ``torch.onnx.export(dynamo=True)`` erases the program's check nodes
(``_assert_scalar``, ``_assert_async``, ``sym_constrain_range_for_size``...; ``_fx_passes.remove_assertion_nodes``),
but not the nodes that computed what they checked, which are still translated, for nothing, and can stop the
conversion:

- ``torch._check_tensor_all(cond)`` (transformers 5.x states its image-token checks so, and so do the agent's
  vision rows) leaves ``_assert_async(_is_all_true(cond))``, and torchlib has no ``_is_all_true``: "No ONNX function
  found", every vision-language model.
- torch.export states the range of an unbacked size as a check, ``u1 <= 147573952589676412896``, whose bound is a
  product of other sizes' bounds: with the "unbounded" size bound (2**63 - 2) times 16 patches, it no longer fits
  in an int64 ("OverflowError: Python int too large to convert to C long"; Idefics2, Idefics3 and SmolVLM
  prefills on transformers 5.12).

* ``torch.onnx.dropped_check_conditions``: while the current thread exports, after torch erases the checks, the
  nodes left without a user by that (and, in turn, their inputs left without one) are erased too, if pure: the
  comparisons and size arithmetic that only fed a check. Nothing any output depends on is touched, so the ONNX
  model computes the same values, and no longer computes the dropped conditions.
"""

from __future__ import annotations

import functools

from ... import kit

DROPPED_CHECK_CONDITIONS = "torch.onnx.dropped_check_conditions"


def _unused(node) -> bool:
    return node.op == "call_function" and not node.users and not node.is_impure()


def _erase_orphaned(graph, before: set) -> int:
    """Erases the pure call nodes without users that had some before (in ``before`` are those that had none), then
    their inputs left without users, in turn. Returns how many."""
    pending = [node for node in graph.nodes if _unused(node) and node not in before]
    erased = set()
    while pending:
        node = pending.pop()
        if node in erased or not _unused(node):  # met twice, or still used
            continue
        inputs = node.all_input_nodes
        graph.erase_node(node)
        erased.add(node)
        pending.extend(inputs)
    return len(erased)


def install_dropped_check_conditions(record, owner, name, original):
    """Installer of ``torch.onnx.dropped_check_conditions`` on ``_fx_passes.remove_assertion_nodes`` (module level,
    looked up by ``_core`` at each call)."""

    @functools.wraps(original)
    def remove_assertion_nodes(graph_module, *args, **kwargs):
        if not kit.in_export():
            return original(graph_module, *args, **kwargs)
        import torch

        modules = [m for m in graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
        unused_before = {m: {node for node in m.graph.nodes if _unused(node)} for m in modules}
        result = original(graph_module, *args, **kwargs)
        for module in modules:
            erased = _erase_orphaned(module.graph, unused_before[module])
            if erased:
                for _ in range(erased):
                    kit.count_hit(DROPPED_CHECK_CONDITIONS)
                module.recompile()
        return result

    return kit.install_always_on(record, owner, name, original, remove_assertion_nodes)
