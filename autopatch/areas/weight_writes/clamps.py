"""Weights clamped where they are read instead of in place (rows.py says which and why)."""

from __future__ import annotations


def gemma3n_correction_clamped_on_read(correct):
    """4.x ``Gemma3nTextAltUp.correct``: ``correction_coefs.weight.data.clamp_(-clip, clip)`` before
    ``correction_coefs(modalities)`` (a bias-free Linear) is ``F.linear(modalities, weight.clamp(-clip, clip))``:
    the product eager computes with the weight it has just clamped, computed from the weight as it is, so the
    program needs no write to a parameter."""
    from ...kit import substitute_expressions

    clip = "self.config.altup_coef_clip"
    return substitute_expressions(correct, {
        f"if {clip} is not None:\n    self.correction_coefs.weight.data.clamp_(-{clip}, {clip})": "pass",
        "self.correction_coefs(modalities)":
        f"torch.nn.functional.linear(modalities, self.correction_coefs.weight if {clip} is None else "
        f"self.correction_coefs.weight.clamp(-{clip}, {clip}))",
    })
