"""``autopatch validate``: one model, end to end, against eager at other sizes.

Stages, each timed, each with a verdict; a failed stage ends the run and names its first error line and the
innermost frame of model or user code it came from:

    build        the model and three input sets: A (traced), B (other sizes: guesses the dynamic shapes, then
                 compared), C (other sizes again, compared)
    export       torch.export.export from A (strict or not), dynamic shapes guessed from A and B unless given;
                 then every dim that differs between A and B must still be symbolic in the program's inputs
    run          the program on B and C, every output leaf against eager's (max abs and relative error, by path)
    onnx         (--onnx) torch.onnx.export(dynamo=True) of the same model and shapes, saved: size, node count;
                 every dim symbolic in the program must be symbolic in the ONNX graph's inputs and outputs
    onnxruntime  (--onnx) the ONNX model on B and C, through onnxruntime's CPU provider, against eager

The model comes from one of three sources: an architecture built tiny offline (``autopatch.models.tiny``), a local
config or checkpoint directory (nothing is downloaded), or a user's ``module:callable`` returning ``(model,
inputs_a, inputs_b)`` (then A is traced, B guesses the shapes and is compared). The patches are the agent's
selection (``EXPORT_PATCHES``, else ``1``); ``patches="none"`` validates without any.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time

from . import onnx_inputs
from .errors import causes, outside_frames
from .models.tiny import first_line

#: Each output leaf must be within this of eager's, absolute and relative (``torch.allclose``).
TOLERANCE = 1e-4
STAGES = ("build", "export", "run", "onnx", "onnxruntime")
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")


class BadInput(ValueError):
    """What the user asked for does not exist: one line naming it and the valid choices (exit code 2)."""


class StageFailed(Exception):
    def __init__(self, message: str, location: str = ""):
        super().__init__(message)
        self.location = location


def validate(arch: str | None = None, step: str | None = None, model: str | None = None,
             builder: str | None = None, kind: str | None = None, onnx: bool = False, strict: bool = False, padded: bool = False,
             patches: str | None = None, tolerance: float = TOLERANCE, progress=None) -> dict:
    """Validates one model; returns the report ``autopatch validate --json`` prints. Raises ``BadInput``."""
    sources = [s for s in (arch, model, builder) if s]
    if len(sources) != 1:
        raise BadInput("give exactly one model source: --arch NAME, --model DIR or --builder MODULE:CALLABLE")
    if onnx:
        _require_onnx()
    selection = _activate(patches)
    say = progress or (lambda text: None)
    report = {"source": {"arch": arch, "model": model, "builder": builder}, "step": step, "strict": strict,
              "onnx": onnx, "patches_selected": selection, "tolerance": tolerance, "stages": [], "ok": False}
    state: dict = {}
    plan = [("build", lambda: _build(arch, kind, model, builder, step, padded, state, report))]
    plan += [("export", lambda: _export(state, strict)), ("run", lambda: _run(state, tolerance))]
    if onnx:
        plan += [("onnx", lambda: _onnx(state)), ("onnxruntime", lambda: _onnxruntime(state, tolerance))]
    for name, work in plan:
        say(f"{name}...")
        entry = {"stage": name, "ok": False}
        started = time.perf_counter()
        try:
            entry.update(work())
            entry["ok"] = True
        except BadInput:
            raise
        except StageFailed as exc:
            entry.update(error=str(exc), location=exc.location)
        except Exception as exc:  # noqa: BLE001 - the stage's failure is the report, not a crash
            entry.update(error=_error_text(exc), location=_location(exc))
        entry["seconds"] = round(time.perf_counter() - started, 3)
        report["stages"].append(entry)
        if not entry["ok"]:
            break
    report["patches_used"] = _patches_used(report["stages"])
    report["ok"] = len(report["stages"]) == len(plan) and all(s["ok"] for s in report["stages"])
    return report


# --- inputs of the user's choosing --------------------------------------------------------------------------


def _require_onnx() -> None:
    import importlib.util

    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise BadInput(f"--onnx needs {', '.join(missing)}: pip install 'autopatch[onnx]'")


def _activate(patches: str | None) -> str:
    import autopatch

    text = patches if patches is not None else (os.environ.get("EXPORT_PATCHES", "").strip() or "1")
    if text.lower() in ("none", "0", "off"):
        autopatch.disable()
        return "none"
    autopatch.enable(text)
    return text


def _build(arch, kind, model_dir, builder, step, padded, state, report) -> dict:
    if builder:
        model, a, b = _from_builder(builder)
        state.update(model=model, a=a, b=b, others=[b])
        report["step"] = step or "forward"
        return {"detail": f"{type(model).__name__} from {builder}", "params": _params(model)}
    from .models import tiny

    found = _arch(arch, kind) if arch else _arch_of_directory(model_dir)
    steps = tiny.steps(found)
    chosen = step or ("decode" if "decode" in steps else steps[0])
    if chosen not in steps:
        raise BadInput(f"{found.model_type} ({found.kind}) has no step {chosen!r}; valid: {', '.join(steps)}")
    report["step"] = chosen
    model = tiny.build(found) if arch else _load_directory(model_dir, found)
    a, b, c = (tiny.inputs(model, found, chosen, k, padded=padded) for k in range(3))
    state.update(model=model, a=a, b=b, others=[b, c])
    return {"detail": f"{type(model).__name__} ({found.kind}, {chosen})", "params": _params(model)}


#: Where a model type has several heads, the one ``--arch`` means unless ``kind`` says: the whole model (a VLM's
#: conditional generation rather than its text-only causal LM, Whisper's speech seq2seq rather than its decoder).
KIND_PREFERENCE = ("vlm", "speech", "seq2seq", "causal", "encoder")


def _arch(name: str, kind: str | None = None):
    import difflib

    from .models import tiny

    archs = tiny.architectures()
    if kind is not None and kind not in tiny.KINDS:
        raise BadInput(f"unknown kind {kind!r}; valid: {', '.join(tiny.KINDS)}")
    ours = sorted((a for a in archs if a.model_type == name and kind in (None, a.kind)),
                  key=lambda a: KIND_PREFERENCE.index(a.kind))
    found = ours[0] if ours else None
    if found is None and kind is not None and any(a.model_type == name for a in archs):
        kinds = sorted({a.kind for a in archs if a.model_type == name})
        raise BadInput(f"{name} has no {kind} head; valid kinds: {', '.join(kinds)}")
    if found is None:
        names = sorted({a.model_type for a in archs})
        close = difflib.get_close_matches(name, names, n=5)
        hint = f"did you mean {', '.join(close)}?" if close else f"valid: {len(names)} model types, e.g. " \
                                                                 f"{', '.join(names[:8])} (autopatch.models.tiny)"
        raise BadInput(f"unknown architecture {name!r}; {hint}")
    return found


def _arch_of_directory(path: str):
    from .models import tiny

    if not os.path.isdir(path) or not os.path.exists(os.path.join(path, "config.json")):
        raise BadInput(f"--model {path!r}: not a directory with a config.json (nothing is downloaded)")
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    wanted = (getattr(config, "architectures", None) or [None])[0]
    archs = [a for a in tiny.architectures() if a.model_type == config.model_type]
    found = next((a for a in archs if a.class_name == wanted), archs[0] if archs else None)
    if found is None:
        raise BadInput(f"--model {path!r}: model type {config.model_type!r} is not in transformers' auto mappings")
    return found


def _load_directory(path: str, arch):
    """Weights when the directory has them, else the config's own sizes with random weights."""
    import torch
    import transformers
    from transformers import AutoConfig

    klass = getattr(transformers, arch.class_name)
    has_weights = any(name.endswith((".safetensors", ".bin")) for name in os.listdir(path))
    if has_weights:
        model = klass.from_pretrained(path, local_files_only=True)
    else:
        torch.manual_seed(0)
        model = klass(AutoConfig.from_pretrained(path, local_files_only=True))
    return model.to(torch.float32).eval()


