"""Cache code that takes ``len()`` of a tensor, rewritten from its own source.

``len(self.key_cache[layer_idx]) == 0`` asks whether a layer is still empty (a skipped layer holds ``[]``), but
``len`` of a tensor is its batch size as a plain int: tracing it fixes a dynamic batch to the size seen while
tracing (``Eq(s3, 2)``), and no decode step exports with a dynamic batch.  Found in:

  * transformers 4.48-4.50 ``DynamicCache.update`` and ``get_seq_length`` (4.51 moved to ``numel()``); every
    decoder calls both in forward, and ``EncoderDecoderCache.__init__`` calls the second per layer;
  * 4.x FalconH1's ``FalconHybridMambaAttentionDynamicCache.update``.

The rewrite replaces only that expression with ``runtime.is_empty``: the first size compared symbolically for a
tensor, ``len() == 0`` for anything else.
"""

from __future__ import annotations


def shape_based_empty_check(function):
    from ...kit import substitute_expressions

    return substitute_expressions(function, {
        "len(self.key_cache[layer_idx]) == 0": "__autopatch_rt.is_empty(self.key_cache[layer_idx])",
    })
