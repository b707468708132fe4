"""Registering a class as a pytree node so that it can be undone, with a policy for registrations by others.

Policy: a class nobody registered is registered.  A registration by a party we know to be wrong for export
(listed in ``replaceable``) is replaced and put back on undo.  Any other registration belongs to someone who
chose it (a user, a library) and is kept: the patch is SKIPPED and status names the owner.
"""

from __future__ import annotations

import torch.utils._pytree as pytree

from ...kit import Skip


def owner_of(cls) -> str | None:
    """The module whose flatten function is registered for ``cls``, or None when it is not a pytree node."""
    node = pytree.SUPPORTED_NODES.get(cls)
    if node is None:
        return None
    return getattr(node.flatten_fn, "__module__", None) or "unknown"


def register(cls, flatten, unflatten, flatten_with_keys, to_dumpable, from_dumpable, replaceable=(),
             flatten_spec=None):
    """Registers ``cls``; returns ``(undo, detail)`` as installers do. ``flatten_spec(obj, spec) -> children``,
    when given, is torch.fx's flatten *by a spec* (``fx_pytree.tree_flatten_spec``, which runners of saved programs
    use): it must give the children in the layout the spec was written with."""
    previous = None
    detail = ""
    owner = owner_of(cls)
    if owner is not None:
        if owner not in replaceable:
            raise Skip(f"{cls.__name__} is already a pytree node registered by {owner}; kept that registration")
        previous = _snapshot(cls)
        pytree._deregister_pytree_node(cls)
        detail = f"replaced the registration by {owner} (restored on disable)"
    pytree.register_pytree_node(
        cls,
        flatten,
        unflatten,
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        flatten_with_keys_fn=flatten_with_keys,
        to_dumpable_context=to_dumpable,
        from_dumpable_context=from_dumpable,
    )

    undo_spec = _register_flatten_spec(cls, flatten_spec) if flatten_spec is not None else (lambda: None)

    def undo() -> str:
        undo_spec()
        node = pytree.SUPPORTED_NODES.get(cls)
        if node is None or node.flatten_fn is not flatten:
            return f"{cls.__name__} was registered again by {owner_of(cls)}; left as it is"
        pytree._deregister_pytree_node(cls)
        if previous is not None:
            pytree._private_register_pytree_node(cls, *previous[0], **previous[1])
        return ""

    return undo, detail


def _register_flatten_spec(cls, flatten_spec):
    """torch.fx's flatten-by-spec for ``cls``, replacing any earlier one (it belongs to the pytree registration
    replaced above, or to nobody); the undo puts that one back."""
    import torch.fx._pytree as fx_pytree

    previous = (fx_pytree.SUPPORTED_NODES.get(cls), fx_pytree.SUPPORTED_NODES_EXACT_MATCH.get(cls))
    fx_pytree.register_pytree_flatten_spec(cls, flatten_spec)

    def undo() -> None:
        if fx_pytree.SUPPORTED_NODES.get(cls) is not flatten_spec:
            return
        if previous[0] is None:
            fx_pytree._deregister_pytree_flatten_spec(cls)
        else:
            fx_pytree.SUPPORTED_NODES[cls], fx_pytree.SUPPORTED_NODES_EXACT_MATCH[cls] = previous

    return undo


def _snapshot(cls):
    node = pytree.SUPPORTED_NODES[cls]
    ser = pytree.SUPPORTED_SERIALIZED_TYPES[cls]
    return (node.flatten_fn, node.unflatten_fn), {
        "serialized_type_name": ser.serialized_type_name,
        "to_dumpable_context": ser.to_dumpable_context,
        "from_dumpable_context": ser.from_dumpable_context,
        "flatten_with_keys_fn": node.flatten_with_keys_fn,
    }
