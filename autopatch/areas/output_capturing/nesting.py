"""transformers 5.x output capturing, nested under Dynamo.

``capture_outputs`` activates a collector for the duration of a decorated ``forward`` through
``CompileableContextVar``: a ``ContextVar`` in eager code (``set`` returns a token, ``reset`` restores the outer
collector), a plain attribute under Dynamo, whose ``reset`` clears it and leaves the compile mode. When a decorated
model calls another one and goes on running hooked modules (GIT's model: its vision tower, then its text layers),
the inner ``reset`` drops the outer collector, and the next hook falls back to the ``ContextVar``, which Dynamo
cannot read: ``strict=True`` stops on "Unsupported method call". Under Dynamo, ``set`` here hands back the outer
state as its token and ``reset`` restores it, as the ``ContextVar`` does in eager.
"""

from __future__ import annotations

from collections import namedtuple

from ... import kit

PATCH_ID = "transformers.output_capturing.nested_collectors"
RESET_ID = "transformers.output_capturing.nested_collectors_reset"

#: The compile-mode state a ``set`` under Dynamo replaced: its token.
OuterCollector = namedtuple("OuterCollector", "compiling collector")


@kit.calls_original
def set_keeping_outer(original, self, value):
    """``CompileableContextVar.set``: upstream's, and when it took its compile path (its own test), the state it
    replaced as the token."""
    outer = OuterCollector(self.compiling, self.global_var)
    token = original(self, value)
    if not self.compiling:  # eager: the ContextVar's own token
        return token
    kit.count_hit(PATCH_ID)
    return outer


@kit.calls_original
def reset_to_outer(original, self, token):
    """``CompileableContextVar.reset``: a token from ``set_keeping_outer`` restores the outer state (the outer
    model's collector, or none outside every decorated forward); any other token goes to upstream's."""
    if isinstance(token, OuterCollector):
        kit.count_hit(RESET_ID)
        self.compiling, self.global_var = token.compiling, token.collector
        return None
    return original(self, token)
