"""Convolution states whose batch the program cannot tie to the inputs', rewritten from their own source.

A padding mask multiplied into the hidden states broadcasts their batches, so under export the product's batch
is ``Max(mask batch, ids batch)`` (each input has its own symbol when the dynamic shapes are guessed per input).
Zaya then concatenates the cached convolution state (a third batch) and views the result by the product's shape:
torch records ``Max(...) == cache batch`` but cannot substitute a maximum, so every later size is a nest of
divisions by it, and its contiguity checks become guards that refuse a one-token step at run time. Stating
that the mask's batch is the hidden states' (eager needs it: a padding mask has one row per sample) leaves one
batch, which the concatenation then ties to the cache's. Zaya's delayed values then take every new token but the
last (``[:, :-1]``, one shorter than the step), and describing that tensor guards the step length minus one
against 1: the program refused two-token steps. Sliced after the concatenation instead, the same tokens come out
of a tensor as long as the step plus one.
"""

from __future__ import annotations


def zaya_mask_batch_stated(forward):
    """``ZayaCCAProjection.forward`` (5.23): the conv mask's batch stated equal to the hidden states', the delayed
    values sliced after their concatenation."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        "hidden_states * conv_mask[:, :, None].to(hidden_states.dtype)":
        "hidden_states * __autopatch_rt.same_first_size(conv_mask, hidden_states)[:, :, None].to(hidden_states.dtype)",
        # the same tokens: the previous token's state, then every new token's but the last
        "torch.cat([recurrent_v_state, delayed_v_state[:, :-1]], dim=1)":
        "torch.cat([recurrent_v_state, delayed_v_state], dim=1)[:, :-1]",
    })
