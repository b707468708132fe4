"""``autopatch diagnose``: which submodule stops torch.export, what dynamic shapes each piece needs, what to do.

A failed export names one guard deep inside torch. Diagnose answers the questions that error leaves open:

    trace    the model runs eagerly on every input set (the sources of ``autopatch validate``); hooks record, for
             every submodule and every call, its args, kwargs and outputs (deep copies: caches change in place)
    shapes   each piece's ``dynamic_shapes``, guessed from its calls on two sets (the dims that differ), keyed by
             its forward's parameter names (``*args``/``**kwargs`` included) so a user can paste them
    export   piece by piece, the whole model first; where a piece fails, its children (``only-if-failing``), or
             every piece (``always``), or the whole model only (``none``). Every program that exports is run on
             the piece's other recorded calls and compared, leaf by leaf, with what eager returned
    advise   for each smallest failing piece (it fails, its children do not): a shipped patch that is off, one
             that does not apply here, ``EXPORT_PATCHES_REWRITE=auto`` for an ``if`` on a tensor, or an issue

``diagnose_text`` renders the report as a tree; ``--json`` prints it whole.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import re
import time
import traceback

from .models.tiny import first_line
from .validate import (TOLERANCE, BadInput, StageFailed, _activate, _build, _compare, _error_text,
                       _hits_of_last_export, _location, _paths)

OK, FAIL, DISC, NOT_CALLED = "ok", "fail", "disc", "not-called"
STRATEGIES = ("only-if-failing", "always", "local", "none")


class Piece:
    """One submodule (``""`` is the whole model): its calls per input set, and once tried, its export result."""

    def __init__(self, name: str, module, depth: int):
        self.name = name
        self.module = module
        self.depth = depth
        self.children: list = []
        #: ``calls[s]``: the calls of input set ``s``, in order, each ``(args, kwargs, output)``.
        self.calls: list = []
        #: ``after[s][k]``: call ``k``'s ``(args, kwargs)`` as its forward left them (a cache updated in place).
        self.after: list = []
        self.result: dict | None = None

    @property
    def label(self) -> str:
        return self.name or "(model)"

    def call_count(self) -> int:
        return sum(len(calls) for calls in self.calls)


# --- trace ---------------------------------------------------------------------------------------------------


def _copied(value):
    """A deep copy, detached: what a later call (a cache updated in place) cannot change."""
    import torch

    with torch.no_grad():
        try:
            return copy.deepcopy(value)
        except Exception:  # noqa: BLE001 - an object that refuses to be copied is kept as it is
            return value


def trace(model, input_sets) -> Piece:
    """Runs ``model(**inputs)`` for each set with hooks on every submodule; returns the root of the piece tree."""
    import torch

    pieces: dict = {}
    for name, module in model.named_modules():
        depth = name.count(".") + 1 if name else 0
        pieces[name] = Piece(name, module, depth)
        if name:
            pieces[name.rpartition(".")[0]].children.append(pieces[name])
    current = {"set": 0}
    pending: dict = {}  # a module's inputs, copied before its forward runs (it may change them)
    handles = []

    def before(name):
        def hook(module, args, kwargs):
            pending.setdefault(name, []).append((_copied(args), _copied(kwargs)))
        return hook

    def after(name):
        def hook(module, args, kwargs, output):
            recorded_args, recorded_kwargs = pending[name].pop()
            piece = pieces[name]
            while len(piece.calls) <= current["set"]:
                piece.calls.append([])
                piece.after.append([])
            piece.calls[current["set"]].append((recorded_args, recorded_kwargs, _copied(output)))
            piece.after[current["set"]].append(_copied((args, kwargs)))
        return hook

    for name, piece in pieces.items():
        handles.append(piece.module.register_forward_pre_hook(before(name), with_kwargs=True))
        handles.append(piece.module.register_forward_hook(after(name), with_kwargs=True))
    try:
        for index, inputs in enumerate(input_sets):
            current["set"] = index
            with torch.no_grad():
                model(**copy.deepcopy(inputs))
    finally:
        for handle in handles:
            handle.remove()
    for piece in pieces.values():
        while len(piece.calls) < len(input_sets):
            piece.calls.append([])
            piece.after.append([])
    return pieces[""]


# --- dynamic shapes per piece --------------------------------------------------------------------------------


def _bound(module, args, kwargs) -> dict:
    """The call's inputs by forward's parameter names (``*args`` a tuple, ``**kwargs`` a dict), as torch.export
    matches a dict of ``dynamic_shapes`` against them."""
    signature = inspect.signature(module.forward)
    return dict(signature.bind(*args, **kwargs).arguments)


def _same_structure(a, b) -> bool:
    """Same tree, tensors in the same places and the same other leaves: a call a program exported from ``a`` is
    meant to take (a one-token step's mask is None where a longer step's is a tensor; a flag may differ)."""
    from .diagnose_custom_ops import layout

    return layout(a) == layout(b)


def piece_shapes(piece: Piece):
    """The piece's ``dynamic_shapes`` from its first call in set A and the first call of the same structure in
    another set, or None when no other set called it that way (then every dim stays static)."""
    from .dynamic_shapes import guess_dynamic_shapes

    first = piece.calls[0][0]
    bound_a = _bound(piece.module, first[0], first[1])
    for calls in piece.calls[1:]:
        for args, kwargs, _ in calls:
            bound_b = _bound(piece.module, args, kwargs)
            if _same_structure(bound_a, bound_b):
                try:
                    return guess_dynamic_shapes(bound_a, bound_b)
                except ValueError:  # same structure, another rank: not a pair to learn from
                    continue
    return None


def shapes_text(shapes) -> str:
    """``dynamic_shapes`` as code a user pastes (``Dim.DYNAMIC`` for torch.export's dynamic marker)."""
    if isinstance(shapes, dict):
        items = ", ".join(f"{key!r}: {shapes_text(value)}" for key, value in shapes.items())
        return "{" + items + "}"
    if isinstance(shapes, (list, tuple)):
        inner = ", ".join(shapes_text(value) for value in shapes)
        return f"({inner},)" if isinstance(shapes, tuple) and len(shapes) == 1 else \
            (f"({inner})" if isinstance(shapes, tuple) else f"[{inner}]")
    if shapes is None:
        return "None"
    return "Dim.DYNAMIC" if "DYNAMIC" in str(shapes).upper() else repr(shapes)


def _has_dynamic(shapes) -> bool:
    import torch.utils._pytree as pytree

    return any(leaf is not None for leaf in pytree.tree_leaves(shapes, is_leaf=lambda x: x is None))


# --- export and compare, one piece ---------------------------------------------------------------------------


def export_piece(piece: Piece, tolerance: float) -> dict:
    """Exports the piece from its first recorded call (set A) with its guessed shapes, then runs the program on
    every recorded call of the same structure and compares each output leaf with eager's."""
    import torch

    started = time.perf_counter()
    args, kwargs, _ = piece.calls[0][0]
    shapes = piece_shapes(piece)
    result = {"name": piece.label, "class": type(piece.module).__name__, "calls": [len(c) for c in piece.calls],
              "dynamic_shapes": shapes_text(shapes) if shapes is not None else None}
    try:
        # torch prints the partial graph of every failed export on stderr: one per failing piece would bury
        # the progress lines (its logging warnings go through their own handlers, still shown).
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            program = torch.export.export(piece.module, copy.deepcopy(args), copy.deepcopy(kwargs),
                                          dynamic_shapes=shapes if shapes and _has_dynamic(shapes) else None)
    except Exception as exc:  # noqa: BLE001 - the piece's failure is the report
        result.update(status=FAIL, error=_error_text(exc), location=_location(exc), patches=_hits_of_last_export())
        result["_exception"] = exc
        result["seconds"] = round(time.perf_counter() - started, 3)
        return result
    result["patches"] = _hits_of_last_export()
    try:
        result.update(_check(piece, program, tolerance))
        result["status"] = OK
    except StageFailed as exc:
        result.update(status=DISC, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - the program refused an input eager took: a discrepancy too
        result.update(status=DISC, error=_error_text(exc), location=_location(exc))
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def _check(piece: Piece, program, tolerance: float) -> dict:
    """Every recorded call shaped like the exported one, through the program; ``other_sizes``: how many of them
    differ in some input size from the call it was exported from (the ones a specialization would fail)."""
    import torch

    runner = program.module()
    first = piece.calls[0][0]
    sizes_a = _sizes((first[0], first[1]))
    leaves: dict = {}
    compared = other_sizes = other_layouts = 0
    for index, calls in enumerate(piece.calls):
        for number, (args, kwargs, expected) in enumerate(calls):
            if not _same_structure((first[0], first[1]), (args, kwargs)):
                other_layouts += 1
                continue
            with torch.no_grad():
                got = runner(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            _compare(_leaf_paths(got), _leaf_paths(expected), tolerance, f"set {'ABCDEFGH'[index]} call {number}",
                     leaves)
            compared += 1
            other_sizes += _sizes((args, kwargs)) != sizes_a
    worst = max((leaf["max_abs"] for leaf in leaves.values()), default=0.0)
    return {"compared": compared, "other_sizes": other_sizes, "other_layouts": other_layouts, "leaves": len(leaves),
            "max_abs": worst}


def _leaf_paths(output) -> dict:
    """Each tensor leaf by its path; by its position where a class is flattened without keys (4.x's model
    outputs with the agent off): the comparison is the same, only the names are poorer."""
    import torch
    import torch.utils._pytree as pytree

    try:
        return _paths(output)
    except ValueError:
        tensors = [leaf for leaf in pytree.tree_leaves(output) if isinstance(leaf, torch.Tensor)]
        return {f"leaf[{i}]": leaf for i, leaf in enumerate(tensors)}


def _sizes(value) -> list:
    import torch
    import torch.utils._pytree as pytree

    return [tuple(leaf.shape) for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


# --- piece by piece ------------------------------------------------------------------------------------------


def walk(root: Piece, strategy: str, tolerance: float, say) -> list:
    """Tries pieces in the strategy's order, parents before children; returns the results, in tree order."""
    results: list = []
    total = sum(1 for _ in _all(root))
    counter = {"n": 0}

    def visit(piece: Piece) -> None:
        counter["n"] += 1
        if not any(piece.calls):
            piece.result = {"name": piece.label, "class": type(piece.module).__name__, "status": NOT_CALLED,
                            "calls": [0] * len(piece.calls), "seconds": 0.0}
        elif strategy == "local":
            piece.result = export_alone(piece, tolerance)
            say(f"[{counter['n']}/{total}] {piece.label}: {piece.result['status']} "
                f"{piece.result['seconds']:.1f} s")
        else:
            piece.result = export_piece(piece, tolerance)
            say(f"[{counter['n']}/{total}] {piece.label}: {piece.result['status']} "
                f"{piece.result['seconds']:.1f} s")
        piece.result["depth"] = piece.depth
        results.append(piece.result)
        # A container that is never called itself (a ModuleList) passes the question on to its children.
        open_up = piece.result["status"] in (FAIL, DISC, NOT_CALLED)
        if strategy in ("always", "local") or (strategy == "only-if-failing" and open_up):
            for child in piece.children:
                visit(child)

    visit(root)
    return results


def export_alone(piece: Piece, tolerance: float) -> dict:
    """``--strategy local``: the piece exported with its called submodules replaced by custom ops, so that its
    status is its own code's; a submodule that cannot be replaced runs as it is (said in ``not_replaced``)."""
    result, replaced, refused = export_with_ops(piece, _nearest_called(piece), {}, tolerance)
    result.update(local=True, replaced_children=replaced, not_replaced=refused)
    return result


def export_with_ops(target: Piece, pieces: list, shape_functions: dict, tolerance: float) -> tuple:
    """``target`` exported (and compared) with ``pieces`` replaced by custom ops, their forwards restored after;
    returns the result, the pieces replaced and, for those that could not be, why."""
    from .diagnose_custom_ops import CannotReplace, Replacement

    done, refused = [], {}
    try:
        for piece in pieces:
            try:
                done.append(Replacement(piece, shape_functions.get(type(piece.module).__name__)))
            except CannotReplace as exc:
                refused[piece.label] = str(exc)
        result = export_piece(target, tolerance)
    finally:
        for replacement in done:
            replacement.undo()
    return result, [r.piece.label for r in done], refused


def _nearest_called(piece: Piece) -> list:
    """The piece's submodules that are called, looking through the ones never called (a ModuleList)."""
    found = []
    for child in piece.children:
        found += [child] if any(child.calls) else _nearest_called(child)
    return found


def _all(piece: Piece):
    yield piece
    for child in piece.children:
        yield from _all(child)


def _smallest_failing(root: Piece) -> list:
    """The failing pieces below which nothing tried fails: where the export stops (a container never called,
    a ModuleList, is looked through)."""
    found = []
    for piece in _all(root):
        result = piece.result
        if result is None or result["status"] not in (FAIL, DISC):
            continue
        if result.get("local"):  # exported with its submodules as custom ops: the failure is its own code's
            found.append(piece)
            continue
        below = [p.result for p in _all(piece) if p is not piece and p.result is not None]
        if not any(r["status"] in (FAIL, DISC) for r in below):
            found.append(piece)
    return found


# --- what to do ----------------------------------------------------------------------------------------------


def advice(piece: Piece, selection: str) -> dict:
    """What to do about one smallest failing piece: the first of a shipped patch that is off, a shipped patch
    that does not apply here, the auto-rewrite of an ``if`` on a tensor, an issue to open."""
    import autopatch

    from .rewrite.auto import suggest_rewrite

    exc = piece.result.get("_exception")
    if type(exc).__name__ == "CannotReplace":
        return {"kind": "local", "text": "a submodule of it could not become a custom op (--strategy local): see "
                                         "--strategy only-if-failing for where the export itself stops"}
    ranked = sorted(((rank, row) for row in autopatch.status()["patches"]
                     if (rank := _match(row, piece, exc)) is not None), key=lambda item: -item[0])
    for _, row in ranked:
        if row["state"] == "disabled":
            value = row["id"] if selection == "none" else f"{selection},{row['id']}"
            default = " (EXPORT_PATCHES=1 selects it too)" if row["default"] and selection != "1" else ""
            return {"kind": "patch-off", "patch": row["id"],
                    "text": f"shipped patch {row['id']} is off: EXPORT_PATCHES={value}{default}"}
    for _, row in ranked:
        if row["state"] in ("skipped", "drifted", "failed"):
            why = row["detail"].strip().splitlines()[-1] if row["detail"].strip() else row["requires"]
            shipped = "patch" if row["family"] == "custom" else "shipped patch"  # a user's own, registered
            return {"kind": "patch-not-applied", "patch": row["id"],
                    "text": f"{shipped} {row['id']} does not apply here ({row['state']}: {why})"}
    rewrite = suggest_rewrite(exc) if exc is not None else ""
    if rewrite:
        return {"kind": "rewrite", "text": rewrite}
    return {"kind": "issue", "text": "no patch: open an issue with this report (autopatch diagnose --json)"}


def _match(row: dict, piece: Piece, exc) -> float | None:
    """How closely a patch row is about this failure, or None: the deeper the frame of its target the error went
    through, the closer; a class torch could not flatten, named in the error, closest of all; the piece's own
    class next, torch's own functions last. Entry points and rewrites are about every export, so about none."""
    from .agent import AGENT
    from .errors import causes, outside_frames

    record = AGENT.records.get(row["id"])
    if record is None or row["family"] in ("agent", "rewrite"):
        return None
    trigger, parts = record.spec.trigger, set(record.spec.target.split("."))
    # torch names a class it cannot flatten ("Unsupported input type <class 'transformers.cache_utils.X'>"):
    # a pytree registration row's target is that class.
    for module, name in re.findall(r"<class '([\w.]+)\.(\w+)'>", piece.result.get("error", "")):
        if module == trigger and name in parts:
            return float("inf")
    rank = None
    if exc is not None:  # every frame, torch's included (a torch row's target is a torch function)
        frames = [frame for error in causes(exc) for frame, _ in traceback.walk_tb(error.__traceback__)]
        model = {id(frame) for error in causes(exc) for frame, _ in outside_frames(error.__traceback__)}
        deepest_model = max((depth for depth, frame in enumerate(frames) if id(frame) in model), default=-1)
        for depth, frame in enumerate(frames):
            module = frame.f_globals.get("__name__") or ""
            if module != trigger:
                continue
            # The model's code before torch's: torch's internals are under every failure, the model's module
            # the error went through is this one's (its target, or a helper beside it: a decorator's inner
            # function). In torch, only the target function itself, and only below the model's last frame: the
            # functions every export goes through on its way to the model's code are about no failure.
            named = frame.f_code.co_name in parts
            if module.split(".")[0] != "torch":
                rank = max(rank or 0.0, depth + (2e6 if named else 1e6))
            elif named and depth > deepest_model:
                rank = max(rank or 0.0, float(depth))
    klass = type(piece.module)
    if rank is None and klass.__module__ == trigger and klass.__name__ in parts:
        rank = 5e5  # a patch of the piece's own class: before torch's (a specialization names no model frame)
    return rank


# --- custom-op fallback ----------------------------------------------------------------------------------------


def replace_and_export(root: Piece, shape_functions: dict, tolerance: float) -> dict:
    """Every smallest failing piece as a custom op, then the whole model exported and compared with eager on
    every recorded call; the forwards are restored after."""
    failing = _smallest_failing(root)
    if root in failing:
        return {"pieces": [], "status": FAIL, "error": "the whole model is the smallest failing piece: nothing to "
                                                      "replace"}
    result, replaced, refused = export_with_ops(root, failing, shape_functions, tolerance)
    result.pop("_exception", None)
    result.update(pieces=replaced, refused=refused)
    return result


# --- with the patches off ----------------------------------------------------------------------------------------


def compare_without_patches(root: Piece, tolerance: float, patches: str | None) -> list:
    """Every piece tried, exported again (and compared) with the agent off; each result gets ``without_patches``.
    Returns the pieces that export with the patches and not without. The selection is back on after."""
    made = []
    _activate("none")
    try:
        for piece in _all(root):
            if piece.result is None or piece.result["status"] == NOT_CALLED:
                continue
            other = export_piece(piece, tolerance)
            piece.result["without_patches"] = {key: other[key] for key in ("status", "error", "seconds")
                                               if key in other}
            if piece.result["status"] == OK and other["status"] != OK:
                made.append(piece.label)
    finally:
        _activate(patches)
    return made


# --- the whole run -------------------------------------------------------------------------------------------


def diagnose(arch: str | None = None, step: str | None = None, model: str | None = None, builder: str | None = None,
             kind: str | None = None, patches: str | None = None, strategy: str = "only-if-failing",
             replace_failing: bool = False, shape_functions: dict | None = None, compare: bool = False,
             tolerance: float = TOLERANCE, progress=None) -> dict:
    """Diagnoses one model; returns the report ``autopatch diagnose --json`` prints. Raises ``BadInput``.

    ``replace_failing``: the smallest failing pieces become custom ops and the whole model is exported again
    (``shape_functions``: ``{class name: f(*args, **kwargs) -> [(shape, dtype), ...]}`` for a piece whose output
    shapes the recorded calls cannot teach). ``compare``: every piece tried is exported again with no patch, to
    show which pieces the patches make export."""
    sources = [s for s in (arch, model, builder) if s]
    if len(sources) != 1:
        raise BadInput("give exactly one model source: --arch NAME, --model DIR or --builder MODULE:CALLABLE")
    if strategy not in STRATEGIES:
        raise BadInput(f"unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    say = progress or (lambda text: None)
    selection = _activate(patches)
    report = {"source": {"arch": arch, "model": model, "builder": builder}, "patches_selected": selection,
              "strategy": strategy, "tolerance": tolerance}
    state: dict = {}
    say("build...")
    try:
        built = _build(arch, kind, model, builder, step, False, state, report)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - nothing to diagnose without a model and its inputs
        raise BadInput(f"cannot build the model: {_error_text(exc)}") from None
    report["model"] = built["detail"]
    input_sets = [state["a"]] + state["others"]
    say(f"trace: {len(input_sets)} input sets...")
    started = time.perf_counter()
    try:
        root = trace(state["model"], input_sets)
    except Exception as exc:  # noqa: BLE001 - a model that does not run eagerly cannot be exported either
        raise BadInput(f"the model does not run eagerly: {_error_text(exc)}") from None
    report["trace_seconds"] = round(time.perf_counter() - started, 3)
    report["input_sets"] = len(input_sets)
    report["pieces"] = walk(root, strategy, tolerance, say)
    for piece in _smallest_failing(root):
        piece.result["smallest_failing"] = True
        piece.result["advice"] = advice(piece, selection)
    for result in report["pieces"]:
        result.pop("_exception", None)
    report["failing"] = [piece.label for piece in _smallest_failing(root)]
    if replace_failing and report["failing"]:
        say("replace-failing: the smallest failing pieces become custom ops, the whole model is exported again...")
        report["replaced"] = replace_and_export(root, shape_functions or {}, tolerance)
    if compare:
        say("compare: the same pieces, exported with no patch...")
        report["patches_make_export"] = compare_without_patches(root, tolerance, patches)
    report["ok"] = all(r["status"] in (OK, NOT_CALLED) for r in report["pieces"])
    return report
