"""The ``rewrite`` family: control flow that torch.export cannot trace, rewritten from the function's own source.

``if tensor_condition:`` needs the condition's value while tracing, a data-dependent guard export refuses
("Could not guard on data-dependent expression"). ``torch.cond`` traces both branches and picks one at run
time. ``control_flow.rewrite_tensor_conditions`` turns such ``if`` statements into ``torch.cond`` calls;
``substitute_expressions`` replaces named expressions or statements only (the transformers rows use it);
``runtime`` holds the small helpers the rewritten code calls; ``auto`` finds the function whose ``if`` stopped
an export, or whose ``min``/``max`` of sizes left the program guarding a size relation (EXPORT_PATCHES_REWRITE=auto),
and says which rewrite would fix an export's error (``suggest_rewrite``, for ``autopatch diagnose``). A rewrite patch (``mode="rewrite"`` in the registry) runs its rewriter
once, when its module is imported, and routes to the result inside export only.
"""

from .control_flow import NotRewritable, rewrite_tensor_conditions, substitute_expressions

__all__ = ["NotRewritable", "rewrite_tensor_conditions", "substitute_expressions"]
