"""One export case in one column, in its own process.  Started by coverage.py; not meant to be run by hand.

    python benchmarks/_child.py CASE COLUMN OUT.json
    python benchmarks/_child.py --arch MODEL_TYPE KIND [--no-onnx] OUT.json   # one architecture of sweep.py
    python benchmarks/_child.py --server COLUMN TIMEOUT      # reads JSON argv lists on stdin, one per line

The server imports torch and transformers once, runs one warm-up export of a two-layer MLP (so the lazy imports
of torch.export are paid once), then forks one child per case: every case still runs in its own process, on a
fresh copy of an interpreter that has exported nothing from transformers.  Its environment is the one the
parent gave (EXPORT_PATCHES=1 for the autopatch column: activation is at interpreter start, zero-code).

The export code is plain torch.export: the column decides only what is around it.
  none            nothing (EXPORT_PATCHES unset in the environment)
  autopatch       nothing in code: EXPORT_PATCHES=1 is set in the environment by the parent (zero-code)
  transformers    transformers.integrations.executorch.register_dynamic_cache_export_support() before export
  onnx_diagnostic with onnx_diagnostic.torch_export_patches(patch_transformers=True): export and run
  onnx_diagnostic_off  the control: the same interpreter, onnx-diagnostic imported and its context entered with
                  every patch off (what its install alone does; it should match 'none')
  onnx, onnx_autopatch, onnx_diagnostic_onnx
                  torch.onnx.export(dynamo=True) of the same model and dynamic shapes instead of torch.export, the
                  file checked by onnx.checker and run by onnxruntime (CPU): no patches, EXPORT_PATCHES=1, and
                  onnx-diagnostic's torch_export_patches around export and run
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


# The package from the checkout when the interpreter has no autopatch installed (the onnx-diagnostic venv):
# importing it with EXPORT_PATCHES unset activates nothing.
try:
    import autopatch  # noqa: F401
except ImportError:
    sys.path.append(os.path.dirname(HERE))
from autopatch.dynamic_shapes import fit_to_signature, guess_dynamic_shapes  # noqa: E402
from autopatch.models.tiny import first_line  # noqa: E402  (one error line, as the sweep reports it)


# Paths deeper than this are not model outputs (a cache holds layers, a layer holds dicts of states).
MAX_DEPTH = 10


def leaves_of(obj) -> dict:
    """Every tensor of a model output, by its path: ModelOutput fields and other dicts, lists and tuples, and the
    attributes (``vars()``) of any other object, such as a cache, its layers and their dicts of linear-attention
    states.  Objects are walked by their attributes rather than by the column's pytree registration, so that a
    registration cannot hide a state from the comparison and every column is judged on the same paths.  Numbers
    and flags that are not tensors are left out: they are a cache's bookkeeping (a sliding layer's seen count),
    rebuilt at the next step rather than carried by a program (README, `DynamicCache` flattened layout)."""
    found: dict = {}
    _walk(obj, "output", found, ())
    return found


def _walk(obj, path: str, found: dict, ancestors: tuple) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        found[path] = obj
        return
    # An object met again below itself (a layer pointing back at its cache) is a cycle, not a new output; one
    # object under two paths is walked under both, as the program's unflattened copy will have two.
    if len(ancestors) > MAX_DEPTH or id(obj) in ancestors:
        return
    for key, child in _children(obj):
        _walk(child, path + key, found, (*ancestors, id(obj)))


def _children(obj) -> list:
    """(path suffix, child) pairs of a container or of an object's attributes; nothing for scalars, classes,
    functions and modules (a model's weights are not its output)."""
    import torch

    if isinstance(obj, dict):  # ModelOutput is a dict of its non-None fields
        return [(f"[{key!r}]", value) for key, value in obj.items()]
    if isinstance(obj, (list, tuple)):
        return [(f"[{i}]", value) for i, value in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, type, torch.nn.Module)) or callable(obj):
        return []
    try:
        attributes = vars(obj)
    except TypeError:  # no __dict__ (torch.dtype, torch.device, slotted objects)
        return []
    return [(f".{name}", value) for name, value in attributes.items()]


