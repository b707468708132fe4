"""MusicGen's and MusicGen-Melody's decoders take their codebooks packed in the batch: ``input_ids`` is
``(batch * codebooks, length)`` and the decoder recovers the batch by ``reshape(-1, codebooks, length)``.

Traced, that batch is ``ids_size // codebooks``: an expression, not an input dim, so export cannot apply its 0/1
assumption to it and guards that it is not 1 (``(input_ids.size()[0] // 4) != 1``): a decode step traced at
batch 2 refuses batch 1. In a decode step the cache already holds keys of that batch: reading the batch from the
cache makes it the cache's own dim (the program then checks ``ids == 4 * cache batch``, as eager's attention
would fail otherwise). A prefill, with no keys yet, keeps ``-1``.

Their layer loop also draws ``random.uniform(0, 1)`` for LayerDrop before testing ``self.training``: under
``strict=True`` Dynamo refuses the draw ("attempts to add additional input during export"). Outside training the
value is never read, so it is drawn only when training.
"""

from __future__ import annotations

from ...kit import substitute_expressions

PACKED = "input_ids.reshape(-1, self.num_codebooks, input_ids.shape[-1])"
LAYERDROP_DRAW = "random.uniform(0, 1)"


def batch_from_cache(forward):
    """A rewriter for ``MusicgenDecoder.forward`` and ``MusicgenMelodyDecoder.forward``: the packed ids unpacked
    to the batch the cache holds (``runtime.cached_batch``), ``-1`` as upstream when it holds none; LayerDrop's
    draw only when training."""
    return substitute_expressions(forward, {
        PACKED: "input_ids.reshape(__autopatch_rt.cached_batch(past_key_values), self.num_codebooks, "
                "input_ids.shape[-1])",
        LAYERDROP_DRAW: f"({LAYERDROP_DRAW} if self.training else 1.0)",
    })
