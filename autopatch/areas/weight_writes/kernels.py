"""Kernels computed from the weights where they are used, not kept on the module (rows.py says which and why)."""

from __future__ import annotations

from ...kit import calls_original


@calls_original
def mega_ema_kernel_uncached(original, self, length: int):
    """4.x Mega's ``MegaMultiDimensionDampedEma.get_ema_kernel``: in eval mode it keeps the longest kernel computed
    so far on the module and returns a slice of it. Traced, that compares the traced length with whatever length
    eager ran last (a guard such as ``length <= 9``) and stores a traced tensor on the module. The kernel of
    ``kernel_size`` positions is computed afresh instead, as training mode does: the cached kernel's first
    positions are the same formula at the same positions."""
    if self.training:
        return original(self, length)
    kernel_size = length if self.truncation is None else min(self.truncation, length)
    return self._compute_efficient_ema_kernel(kernel_size)