def _from_builder(spec: str):
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise BadInput(f"--builder {spec!r}: expected MODULE:CALLABLE returning (model, inputs_a, inputs_b)")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise BadInput(f"--builder {spec!r}: {first_line(exc)}") from None
    built = function()
    if not (isinstance(built, tuple) and len(built) == 3 and all(isinstance(x, dict) for x in built[1:])):
        raise StageFailed(f"{spec} must return (model, inputs_a, inputs_b), the inputs as keyword dicts")
    return built


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# --- the stages -------------------------------------------------------------------------------------------------


def _export(state, strict: bool) -> dict:
    import torch

    import autopatch

    from .dynamic_shapes import fit_to_signature, guess_dynamic_shapes

    model, a, b = state["model"], state["a"], state["b"]
    shapes = fit_to_signature(model, guess_dynamic_shapes(a, b))
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(a), dynamic_shapes=shapes, strict=strict)
    state.update(program=program, shapes=shapes)
    specialized, dynamic = _specialized_dims(program, a, b)
    if specialized:
        raise StageFailed("dims requested dynamic were specialized: " + ", ".join(specialized))
    return {"detail": f"torch.export ({'strict' if strict else 'non-strict'}), {dynamic} dynamic dims still "
                      "symbolic", "dynamic_dims": dynamic, "patches": _hits_of_last_export()}


