"""Sliding-window cache layers (``DynamicSlidingWindowLayer``) with one program for every past length.

A sliding layer keeps the last ``window - 1`` tokens and counts every token it has seen.  Upstream decides two
things in Python on that count: how much of the concatenated keys to keep (``keys[:, :, -window + 1:]``, a
negative slice whose start torch must compare with the length) and the mask sizes (``if seen >= window`` and
``max(seen - window + 1, 0)``).  Traced with a symbolic past, each comparison becomes a guard, so a program
traced inside the window refuses a past beyond it and the other way round ("Guard failed: ... <= 4").

Both are the same arithmetic without a branch:

    kept       = min(seen_in_keys + new, window - 1)          the keys' new length (torch.sym_min)
    kv_length  = min(seen, window - 1) + query_length         == keys held + query, in both regimes
    kv_offset  = max(seen - window + 1, 0)                    (torch.sym_max)

and with ints they give upstream's numbers exactly, so eager results do not change.
"""

from __future__ import annotations

import inspect

import torch

from ... import kit
from ...kit import calls_original

PATCH_UPDATE = "transformers.cache.sliding_update"
PATCH_MASK_SIZES = "transformers.cache.sliding_mask_sizes"

#: Layer class -> whether its lazy_initialization takes the values too (5.x) or the keys only (4.56-4.57).
_INIT_TAKES_VALUES: dict = {}


def _lazy_init(layer, keys, values) -> None:
    cls = type(layer)
    takes_values = _INIT_TAKES_VALUES.get(cls)
    if takes_values is None:
        takes_values = len(inspect.signature(cls.lazy_initialization).parameters) >= 3
        _INIT_TAKES_VALUES[cls] = takes_values
    if takes_values:
        layer.lazy_initialization(keys, values)
    else:
        layer.lazy_initialization(keys)


def _last(states: torch.Tensor, count):
    """The last ``count`` positions of dim -2, ``count`` being at most the length: a start of ``length - count``
    is never negative, so torch need not compare it with zero."""
    length = states.shape[-2]
    positions = torch.arange(length - count, length, device=states.device)
    return states.index_select(-2, positions)


def sliding_update(self, key_states, value_states, *args, **kwargs):
    kit.count_hit(PATCH_UPDATE)
    if not self.is_initialized:
        _lazy_init(self, key_states, value_states)
    elif getattr(self, SEEN_FROM_KEYS, False):
        _refuse_full_window(self)
    self.cumulative_length += key_states.shape[-2]
    full_keys = torch.cat([self.keys, key_states], dim=-2)
    full_values = torch.cat([self.values, value_states], dim=-2)
    kept = torch.sym_min(full_keys.shape[-2], self.sliding_window - 1)
    if not getattr(self, "record_past", False):
        self.keys, self.values = _last(full_keys, kept), _last(full_values, kept)
        return full_keys, full_values
    # 5.x speculative decoding keeps everything until crop(); it returns what get_mask_sizes advertises.
    self.keys, self.values = full_keys, full_values
    visible = torch.sym_min(full_keys.shape[-2], self.sliding_window - 1 + key_states.shape[-2])
    return _last(full_keys, visible), _last(full_values, visible)


def sliding_mask_sizes(self, query, *args, **kwargs):
    """``query``: the query length (5.x) or the cache positions (4.56-4.57, whose length it is).

    Outside speculative decoding a layer holds ``min(seen, window - 1)`` tokens, so the mask covers the tokens
    held plus the query, from ``seen - held``: sizes of the keys themselves, with no comparison at all (a min
    of the seen count would tie the keys' length to it by a guard)."""
    kit.count_hit(PATCH_MASK_SIZES)
    query_length = query.shape[0] if isinstance(query, torch.Tensor) else query
    seen = self.cumulative_length
    if getattr(self, "record_past", False) or not self.is_initialized:
        return torch.sym_min(seen, self.sliding_window - 1) + query_length, torch.sym_max(
            seen - self.sliding_window + 1, 0
        )
    held = self.keys.shape[-2]
    return held + query_length, seen - held


