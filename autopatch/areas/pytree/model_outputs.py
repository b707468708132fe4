"""Key paths for transformers 4.x model outputs.

4.x registers every ``ModelOutput`` subclass as a pytree node (``ModelOutput.__init_subclass__``) with a flatten
and an unflatten but no ``flatten_with_keys_fn``.  torch.export walks its inputs *with* key paths, so a decoder
step fed the way seq2seq runtimes feed it (``encoder_outputs=BaseModelOutput(last_hidden_state=...)`` beside an
``EncoderDecoderCache``) stops with "Did not find a flatten_with_keys_fn for type BaseModelOutput".  5.x
registers the keys itself.

The fix keeps transformers' registration (its flatten, unflatten and serialized name) and only adds the keys:
a ``ModelOutput`` is an ordered dict, so each field is keyed by its name, as torch keys a dict.  Subclasses
defined later (a model module imported after activation) get them too.
"""

from __future__ import annotations

import functools

import torch.utils._pytree as pytree

from ... import kit
from .caches import register_with_subclasses

def _flatten_with_keys(patch_id, output):
    kit.count_hit(patch_id)
    return [(pytree.MappingKey(name), value) for name, value in output.items()], list(output.keys())


def install_model_output_keys(record, owner, name, model_output):
    """Installer for ``transformers.utils.generic.ModelOutput``: adds keys to the registration of it and of every
    subclass, now and later; the undo puts each registration back as it was."""
    flatten_with_keys = functools.partial(_flatten_with_keys, record.spec.id)

    def add_keys(cls):
        node = pytree.SUPPORTED_NODES.get(cls)
        if node is None or node.flatten_with_keys_fn is not None:
            return (lambda: ""), ""  # not registered by transformers, or already keyed: nothing of ours to add
        pytree.SUPPORTED_NODES[cls] = node._replace(flatten_with_keys_fn=flatten_with_keys)

        def undo() -> str:
            if pytree.SUPPORTED_NODES.get(cls) is not None and \
                    pytree.SUPPORTED_NODES[cls].flatten_with_keys_fn is flatten_with_keys:
                pytree.SUPPORTED_NODES[cls] = node
            return ""

        return undo, ""

    undo, _ = register_with_subclasses(model_output, add_keys)
    return undo