def structure_difference(got: dict, expected: dict) -> str | None:
    """The first path where the program's output tree and eager's differ (eager's order first), or None."""
    for path in expected:
        if path not in got:
            return f"{path}: in the eager output, missing from the program's"
    for path in got:
        if path not in expected:
            return f"{path}: in the program's output, not in eager's"
    return None


def compare(got, expected) -> tuple[bool, str]:
    """Every tensor leaf of eager's output against the program's at the same path; the two trees must hold the
    same paths (a leaf the program drops or adds is a wrong result, not a shorter comparison)."""
    import torch

    g, e = leaves_of(got), leaves_of(expected)
    if not e:
        return False, f"no tensor found in the eager output ({type(expected).__name__})"
    difference = structure_difference(g, e)
    if difference:
        return False, "structure: " + difference
    worst = 0.0
    for path, b in e.items():
        a = g[path]
        if a.shape != b.shape:
            return False, f"{path}: shape {tuple(a.shape)} vs eager {tuple(b.shape)}"
        if a.dtype != b.dtype:
            return False, f"{path}: dtype {a.dtype} vs eager {b.dtype}"
        if b.numel() == 0:
            continue
        if b.is_floating_point():
            diff = (a.float() - b.float()).abs().max().item()
            worst = max(worst, diff)
            # 1e-4, but never below two units in the last place of the output's own dtype: a float16 model's
            # logits cannot agree closer than that between two runtimes (onnxruntime rounds its fp16 kernels
            # differently from torch's), and 1e-4 is a tenth of one fp16 ulp.
            tolerance = max(1e-4, 2 * torch.finfo(b.dtype).eps)
            if not torch.allclose(a.float(), b.float(), atol=tolerance, rtol=tolerance, equal_nan=True):
                return False, f"{path}: max abs diff {diff:.3g}"
        elif not torch.equal(a, b):
            return False, f"{path}: integer values differ"
    return True, f"max abs diff {worst:.3g} over {len(e)} tensors"


#: Columns that export through transformers' own exporters (5.x ``transformers.exporters``, their public API with
#: ``dynamic=True``) and run the result with transformers' own runner; ``*_autopatch`` with EXPORT_PATCHES=1.
HF_EXPORTERS = {"hf_dynamo": "dynamo", "hf_dynamo_autopatch": "dynamo", "hf_onnx": "onnx",
                "hf_onnx_autopatch": "onnx"}


#: Columns that convert to ONNX (torch.onnx.export, dynamo=True) and run the file with onnxruntime.
ONNX_COLUMNS = ("onnx", "onnx_autopatch", "onnx_diagnostic_onnx")


def reference(column: str, model, inputs: dict):
    """Eager's outputs for the comparison. transformers' exporters pop the output flags (``use_cache``...) from the
    inputs and apply them to ``model.config`` for the trace (``patch_model_config``: only where the config declares
    one, and not to sub-models' own configs: a VLM's composite config has no ``use_cache``, T5's decoder stack reads
    its own). Their programs then return what eager returns with the flags given that way: the reference is eager
    called exactly so, through their own function, so that the column measures the program and not that contract."""
    if column not in HF_EXPORTERS:
        return model(**copy.deepcopy(inputs))
    from transformers.exporters.exporter_dynamo import patch_model_config
    from transformers.exporters.utils import _OUTPUT_FLAGS

    given = copy.deepcopy(inputs)
    flags = {flag: given.pop(flag) for flag in _OUTPUT_FLAGS if flag in given}
    with patch_model_config(model, flags):
        return model(**given)