def _specialized_dims(program, a, b) -> tuple:
    """The dims that differ between A and B (so requested dynamic) that the program's input is not symbolic in,
    by path, and how many dims were requested dynamic."""
    import torch
    from torch.export.graph_signature import InputKind

    paths_a, _ = torch.utils._pytree.tree_flatten_with_path(a)
    leaves_b = torch.utils._pytree.tree_leaves(b)
    users = [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]
    nodes = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    found, dynamic = [], 0
    for (path, leaf_a), leaf_b, name in zip(paths_a, leaves_b, users):
        if not isinstance(leaf_a, torch.Tensor) or not isinstance(leaf_b, torch.Tensor):
            continue
        traced = nodes[name].meta.get("val")
        for dim, (size_a, size_b) in enumerate(zip(leaf_a.shape, leaf_b.shape)):
            if size_a == size_b or traced is None:
                continue
            dynamic += 1
            if not isinstance(traced.shape[dim], torch.SymInt) or traced.shape[dim].node.maybe_as_int() is not None:
                found.append(f"{_dotted(path)}.shape[{dim}]")
    return found, dynamic


def _run(state, tolerance: float) -> dict:
    import torch

    runner = state["program"].module()
    leaves: dict = {}
    for k, inputs in enumerate(state["others"]):
        with torch.no_grad():
            expected = state["model"](**copy.deepcopy(inputs))
            got = runner(**copy.deepcopy(inputs))
        _compare_naming_patches(_paths(got), _paths(expected), tolerance, f"set {'BC'[k]}", leaves, state["program"])
    state["expected"] = leaves
    return _summary(leaves, len(state["others"]))


def _onnx(state) -> dict:
    import onnx
    import torch

    directory = tempfile.mkdtemp(prefix="autopatch-validate-")
    path = os.path.join(directory, "model.onnx")
    with torch.no_grad():
        program = torch.onnx.export(state["model"], (), kwargs=copy.deepcopy(state["a"]),
                                    dynamic_shapes=state["shapes"], dynamo=True, verbose=False)
    program.save(path)
    state["onnx_program"] = program
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    graph = onnx.load(path, load_external_data=False).graph
    fixed, symbolic = onnx_fixed_dims(graph, program.exported_program)
    if fixed:
        raise StageFailed("dims symbolic in the program are fixed in the ONNX graph: " + ", ".join(fixed))
    nodes = len(graph.node)
    dropped = _run_time_checks(state["program"])
    detail = f"{size / 1e6:.2f} MB, {nodes} nodes, {symbolic} dims symbolic as in the program ({path})"
    if dropped:
        detail += "; run-time checks the ONNX model does not make: " + ", ".join(
            f"{check['by']} x{check['count']}" for check in dropped)
    return {"detail": detail, "path": path, "bytes": size, "nodes": nodes, "symbolic_dims": symbolic,
            "patches": _hits_of_last_export(), "dropped_checks": dropped}


def onnx_fixed_dims(graph, program) -> tuple:
    """The dims of the ONNX graph's inputs and outputs that the program it was converted from keeps symbolic but
    the graph fixes to a number (``input_ids.shape[1] = 3``: a runtime would refuse every other size), and how
    many symbolic dims were checked. Inputs pair with the program's user inputs by name, outputs with its user
    outputs by position."""
    import torch
    from torch.export.graph_signature import InputKind, OutputKind

    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    users = [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]
    inputs = {name: placeholders[name].meta.get("val") for name in users if name in placeholders}
    # The program returns mutated buffers and inputs (a cache updated in place) before its user outputs; the ONNX
    # graph ends with the same user outputs in the same order: paired from the end.
    returned = next(node for node in program.graph.nodes if node.op == "output").args[0]
    kinds = [spec.kind for spec in program.graph_signature.output_specs]
    users = [node for node, kind in zip(returned, kinds) if kind == OutputKind.USER_OUTPUT]
    # A constant leaf (None) is no graph output: left out, as torch.onnx leaves it out.
    outputs = [node.meta.get("val") for node, kept in zip(users, onnx_inputs.returned_leaves(program)) if kept]
    pairs = [(value, inputs.get(value.name)) for value in graph.input]
    pairs += list(zip(list(graph.output)[-len(outputs):] if outputs else [], outputs))
    fixed, symbolic = [], 0
    for value, traced in pairs:
        if not isinstance(traced, torch.Tensor):
            continue
        dims = value.type.tensor_type.shape.dim
        for index, (size, dim) in enumerate(zip(traced.shape, dims)):
            if not isinstance(size, torch.SymInt) or size.node.maybe_as_int() is not None:
                continue
            symbolic += 1
            if dim.HasField("dim_value"):
                fixed.append(f"{value.name}.shape[{index}] = {dim.dim_value}")
    return fixed, symbolic


