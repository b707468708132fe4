"""A real module for rewrite tests: functions and a model whose ``if`` statements read tensor values."""

import math

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


class ReturnsInALoop(torch.nn.Module):
    """An ``if`` on a tensor that returns from inside a loop: the rest of the function is not its other path, so
    it cannot be rewritten."""

    def forward(self, x):
        for _ in range(2):
            if x.sum() > 0:
                return x * 2
            x = x - 1
        return -x


# --- what people write: each pattern's model, and inputs that take each of its paths (issue 21) -----------------
# Inputs are (batch, path) -> args: the batch is the dynamic size, the path which way the data sends the function.


class EarlyReturn(torch.nn.Module):
    """``if c: return a`` then the rest of the body."""

    paths = 2

    def forward(self, x, mask):
        if mask.all():
            return x
        return x * mask

    @staticmethod
    def inputs(batch, path):
        return torch.randn(batch, 4), torch.ones(batch, 4) if path == 0 else (torch.rand(batch, 4) > 0.5).float()


def _signed(batch, path):
    """Three paths by the sign of the sum: big positive, big negative, in between."""
    return (torch.rand(batch, 4) - 0.5) * 0.1 / batch + (3.0, -3.0, 0.0)[path],


class ElifChain(torch.nn.Module):
    """``if/elif/else`` each returning, a tuple of tensors."""

    paths = 3

    def forward(self, x):
        total = x.sum()
        if total > 1:
            return x * 2, total
        elif total < -1:
            y = -x
            return y, total
        else:
            return x + 1, total * 0

    inputs = staticmethod(_signed)


def gate(x, mask):
    """A module-level helper with an early return, called from a model's forward."""
    if mask.any():
        y = x.masked_fill(mask, 0.0)
        return y
    return x + 1


class CallsAHelper(torch.nn.Module):
    """Its forward calls ``gate``, whose ``if`` stops the export."""

    paths = 2

    def forward(self, x, mask):
        return gate(x, mask) * 3

    @staticmethod
    def inputs(batch, path):
        return torch.randn(batch, 4), (torch.rand(batch, 4) > 0.5) if path == 0 else torch.zeros(batch, 4).bool()


class Scaler(torch.nn.Module):
    """A submodule whose method (not forward) returns early: reached as Scaler.scale."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((4,), 0.5))

    def scale(self, h):
        if h.abs().max() > 2:
            return h / h.abs().max()
        if h.mean() < 0:
            return h * self.weight
        return h

    def forward(self, h):
        return self.scale(h) + 1


class WithSubmodule(torch.nn.Module):
    """Its submodule's method ``Scaler.scale`` stops the export."""

    paths = 3

    def __init__(self):
        super().__init__()
        self.scaler = Scaler()

    def forward(self, x):
        return self.scaler(x * 2)

    @staticmethod
    def inputs(batch, path):
        base = torch.rand(batch, 4) * 0.5
        return (base * 10 + 2, -base - 0.1, base + 0.1)[path],


class ViewInBranch(torch.nn.Module):
    """A branch that hands on a view of its input (``x = x[:, 1:]``): torch.cond refuses an output aliasing
    an input."""

    paths = 2

    def forward(self, x):
        if x.sum() > 0:
            x = x[:, 1:]
        else:
            x = x[:, :-1] * 2
        return x

    inputs = staticmethod(lambda batch, path: (torch.rand(batch, 4) * (1, -1)[path],))


def returns_in_a_loop(x):
    for _ in range(2):
        if x.sum() > 0:
            return x
        x = x - 1
    return x


def returns_after_a_side_effect(holder, x):
    if x.sum() > 0:
        return x
    holder.seen = x
    return -x


class MinOfSizes(torch.nn.Module):
    """Two inputs cut to the shorter one's length with the builtin ``min``: traced with x the shorter, the program
    refused every input where y is (``Guard failed: x.size()[1] == min(x.size()[1], y.size()[1])``). Its dynamic
    size is the length (dim 1); its paths: x the shorter, y the shorter."""

    paths = 2
    dynamic_dim = 1

    def forward(self, x, y):
        n = min(x.shape[1], y.shape[1])
        return x[:, :n] + y[:, :n]

    @staticmethod
    def inputs(batch, path):
        short, long = 3 + batch, 5 + 2 * batch
        return (torch.randn(2, short), torch.randn(2, long)) if path == 0 else (torch.randn(2, long),
                                                                                  torch.randn(2, short))


def chunks_of(x, size: int):
    """``math.ceil`` of a size division and ``max`` over sizes, the way chunked code computes its padding."""
    count = math.ceil(x.shape[-1] / size)
    pad = max(count * size - x.shape[-1], 0)
    return torch.nn.functional.pad(x, (0, pad)).reshape(*x.shape[:-1], count, size)


class TracingChangesState(torch.nn.Module):
    """A path with a Python side effect the rewriter cannot see (a list's ``append``): torch.cond traces both
    paths, so exporting runs the append even when the data takes the other path, and the program bakes in the
    length as it was. The rewrite exports, but does not match eager on the export's own inputs."""

    paths = 1

    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, x):
        if x.sum() > 0:
            return x * len(self.history)
        self.history.append(1)
        return x - len(self.history)

    @staticmethod
    def inputs(batch, path):
        return torch.rand(batch, 4) + 0.1,


class DiffersWhileCompiling(torch.nn.Module):
    """A path that asks whether it is being compiled: torch.cond traces its branches with dynamo, where the answer
    is yes, while the original (eager, or non-strict export) hears no. The rewrite exports a program that differs
    from eager, so it must not be kept."""

    paths = 1

    def forward(self, x):
        if x.sum() > 0:
            if torch.compiler.is_compiling():
                return x * 0
            return x * 2
        return -x

    @staticmethod
    def inputs(batch, path):
        return torch.rand(batch, 4) + 0.1,


def trims_then_updates(x, y):
    """A slice bounded by ``min`` that the function then changes in place: a copy would not see the change."""
    n = min(x.shape[1], y.shape[1])
    head = x[:, :n]
    head.mul_(2)
    return x + 0


class UpdatesInPlace(torch.nn.Module):
    """Branches that update a local in place (``h += 1``): h is the function's own tensor, so the traced branch
    may rebind it instead (torch.cond refuses a branch that changes its inputs in place)."""

    paths = 2

    def forward(self, x):
        h = x * 2
        if h.sum() > 0:
            h += 1
        else:
            h -= 1
            h *= 3
        return h

    inputs = staticmethod(lambda batch, path: (torch.rand(batch, 4) * (1, -1)[path],))


def updates_its_input(x):
    """``x += 1`` on a parameter: the caller's tensor changes; the if stays as written."""
    if x.sum() > 0:
        x += 1
    return x


class TwoInARow(torch.nn.Module):
    """Two functions whose ``if`` stops the export, one after the other: ``gate`` first, then this forward (auto
    mode rewrites one per round)."""

    paths = 2

    def forward(self, x, mask):
        y = gate(x, mask)
        if y.sum() > 0:
            return y
        return -y

    @staticmethod
    def inputs(batch, path):
        if path == 0:  # a mask (gate zeroes part of x), then a positive sum
            return torch.rand(batch, 4) + 0.1, torch.rand(batch, 4) > 0.5
        return -torch.rand(batch, 4) - 1.1, torch.zeros(batch, 4).bool()  # no mask (x + 1), a negative sum
