"""A real module for rewrite tests: functions and a model whose ``if`` statements read tensor values."""

import torch


class ClampIfLarge(torch.nn.Module):
    """A user model: the branch taken depends on the data, so plain torch.export cannot trace it."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, mask=None):
        h = self.linear(x)
        if mask is not None and mask.sum() > 0:  # a Python check, then a tensor one
            h = h * mask
        if h.abs().max() > 1.0:
            limit = 1.0
            h = torch.clamp(h, -limit, limit)
        elif not (h.mean() > 0):
            h = -h
        return h


def carried_through_a_loop(x, steps: int):
    """A variable assigned in one branch only, read by the next iteration; a Python int carried alongside."""
    total = torch.zeros_like(x)
    count = 0
    for _ in range(steps):
        if total.sum() < 3:
            total = total + x
            count = count + 1
        x = x * 2
    return total, count


def returns_inside(x):
    if x.sum() > 0:
        return x
    return -x


def assigns_an_attribute(holder, x):
    if x.sum() > 0:
        holder.seen = x
    return x


def only_python_tests(x, flag):
    if flag:
        x = x + 1
    if x is None:
        x = 0
    return x


def hands_on_a_tuple(x):
    out = (x,)
    if x.sum() > 0:
        out = (x, x)
    return out


class ReturnsEarly(torch.nn.Module):
    """An ``if`` on a tensor that returns: torch.cond cannot express it, so it cannot be rewritten."""

    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return -x
