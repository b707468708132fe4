"""Mixture-of-experts blocks without data-dependent control flow (dense top-k routing)."""