#: Assertions on values a program makes at run time (not tensor metadata checks): torch.onnx drops them, so an
#: ONNX model runs on inputs the program would have refused.
_CHECK_TARGETS = ("aten._assert_async.msg", "aten._assert_scalar.default")


def _run_time_checks(program) -> list:
    """The run-time checks of a torch.export program, grouped by who inserted them: the patch whose code made the
    node (its innermost ``autopatch:<id>`` annotation) or ``torch`` (its own guards turned into assertions), each
    with its count and first message."""
    from .attribution import annotated_by

    found: dict = {}
    for node in program.graph.nodes:
        if node.op != "call_function" or str(node.target) not in _CHECK_TARGETS:
            continue
        marks = annotated_by(node)
        by = marks[-1] if marks else "torch"
        message = next((arg for arg in node.args[1:] if isinstance(arg, str)), "")
        entry = found.setdefault(by, {"by": by, "count": 0, "message": message})
        entry["count"] += 1
    return sorted(found.values(), key=lambda check: check["by"])


def _hits_of_last_export() -> dict:
    """The patches the export that just finished used, and how often (``autopatch.last_export_report``)."""
    import autopatch

    return dict((autopatch.last_export_report() or {}).get("patches") or {})


def _patches_used(stages) -> dict:
    """Every patch either export used (torch.export's, torch.onnx.export's: the ONNX conversion adds its own,
    e.g. operator translations), with the larger of its two counts: both exports trace the same model."""
    used: dict = {}
    for stage in stages:
        for patch, hits in (stage.get("patches") or {}).items():
            used[patch] = max(used.get(patch, 0), hits)
    return dict(sorted(used.items()))


def _onnxruntime(state, tolerance: float) -> dict:
    import torch

    program = state["onnx_program"]
    leaves: dict = {}
    for k, inputs in enumerate(state["others"]):
        with torch.no_grad():
            expected = _paths(state["model"](**copy.deepcopy(inputs)))
        # Not program(**inputs): torch pairs the graph's inputs with a dict's values by position (onnx_inputs).
        got = _paths(onnx_inputs.run(program, **copy.deepcopy(inputs)))  # onnxruntime, CPU provider
        _compare_naming_patches(got, expected, tolerance, f"set {'BC'[k]}", leaves, state["program"])
    return _summary(leaves, len(state["others"]))


# --- comparison ------------------------------------------------------------------------------------------------


def _paths(output) -> dict:
    import torch

    flat, _ = torch.utils._pytree.tree_flatten_with_path(output)
    return {_dotted(path): leaf for path, leaf in flat if isinstance(leaf, torch.Tensor)}


def _dotted(path) -> str:
    """A leaf's path as code would name it: ``past_key_values.key_cache[1]``, ``logits``."""
    from torch.utils._pytree import GetAttrKey, MappingKey, SequenceKey

    text = ""
    for key in path:
        if isinstance(key, SequenceKey):
            text += f"[{key.idx}]"
        elif isinstance(key, (MappingKey, GetAttrKey)):
            name = key.key if isinstance(key, MappingKey) else key.name
            text += f".{name}" if isinstance(name, str) and name.isidentifier() else f"[{name!r}]"
        else:
            text += str(key)
    return text.lstrip(".") or "output"