def column_context(column: str, result: dict):
    if column in HF_EXPORTERS:
        try:
            import transformers.exporters  # noqa: F401
        except ImportError:
            raise LookupError("n/a") from None
        return contextlib.nullcontext()
    if column == "transformers":
        from transformers.integrations import executorch

        helper = getattr(executorch, "register_dynamic_cache_export_support", None)
        if helper is None:
            raise LookupError("n/a")
        helper()
        result["helpers"] = ["transformers.integrations.executorch.register_dynamic_cache_export_support"]
        return contextlib.nullcontext()
    if column.startswith("onnx_diagnostic"):
        from onnx_diagnostic.torch_export_patches import torch_export_patches

        if column == "onnx_diagnostic_off":
            return torch_export_patches(patch_sympy=False, patch_torch=False, patch_transformers=False)
        return torch_export_patches(patch_transformers=True)
    return contextlib.nullcontext()


def export(column: str, case, model, a, b):
    """Exports as the column does; returns the function that runs the result on a set of inputs."""
    import torch

    if column in HF_EXPORTERS:
        if HF_EXPORTERS[column] == "onnx":
            from transformers.exporters.exporter_onnx import OnnxConfig as Config, OnnxExporter as Exporter
        else:
            from transformers.exporters.exporter_dynamo import DynamoConfig as Config, DynamoExporter as Exporter
        exported = Exporter().export(model, copy.deepcopy(a), Config(dynamic=True))
        return lambda inputs: exported(**inputs)
    shapes = case.dynamic_shapes(a) if case.dynamic_shapes else guess_dynamic_shapes(a, b)
    shapes = fit_to_signature(model, shapes)
    if column in ONNX_COLUMNS:
        return export_onnx(model, a, shapes)
    program = torch.export.export(model, (), kwargs=copy.deepcopy(a), dynamic_shapes=shapes,
                                  strict=column == "autopatch_strict")
    return lambda inputs: program.module()(**inputs)


def export_onnx(model, a: dict, shapes):
    """torch.onnx.export(dynamo=True) as a user writes it, the file saved and checked by onnx.checker; returns the
    function that runs it with onnxruntime and rebuilds the program's output tree from the flat ONNX outputs (so
    that every leaf and the structure are compared, as for the other columns)."""
    import tempfile

    import onnx
    import torch

    from autopatch import onnx_inputs

    program = torch.onnx.export(model, (), kwargs=copy.deepcopy(a), dynamic_shapes=shapes, dynamo=True,
                                verbose=False)
    path = os.path.join(tempfile.mkdtemp(prefix="autopatch-coverage-onnx-"), "model.onnx")
    program.save(path)
    onnx.checker.check_model(path)

    def run(inputs):
        # Not program(**inputs), which pairs the graph's inputs with the dict's values by position (onnx_inputs).
        return onnx_inputs.run(program, **inputs)  # onnxruntime, CPU provider; the program's output tree

    return run


def error_text(exc: BaseException) -> str:
    """The error's first line and its innermost cause's, as ``autopatch validate`` words it: torch.onnx wraps what
    stopped it (torch.export's guard, a missing ONNX translation) in an error whose own first line names only the
    step."""
    from autopatch.validate import _error_text

    return _error_text(exc)


