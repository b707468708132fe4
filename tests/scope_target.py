"""A real module for scope tests: a function a model calls, and a replacement that is easy to tell apart."""

import threading

import torch

calls_by_thread: dict = {}


def double(x):
    return x * 2


def _note_thread():
    name = threading.current_thread().name
    calls_by_thread[name] = calls_by_thread.get(name, 0) + 1


# dynamo (strict=True) cannot trace threading; a constant-result function runs for real at trace time.
_note_thread._dynamo_marked_constant = True


def triple(x):
    """Replacement for ``double``: remembers which thread called it."""
    _note_thread()
    return x * 3


class UsesDouble(torch.nn.Module):
    def forward(self, x):
        # Looked up on the module at call time, like transformers' own helpers.
        return double(x) + 1