def _compare(got: dict, expected: dict, tolerance: float, label: str, leaves: dict) -> None:
    """Every leaf of eager's at the same path: shapes equal, values within tolerance; the worst kept per path."""
    import torch

    if list(got) != list(expected):
        extra, missing = set(got) - set(expected), set(expected) - set(got)
        raise StageFailed(f"{label}: output structure differs from eager's (program only: {sorted(extra)[:3]}, "
                          f"eager only: {sorted(missing)[:3]})")
    for path, want in expected.items():
        have = torch.as_tensor(got[path])
        if tuple(have.shape) != tuple(want.shape):
            raise StageFailed(f"{label}: {path} has shape {tuple(have.shape)}, eager {tuple(want.shape)}")
        absolute, relative, ok = leaf_difference(have, want, tolerance)
        worst = leaves.setdefault(path, {"max_abs": 0.0, "max_rel": 0.0, "ok": True})
        worst.update(max_abs=max(worst["max_abs"], absolute), max_rel=max(worst["max_rel"], relative),
                     ok=worst["ok"] and ok)
    wrong = [path for path, entry in leaves.items() if not entry["ok"]]
    if wrong:
        raise StageFailed(f"{label}: {len(wrong)} leaves differ from eager beyond {tolerance:g}, first "
                          f"{wrong[0]} (max abs {leaves[wrong[0]]['max_abs']:.3g})")


def leaf_difference(have, want, tolerance: float) -> tuple[float, float, bool]:
    """(max abs, max rel, within tolerance) of one output leaf against eager's, of the same shape: floats within
    ``tolerance`` (absolute and relative, NaN equal to NaN), anything else exactly."""
    import torch

    if want.is_floating_point():
        diff = (have.double() - want.double()).abs()
        absolute = diff.max().item() if diff.numel() else 0.0
        relative = (diff / want.double().abs().clamp_min(1e-12)).max().item() if diff.numel() else 0.0
        return absolute, relative, torch.allclose(have.double(), want.double(), atol=tolerance, rtol=tolerance,
                                                  equal_nan=True)
    exact = torch.equal(have, want)
    return (0.0, 0.0, True) if exact else (float("inf"), float("inf"), False)


def _compare_naming_patches(got, expected, tolerance, label, leaves, program) -> None:
    """``_compare``; a discrepancy also names the patches whose replacements made nodes of the program."""
    try:
        _compare(got, expected, tolerance, label, leaves)
    except StageFailed as exc:
        from .attribution import patches_in_program

        suspects = patches_in_program(program)
        if not suspects:
            raise
        raise StageFailed(f"{exc}; nodes in the program made by {', '.join(suspects)}") from None


def _summary(leaves: dict, sets: int) -> dict:
    worst = max(leaves.items(), key=lambda item: item[1]["max_abs"]) if leaves else ("-", {"max_abs": 0.0})
    return {"detail": f"{sets} input sets of other sizes, {len(leaves)} leaves: max abs {worst[1]['max_abs']:.3g} "
                      f"({worst[0]})", "leaves": leaves}


# --- errors ----------------------------------------------------------------------------------------------------


def _error_text(exc: BaseException) -> str:
    """The error's first line, and its innermost cause's when it has one: torch.onnx wraps what stopped it in a
    ConversionError whose own first line names only the step ("Failed to convert the exported program...")."""
    import re

    text = first_line(exc) + _reason_line(exc)
    *_, cause = causes(exc)
    said = f"{first_line(cause)}{_reason_line(cause)}"
    if cause is not exc and said.partition(": ")[2] != text.partition(": ")[2]:  # torch re-raises the same words
        text = f"{text} <- {said}"
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _reason_line(exc: BaseException) -> str:
    """torch's constraint violations say what went wrong on a ``  - `` line below their first ("You marked
    L['input_ids'].size()[1] as dynamic but your code specialized it to be a constant (3)"): that line, if any."""
    lines = str(exc).splitlines()
    if not lines or "Constraints violated" not in lines[0]:  # other errors' "- " lines are generic advice
        return ""
    for line in lines[1:]:
        if line.lstrip().startswith("- "):
            return " " + line.strip()[:300]
    return ""


def _location(exc: BaseException) -> str:
    """The innermost frame of model or user code (not torch's, not autopatch's, not the standard library's), in
    the error or the one it was raised from."""
    cause = exc.__cause__ or exc.__context__
    frames = outside_frames(exc.__traceback__) + (outside_frames(cause.__traceback__) if cause is not None else [])
    if not frames:
        return ""
    frame, line = frames[-1]
    return f"{frame.f_code.co_filename}:{line} in {frame.f_code.co_name}"