def run_case(case_name: str, column: str) -> dict:
    result = {"case": case_name, "column": column, "status": None, "error": None, "detail": None}
    started = time.perf_counter()
    try:
        import torch
        import transformers

        result["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
        import catalogue

        case = catalogue.CASES[case_name]
        missing = case.missing()
        if missing:
            result.update(status="unavailable", error="missing in this transformers: " + ", ".join(missing))
            return result
        try:
            context = column_context(column, result)
        except LookupError:
            result.update(status="n/a", error="no exporter helper in this transformers")
            return result
        except Exception as exc:
            result.update(status="unavailable", error="cannot import or set up: " + first_line(exc))
            return result
        torch.set_num_threads(1)
        try:
            with torch.no_grad():
                model, a, b, c = case.builder()
        except Exception as exc:
            result.update(status="build_error", error=first_line(exc))
            return result
        with torch.no_grad():  # the reference: plain eager, outside any column's context
            try:
                expected = reference(column, model, c)
            except Exception as exc:
                result.update(status="build_error", error="eager on C: " + first_line(exc))
                return result
        if column in HF_EXPORTERS and case.family == "torch":
            result.update(status="n/a", error="transformers' exporters take transformers models")
            return result
        with context, torch.no_grad():
            try:
                t0 = time.perf_counter()
                run = export(column, case, model, a, b)
                result["export_seconds"] = round(time.perf_counter() - t0, 3)
            except Exception as exc:
                result.update(status="export_error", error=error_text(exc))
                return result
            try:
                got = run(copy.deepcopy(c))
            except Exception as exc:
                result.update(status="run_error", error=first_line(exc))
                return result
            same, detail = compare(got, expected)
            result.update(status="ok" if same else "wrong_result", detail=detail)
            if not same:
                result["error"] = detail
    except Exception as exc:  # the harness itself: reported, never hidden
        result.update(status="harness_error", error=first_line(exc), traceback=traceback.format_exc()[-2000:])
    finally:
        result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def _patches_used(path: str) -> dict:
    try:
        with open(path) as f:
            exports = json.load(f).get("exports", [])
    except (OSError, ValueError):
        return {}
    hits: dict = {}
    for run in exports:
        for patch, count in (run.get("patches") or {}).items():
            if not patch.startswith("agent.scope."):
                hits[patch] = hits.get(patch, 0) + count
    return dict(sorted(hits.items()))


def _one(argv) -> None:
    if argv[0] == "--select":  # benchmarks/needed.py: this case with another selection than the server's
        import autopatch

        autopatch.enable(argv[1])
        argv = argv[2:]
    if argv[0] == "--arch":  # --arch MODEL_TYPE KIND [--no-onnx] OUT
        import sweep_arch

        out = argv[-1]

        def checkpoint(partial):  # what a timeout leaves in OUT: the steps done, the one running
            with open(out, "w") as f:
                json.dump(partial, f)

        result = sweep_arch.run(argv[1], argv[2], onnx="--no-onnx" not in argv[3:-1], checkpoint=checkpoint)
    else:
        result = run_case(argv[0], argv[1])
        out = argv[2]
    report = os.environ.get("EXPORT_PATCHES_REPORT")
    if report:
        result["patches"] = _patches_used(report)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


def _warm_up(column: str) -> None:
    import torch
    import transformers  # noqa: F401  (the lazy top level only)

    import catalogue  # noqa: F401

    torch.set_num_threads(1)
    if column.startswith("onnx_diagnostic"):
        try:
            import onnx_diagnostic.torch_export_patches  # noqa: F401
        except Exception:
            pass
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    report = os.environ.pop("EXPORT_PATCHES_REPORT", None)  # the warm-up is not part of any case's report
    torch.export.export(model, (torch.randn(3, 4),), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    if report:
        os.environ["EXPORT_PATCHES_REPORT"] = report


def serve(column: str, timeout: float) -> None:
    """One JSON argv list per stdin line -> fork, run it, answer one line {"status": "done"|"timeout"|"crash"}."""
    import signal

    _warm_up(column)
    report_base = os.environ.get("EXPORT_PATCHES_REPORT")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        argv = json.loads(line)
        report = f"{argv[-1]}.report.json" if report_base else None
        pid = os.fork()
        if pid == 0:  # the case's own process
            code = 0
            # The server's stdout is its answer channel: whatever a case prints (torch.onnx's progress lines) goes
            # to stderr instead.
            os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
            try:
                if report:
                    os.environ["EXPORT_PATCHES_REPORT"] = report
                _one(argv)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        deadline = time.monotonic() + timeout
        status = None
        while status is None:
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = "done" if os.WIFEXITED(code) and os.WEXITSTATUS(code) == 0 else f"crash (wait status {code})"
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = "timeout"
            else:
                time.sleep(0.05)
        if report and os.path.exists(report):
            os.unlink(report)
        print(json.dumps({"status": status}), flush=True)


def main(argv) -> None:
    if argv[0] == "--server":
        serve(argv[1], float(argv[2]))
    else:
        _one(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
