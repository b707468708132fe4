"""Modules cast to their own dtype only when a cast changes something (rows.py says which and why)."""

from __future__ import annotations

from ...kit import calls_original


@calls_original
def router_cast_when_needed(original, self):
    """``_cast_classifier`` of a Switch-style router: ``self.classifier = self.classifier.to(self.dtype)`` on every
    call. When every parameter of the classifier already has the router's dtype the cast changes no value, yet under
    export it still swaps each (fake) parameter for a copy, which fails once the tracer holds a reference to it.
    The cast is skipped only then; a classifier of another dtype takes the original (and its cast)."""
    if any(parameter.dtype != self.dtype for parameter in self.classifier.parameters()):
        return original(self)
    return None
