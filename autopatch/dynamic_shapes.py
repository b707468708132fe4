"""``guess_dynamic_shapes``: the ``dynamic_shapes`` argument of torch.export, inferred from two input sets.

Writing ``dynamic_shapes`` by hand for nested inputs (caches inside kwargs) is the most common export pain.
Give two sets of inputs that differ in every size that should be dynamic; every tensor dimension that differs
between them is marked ``Dim.DYNAMIC``, the others stay static.  The result follows the layout torch.export
expects: dicts and lists as in the inputs, and for a registered class (a cache) the list of its flattened
children, which is the layout autopatch's registrations document.
"""

from __future__ import annotations


def guess_dynamic_shapes(inputs_a, inputs_b):
    """``inputs_a``/``inputs_b``: a kwargs dict, or an args tuple, or ``(args, kwargs)`` pairs (then a pair
    ``(args_shapes, kwargs_shapes)`` is returned, to pass as a tuple for args and a dict for kwargs)."""
    import torch
    import torch.utils._pytree as pytree

    leaves_a, spec_a = pytree.tree_flatten(inputs_a)
    leaves_b, spec_b = pytree.tree_flatten(_keywords_in_order_of(inputs_a, inputs_b))
    if spec_a != spec_b:
        raise ValueError(
            "guess_dynamic_shapes: the two input sets differ in structure, not only in sizes "
            f"({spec_a.num_leaves} vs {spec_b.num_leaves} leaves); give inputs built the same way"
        )
    shapes = []
    for a, b in zip(leaves_a, leaves_b):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.dim() != b.dim():
                raise ValueError(f"guess_dynamic_shapes: a tensor has rank {a.dim()} in one set and {b.dim()} in the other")
            dims = {i: torch.export.Dim.DYNAMIC for i, (x, y) in enumerate(zip(a.shape, b.shape)) if x != y}
            shapes.append(dims or None)
        else:
            shapes.append(None)
    return _rebuild(spec_a, iter(shapes))


def _keywords_in_order_of(inputs_a, inputs_b):
    """``inputs_b`` with its keyword inputs in ``inputs_a``'s order when both sets have the same keywords: the
    model pairs keywords by name, so two sets built by different code are the same structure (pytree would call
    ``{x, y}`` and ``{y, x}`` different)."""
    def reordered(a, b):
        return {key: b[key] for key in a} if isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b) else b

    if isinstance(inputs_a, tuple) and isinstance(inputs_b, tuple) and len(inputs_a) == len(inputs_b) == 2 \
            and isinstance(inputs_a[1], dict):  # an (args, kwargs) pair
        return inputs_b[0], reordered(inputs_a[1], inputs_b[1])
    return reordered(inputs_a, inputs_b)


def _rebuild(spec, shapes):
    """The nested structure torch.export wants for ``dynamic_shapes``: containers kept, classes as lists."""
    if spec.is_leaf():
        return next(shapes)
    # TreeSpec.children() replaced the children_specs attribute (deprecated in recent torch).
    child_specs = spec.children() if callable(getattr(spec, "children", None)) else spec.children_specs
    children = [_rebuild(child, shapes) for child in child_specs]
    if spec.type is dict:
        return dict(zip(spec.context, children))
    if spec.type is tuple:
        return tuple(children)
    return list(children)


def fit_to_signature(model, shapes):
    """torch.export wants dynamic_shapes keyed like forward's parameters: keyword inputs that forward takes
    through ``**kwargs`` go under that parameter's name."""
    import inspect

    if not isinstance(shapes, dict):
        return shapes
    params = inspect.signature(model.forward).parameters
    var_kw = next((p.name for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    if var_kw is None or all(k in params for k in shapes):
        return shapes
    named = {k: v for k, v in shapes.items() if k in params}
    named[var_kw] = {k: v for k, v in shapes.items() if k not in params}
    return named
