"""``autopatch diagnose --replace-failing``: each smallest failing piece becomes a ``torch.library`` custom op, so
that the rest of the model exports around it.

The op sees only tensors: a call's ``(args, kwargs)`` are flattened with pytree (a cache through its registration,
``*args``/``**kwargs`` as the tuple and dict they are), the tensor leaves go in as a ``Tensor[]``, everything else
(ints, flags, None, the tree's layout) is fixed by the recorded calls, one op per layout. Its eager implementation
rebuilds the call and runs the piece's own forward. Its fake implementation must give each output's shape from the
inputs' shapes without running anything: learned dim by dim from the recorded calls (an output dim equals the same
input dim in every call, or is the same constant in every call), or given by the user as a shape function.
"""

from __future__ import annotations

import itertools
import re

#: Op names are unique in a process (torch.library refuses a second definition of a name).
_COUNTER = itertools.count()
NAMESPACE = "autopatch_diagnose"


class _Tensor:
    """Where a flattened call has a tensor (an op input or output), among its constant leaves."""

    def __repr__(self):
        return "<tensor>"


TENSOR = _Tensor()


class CannotReplace(Exception):
    """The piece cannot become a custom op: why, in one line."""


def _flat(value):
    import torch
    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten(value)
    constants = tuple(TENSOR if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves)
    return leaves, spec, constants


def _key(spec, constants) -> str:
    """One op per layout: the tree and its non-tensor leaves (a flag, a layer index) are part of the op."""
    return f"{spec}|{constants!r}"


def layout(value) -> str:
    """What a call's inputs are but for the tensors' sizes and values: its tree, where its tensors are, its
    other leaves."""
    _, spec, constants = _flat(value)
    return _key(spec, constants)


def _tensors(value) -> list:
    import torch

    return [leaf for leaf in _flat(value)[0] if isinstance(leaf, torch.Tensor)]


def learn_output_shapes(inputs: list, outputs: list) -> list:
    """``inputs[c]``/``outputs[c]``: call ``c``'s input and output tensors. For each output, one rule per dim:
    ``("in", i, d)`` (input ``i``'s dim ``d``, in every call), ``("const", n)`` or ``("sum", i, d, k, e)`` (input
    ``i``'s dim ``d`` plus input ``k``'s dim ``e``); then its dtype and device.
    Raises CannotReplace for a dim that is neither."""
    rules = []
    for j, first in enumerate(outputs[0]):
        dims = []
        for d in range(first.dim()):
            sizes = [out[j].shape[d] for out in outputs]
            found = next((("in", i, e) for i, tensor in enumerate(inputs[0]) for e in range(tensor.dim())
                          if all(ins[i].shape[e] == size for ins, size in zip(inputs, sizes))), None)
            if found is None and len(set(sizes)) == 1:
                found = ("const", sizes[0])
            if found is None:  # a cache grown by a step: its length before plus the step's
                found = next((("sum", i, e, k, f) for (i, e), (k, f) in itertools.product(_dims(inputs[0]), repeat=2)
                              if all(ins[i].shape[e] + ins[k].shape[f] == size for ins, size in zip(inputs, sizes))),
                             None)
            if found is None:
                raise CannotReplace(f"output {j} dim {d} (sizes {sizes}) is no input's dim, no sum of two, not "
                                    "constant: give a shape function")
            dims.append(found)
        rules.append((dims, first.dtype, first.device))
    return rules


def _dims(tensors) -> list:
    return [(i, d) for i, tensor in enumerate(tensors) for d in range(tensor.dim())]


def _size(rule, inputs):
    """A dim's size from the op's inputs (real or fake: then a symbolic size) by its learned rule."""
    if rule[0] == "in":
        return inputs[rule[1]].shape[rule[2]]
    if rule[0] == "sum":
        return inputs[rule[1]].shape[rule[2]] + inputs[rule[3]].shape[rule[4]]
    return rule[1]


def _changed(before, after) -> bool:
    """Whether a call left its inputs changed (a cache grown or written): then the op hands them back."""
    import torch

    old, new = _tensors(before), _tensors(after)
    return len(old) != len(new) or any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(old, new))


