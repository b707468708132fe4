"""What every patch test proves, written once (issue 20): a case fails to export without its rows, exports with
them, the program matches eager on input sets of *other* sizes than traced (every output leaf and the output's
structure), and the rows were used (their hits counted).

A test module declares its cases as a table of ``Proof`` rows and runs ``prove(case, make_agent)``, or one half
of it (``fails_without`` / ``exports_with``) where the two halves are separate tests.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

import pytest
import torch

import autopatch
from autopatch import registry
from autopatch.errors import causes

_ROWS = {row.id: row for row in registry.PATCHES}


def row(patch_id: str):
    """The shipped row (PatchSpec) of that id."""
    return _ROWS[patch_id]


@dataclass(frozen=True)
class Proof:
    """One case: ``build()`` returns ``(model, traced, other, runs)``: the model, the input set it is traced with,
    a second set whose sizes differ (the two give the dynamic shapes), and the sets it is run at afterwards (other
    sizes again).  ``rows``: the patches the case needs, each must count hits; ``fails_with``: a regular
    expression of the export error without them; ``beside``: what is selected in both halves (the pytree
    registrations a decode step needs to be exportable at all; "all": every default patch, the case's rows
    excluded in the first half).  Every leaf and the structure are compared, within
    ``tolerance`` (``torch.testing.assert_close``'s own by default), with ``reference(model, inputs)``: eager on a
    copy of the inputs unless given (a model with state, such as dynamic RoPE's growing cache, wants a fresh copy
    of the model each time).  ``raises``: the class of the export error without the rows; ``shapes(model)``: the
    dynamic shapes as a user writes them, guessed from the two input sets otherwise; ``fails_at_run``: without
    the rows the export may pass and the program fail on its run sets instead (a guard, a registration of
    transformers' own that flattens in another order), so those are run too."""

    name: str
    build: Callable[[], tuple]
    rows: tuple
    fails_with: str
    beside: tuple = ("pytree",)
    strict: bool = False
    reference: Callable | None = None
    tolerance: dict = field(default_factory=dict)
    raises: type = Exception
    shapes: Callable | None = None
    fails_at_run: bool = False
    #: Build the model once the agent is on, as in a process started with EXPORT_PATCHES (models that bind a
    #: patched function when built: xLSTM's recurrent pass); each half then builds its own.
    built_after_agent: bool = False


def _call(traced, other, shapes):
    """``(args, kwargs, dynamic_shapes)`` of an export of ``traced`` (keyword inputs; a tuple: positional ones),
    copied (a cache is mutated by the trace); the shapes guessed from ``traced`` and ``other`` unless given."""
    if shapes is None:
        shapes = autopatch.guess_dynamic_shapes(traced, other)
    args, kwargs = (traced, {}) if isinstance(traced, tuple) else ((), traced)
    return copy.deepcopy(args), copy.deepcopy(kwargs), shapes


def export(model, traced: dict | tuple, other: dict | tuple | None = None, *, shapes=None, strict: bool = False):
    """``torch.export.export`` as a user calls it: keyword inputs (a tuple: positional ones), dynamic shapes
    guessed from two input sets unless given, no autograd; the inputs are copied (a cache is mutated by the
    trace)."""
    args, kwargs, shapes = _call(traced, other, shapes)
    with torch.no_grad():
        return torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=shapes, strict=strict)


def export_onnx(model, traced: dict | tuple, other: dict | tuple | None = None, *, shapes=None, **options):
    """``torch.onnx.export(..., dynamo=True)`` as a user calls it, inputs and shapes as ``export`` takes them;
    ``options``: the exporter's own (``output_names``...)."""
    args, kwargs, shapes = _call(traced, other, shapes)
    with torch.no_grad():
        return torch.onnx.export(model, args, kwargs=kwargs, dynamic_shapes=shapes, dynamo=True, verbose=False,
                                 **options)


def assert_conversion_stops_at(export, operator: str) -> None:
    """``export()`` (a torch.onnx.export) fails, and some error of its chain (torch.onnx wraps what stopped it)
    names ``operator``: the conversion stopped where a row's translation or rewrite is missing."""
    with pytest.raises(Exception) as failed:
        export()
    chain = [str(error) for error in causes(failed.value)]
    assert any(operator in text for text in chain), chain[-1][:300]


def assert_onnx_matches(got, expected, **tolerance) -> None:
    """onnxruntime's outputs (a flat list) against eager's, every leaf in the order the active registrations
    flatten it: as many, each close."""
    leaves = torch.utils._pytree.tree_leaves(expected)
    assert len(got) == len(leaves), (len(got), len(leaves))
    for got_leaf, expected_leaf in zip(got, leaves):
        torch.testing.assert_close(torch.as_tensor(got_leaf), expected_leaf, **tolerance)


def assert_same_outputs(got, expected, **tolerance) -> None:
    """Every output leaf (logits and every cache state: keys, values, conv and recurrent states, counters) as
    flattened by the active registrations, and the same tree structure on both sides."""
    got_leaves, got_spec = torch.utils._pytree.tree_flatten(got)
    expected_leaves, expected_spec = torch.utils._pytree.tree_flatten(expected)
    assert got_spec == expected_spec, (got_spec, expected_spec)
    for g, e in zip(got_leaves, expected_leaves):
        torch.testing.assert_close(g, e, **tolerance)


def assert_onnx_runs_match(program, model, runs, **tolerance) -> None:
    """onnxruntime runs the ONNX ``program`` on each input set of ``runs`` (keyword inputs), every output leaf and the
    structure compared with eager's."""
    from autopatch import onnx_inputs

    for inputs in runs:
        got = onnx_inputs.run(program, **copy.deepcopy(inputs))
        with torch.no_grad():
            expected = model(**copy.deepcopy(inputs))
        assert_same_outputs(got, expected, **tolerance)


def _selection(case: Proof, with_rows: bool) -> str:
    if with_rows:
        return ",".join([*case.beside, *case.rows])
    # The rows excluded, so that a ``beside`` of "all" means every default but them; nothing beside: no patch.
    return ",".join([*case.beside, *(f"-{row}" for row in case.rows)]) if case.beside else "none"


def _shapes(case: Proof, model):
    return case.shapes(model) if case.shapes else None


def fails_without(case: Proof, make_agent, built=None) -> None:
    """The export stops, with the case's error, when its rows are not selected (the rows beside it are); with
    ``fails_at_run``, the export or the program on one of the run sets."""
    model, traced, other, runs = built or case.build()
    own = make_agent(registry.PATCHES, _selection(case, with_rows=False))
    try:
        with pytest.raises(case.raises, match=case.fails_with):
            program = export(model, traced, other, shapes=_shapes(case, model), strict=case.strict)
            for inputs in runs if case.fails_at_run else ():
                with torch.no_grad():
                    program.module()(**copy.deepcopy(inputs))
    finally:
        own.disable()  # one private agent at a time: the next half makes its own


def exports_with(case: Proof, make_agent, built=None):
    """With its rows the case exports, the program matches eager on every run set, and every row counted hits.
    Returns the program and the agent (for a test's own checks of its records)."""
    if case.built_after_agent and built is None:
        own = make_agent(registry.PATCHES, _selection(case, with_rows=True))
        model, traced, other, runs = case.build()
    else:
        model, traced, other, runs = built or case.build()
        own = make_agent(registry.PATCHES, _selection(case, with_rows=True))
    for row in case.rows:
        assert row in own.records, f"{row} is not a shipped patch"
    program = export(model, traced, other, shapes=_shapes(case, model), strict=case.strict)
    reference = case.reference or (lambda model, inputs: model(**copy.deepcopy(inputs)))
    assert runs, "a proof runs the program at other sizes than traced"
    for inputs in runs:
        with torch.no_grad():
            got = program.module()(**copy.deepcopy(inputs))
            expected = reference(model, inputs)
        assert_same_outputs(got, expected, **case.tolerance)
    for row in case.rows:
        assert own.records[row].hits > 0, f"{row} exported {case.name} without being used"
    assert all(autopatch.last_export_report()["patches"].get(row, 0) > 0 for row in case.rows)
    return program, own


def prove(case: Proof, make_agent):
    """Both halves on one build of the case (on a build each, ``built_after_agent``); returns the program and the
    agent."""
    built = None if case.built_after_agent else case.build()
    fails_without(case, make_agent, built)
    return exports_with(case, make_agent, built)


def catalogue_prefill(name: str, rows: tuple, fails_with: str, beside=("all",), strict: bool = False) -> Proof:
    """``name``'s VLM prefill on the tiny catalogue's model: traced on its first input set (2 images), checked on
    the others (3 and 4 images, longer texts); the dynamic shapes guessed from the first two and fitted to the
    forward's signature (some take their image sizes through ``**kwargs``)."""
    from autopatch.dynamic_shapes import fit_to_signature
    from autopatch.models import tiny

    arch = tiny.architecture(name, "vlm")
    sets = {}

    def build():
        model = tiny.build(arch)
        sets.update(enumerate(tiny.inputs(model, arch, "prefill", k) for k in range(3)))
        return model, sets[0], sets[1], [sets[1], sets[2]]

    def shapes(model):
        return fit_to_signature(model, autopatch.guess_dynamic_shapes(sets[0], sets[1]))

    return Proof(f"{name}/prefill" + "-strict" * strict, build, rows=tuple(rows), fails_with=fails_with,
                 beside=beside, strict=strict, shapes=shapes)
