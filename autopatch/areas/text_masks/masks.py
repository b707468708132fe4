"""Rewriters for the rows of ``text_masks/rows.py``: each the original's source with one piece replaced."""

from __future__ import annotations


def padding_mask_always(make_padding_mask):
    """FSMT's ``make_padding_mask`` without the ``if`` that turns a pad-free mask into None. Where FSMT applies the
    mask (``masked_fill`` of the attention scores), an all-False mask leaves every score as it is."""
    from ...kit import substitute_expressions

    return substitute_expressions(make_padding_mask, {"if not padding_mask.any():\n    padding_mask = None": "pass"})


def cpmant_positions_by_arange(prepare_attention_mask):
    """``CpmAntModel._prepare_attention_mask``: ``list(range(n))[::-1]`` is ``arange(n - 1, -1, -1)``, the same
    int64 values, with ``n`` kept symbolic."""
    from ...kit import substitute_expressions

    return substitute_expressions(prepare_attention_mask, {
        "torch.tensor(list(range(seqlen - self.prompt_length))[::-1], device=device)":
        "torch.arange(seqlen - self.prompt_length - 1, -1, -1, device=device)",
    })


def longt5_default_mask_always(forward):
    """``LongT5Stack.forward`` (and 4.x ``SwitchTransformersStack.forward``, ``PegasusXDecoder.forward``,
    ``BigBirdPegasusDecoder.forward``): the default mask (``torch.ones(batch, past + seq)``) is built whenever none
    is given, under export too, as eager code builds it."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        "attention_mask is None and not is_torchdynamo_compiling()": "attention_mask is None",
    })