PATCH_IGNORE_CAUSAL = "transformers.masks.sdpa_causal_skip"


@calls_original
def ignore_causal_mask_sdpa(original, padding_mask, *args, **kwargs):
    """Upstream answers False under any trace (is_exporting / is_compiling), but first trims a padding mask
    longer than the keys, behind ``if padding_mask.shape[-1] > kv_length``: for a sliding layer traced inside its
    window that compares the mask (past + new) with the tokens held, and the program refuses every past beyond
    the window. The trimmed mask is not used when tracing, so the answer is given without the comparison."""
    if torch.compiler.is_compiling():
        kit.count_hit(PATCH_IGNORE_CAUSAL)
        return False
    return original(padding_mask, *args, **kwargs)


# --- The seen count of a cache whose layers are all sliding ------------------------------------------------------
# With a full-attention layer beside them, sliding layers take their count from its keys (pytree_caches). With
# none, the count is not a size of the cache once a layer is past its window: the cache is rebuilt with the
# layer's own keys length (exact inside the window) and marked SEEN_FROM_KEYS. Two ways out of that mark:
#   * the decoder is given a 2-D attention mask, which covers every token seen plus the new ones (transformers'
#     convention for every decoder): the count is its length minus the new tokens, exact in every regime;
#   * otherwise the step is correct only inside the window: the program refuses at run time a cache that has
#     filled its window, and the export itself refuses one traced there.

#: Set on a sliding layer whose count of seen tokens was taken from its own keys.
SEEN_FROM_KEYS = "_autopatch_seen_from_keys"


def count_from_attention_mask(module, args, kwargs):
    """Forward pre-hook (with kwargs) on the exported module and its submodules taking ``past_key_values``."""
    cache = kwargs.get("past_key_values")
    mask = kwargs.get("attention_mask")
    tokens = kwargs.get("input_ids")
    if tokens is None:
        tokens = kwargs.get("inputs_embeds")
    layers = [layer for layer in getattr(cache, "layers", ()) if getattr(layer, SEEN_FROM_KEYS, False)]
    if not layers or not isinstance(mask, torch.Tensor) or mask.dim() != 2 or not isinstance(tokens, torch.Tensor):
        return None
    seen = mask.shape[-1] - tokens.shape[1]
    for layer in layers:
        layer.cumulative_length = seen
        setattr(layer, SEEN_FROM_KEYS, False)
    kit.count_hit(PATCH_UPDATE)
    return None


def hook_exported_module(entry_args, entry_kwargs):
    """kit.on_export_start callback: pre-hooks on the module being exported (the first argument of every entry
    point) and on its submodules whose forward takes ``past_key_values``, so that a wrapper's inner model counts."""
    module = kit.exported_module(entry_args, entry_kwargs)
    if not isinstance(module, torch.nn.Module):
        return lambda: None
    handles = [
        sub.register_forward_pre_hook(count_from_attention_mask, with_kwargs=True)
        for sub in module.modules()
        if "past_key_values" in inspect.signature(sub.forward).parameters
    ]

    def remove():
        for handle in handles:
            handle.remove()

    return remove


def _refuse_full_window(layer) -> None:
    """For a layer whose count came from its keys: a layer holding ``window - 1`` tokens may have seen any number
    more, so the step cannot know its positions. Refused when traced (the traced cache is such a one) and, in
    the program, at run time."""
    window, held = layer.sliding_window, layer.keys.shape[-2]
    hint = held.node.hint if isinstance(held, torch.SymInt) else held
    message = (
        f"autopatch: a cache whose layers are all sliding (window {window}) holds {window - 1} tokens: past its "
        "window it does not say how many tokens it has seen, so this decode step cannot place the new ones. "
        "Pass attention_mask (past + new tokens) to the model, or use a cache shorter than the window."
    )
    if hint is not None and hint >= window - 1:
        raise ValueError(message + f" (the traced cache holds {hint})")
    torch._assert_async(torch.scalar_tensor(held) < window - 1, message)