def _write_back(live, new) -> None:
    """Makes the caller's objects what the op's rebuilt ones became (the cache a layer updated in place)."""
    for have, got in zip(live, new):
        if isinstance(have, list):
            have[:] = got
        elif isinstance(have, dict):
            have.clear()
            have.update(got)
        elif hasattr(have, "__dict__") and type(have) is type(got):
            have.__dict__.update(got.__dict__)


class Replacement:
    """A piece's forward replaced by its custom ops (one per recorded layout), until ``undo``."""

    def __init__(self, piece, shape_function=None):
        self.piece = piece
        self.original = piece.module.forward
        self.shape_function = shape_function
        self.ops: dict = {}
        groups: dict = {}
        for calls, afters in zip(piece.calls, piece.after):
            for (args, kwargs, output), after in zip(calls, afters):
                _, spec, constants = _flat((args, kwargs))
                group = groups.setdefault(_key(spec, constants), (spec, constants, []))
                group[2].append((args, kwargs, output, after))
        for key, (spec, constants, calls) in groups.items():
            self.ops[key] = self._define(spec, constants, calls)
        piece.module.forward = self.forward

    def undo(self) -> None:
        del self.piece.module.forward

    def _define(self, in_spec, in_constants, calls):
        import torch
        import torch.utils._pytree as pytree

        _, out_spec, out_constants = _flat(calls[0][2])
        writes_back = any(_changed((a, k), after) for a, k, _, after in calls)
        if writes_back and any(_flat(after)[1] != in_spec for *_, after in calls):
            raise CannotReplace("its forward changes the layout of its inputs (a cache gains a layer)")
        inputs = [_tensors((a, k)) for a, k, _, _ in calls]
        results = [_tensors(o) + (_tensors(after) if writes_back else []) for _, _, o, after in calls]
        rules = None if self.shape_function is not None else learn_output_shapes(inputs, results)
        name = f"{NAMESPACE}::{re.sub(r'[^0-9A-Za-z_]', '_', self.piece.label)}_{next(_COUNTER)}"
        original = self.original

        def rebuild(tensors, spec, constants):
            it = iter(tensors)
            return pytree.tree_unflatten([next(it) if c is TENSOR else c for c in constants], spec)

        # The schema is spelled out: this module's annotations are strings torch cannot evaluate here.
        @torch.library.custom_op(name, mutates_args=(), schema="(Tensor[] inputs) -> Tensor[]")
        def op(inputs):
            args, kwargs = rebuild(inputs, in_spec, in_constants)
            produced = _tensors(original(*args, **kwargs)) + (_tensors((args, kwargs)) if writes_back else [])
            # An op's outputs may not alias its inputs (a piece that returns its input unchanged).
            return [tensor.clone() for tensor in produced]

        shape_function = self.shape_function

        @op.register_fake
        def _(inputs):
            if shape_function is not None:
                args, kwargs = rebuild(inputs, in_spec, in_constants)
                return [inputs[0].new_empty(shape, dtype=dtype) for shape, dtype in shape_function(*args, **kwargs)]
            return [inputs[0].new_empty([_size(rule, inputs) for rule in dims], dtype=dtype, device=device)
                    for dims, dtype, device in rules]

        outputs = len(_tensors(calls[0][2]))
        return op, out_spec, out_constants, outputs, writes_back, rebuild

    def forward(self, *args, **kwargs):
        import torch.utils._pytree as pytree

        leaves, spec, constants = _flat((args, kwargs))
        key = _key(spec, constants)
        if key not in self.ops:
            raise CannotReplace(f"{self.piece.label} is called under export with inputs laid out as in no eager call "
                                "(e.g. a mask eager skips): its op has no rule for them")
        op, out_spec, out_constants, outputs, writes_back, rebuild = self.ops[key]
        produced = op(_tensors((args, kwargs)))
        if writes_back:
            new_args, new_kwargs = rebuild(produced[outputs:], spec, constants)
            _write_back(list(args) + list(kwargs.values()), list(new_args) + list(new_kwargs.values()))
        it = iter(produced[:outputs])
        return pytree.tree_unflatten([next(it) if c is TENSOR else c for c in out_constants], out_spec)
