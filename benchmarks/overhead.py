"""What the agent costs, measured side by side in one run: every measure runs the same child with the agent on
(EXPORT_PATCHES=1) and off (unset), interleaved (off, on, off, on...) so that machine noise hits both alike;
the medians of the per-run values are compared (ratio = on / off).

    python benchmarks/overhead.py [--repeat 7] [--quick]

Measures:
  import          `import torch, transformers` + building a tiny Llama, wall time of a fresh interpreter
  eager           one forward of a tiny Llama (single thread): median over calls, in a child per run; the
                  per-call cost shows most there
  eager 50 ms     the same on a Llama big enough that a forward takes about 50 ms (more runs: a ratio close to
                  1.00 needs them to be told from noise)
  eager+export    the same while another thread of the process exports a model in a loop
  export torch    torch.export of a pure-torch case (two-layer MLP, dynamic batch) that passes either way
  export llama    decode step of a tiny Llama with a DynamicCache: autopatch vs transformers' own helper
                  (register_dynamic_cache_export_support), the one pair where both pass
  peak memory     ru_maxrss of the child that did the llama export (autopatch vs transformers' helper)
  export family   per family of catalogue cases (two cases each), the export time with every default patch
                  (EXPORT_PATCHES=1) against pytree registrations only (EXPORT_PATCHES=pytree), on the cases that
                  export both ways: what the patches add beyond making the inputs flattenable
Every ratio comes with a 95 % interval: the runs are paired (off, on, off, on...), so the interval is the
t-interval of the mean log ratio of the pairs, exponentiated (a geometric mean ratio).
Writes benchmarks/results/overhead.json; benchmarks/report.py puts it in docs/coverage.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))
import provenance  # noqa: E402  (beside this file)


# ---------------------------------------------------------------------------------------------------------------
# children
# ---------------------------------------------------------------------------------------------------------------


#: name -> (LlamaConfig sizes, tokens of the forward).  "50ms": about 50 ms a forward on one thread of the reference
#: machine (17 M parameters, 64 tokens), so that a ratio near 1.00 is the agent's and not the timer's.
LLAMAS = {"tiny": (dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2), 16),
          "50ms": (dict(vocab_size=8192, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                        num_attention_heads=8, num_key_value_heads=4), 64)}

#: Two catalogue cases per family for the per-family export ratio: the ones a user meets first in each family.
FAMILY_CASES = {"torch": ("torch_mlp/forward", "torch_reshape/forward"),
                "decoder": ("llama/decode", "gemma2/decode"),
                "decoder-rope": ("llama_rope_yarn/decode", "phi3_rope_longrope/decode"),
                "moe": ("mixtral/decode", "qwen3_moe/decode"),
                "ssm": ("mamba/decode", "jamba/decode"),
                "seq2seq": ("bart/decode", "t5/decode"),
                "encoder": ("bert/forward", "modernbert/forward"),
                "vlm": ("llava/prefill", "idefics3/prefill")}


def _tiny_llama(size: str = "tiny"):
    import torch
    import transformers

    sizes, _ = LLAMAS[size]
    config = transformers.LlamaConfig(max_position_embeddings=256, **sizes)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def child_import() -> dict:
    _tiny_llama()
    return {}


def _forward_times(model, inputs, calls: int) -> list:
    import torch

    times = []
    with torch.no_grad():
        for _ in range(calls):
            t0 = time.perf_counter()
            model(**inputs)
            times.append(time.perf_counter() - t0)
    return times


def child_eager(calls: int, concurrent: bool, size: str = "tiny") -> dict:
    import threading

    import torch

    torch.set_num_threads(1)
    model = _tiny_llama(size)
    sizes, tokens = LLAMAS[size]
    inputs = {"input_ids": torch.randint(0, sizes["vocab_size"], (1, tokens)), "use_cache": False}
    _forward_times(model, inputs, 5)  # warm
    stop, exports, errors = threading.Event(), [0], []

    def export_loop():
        mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        while not stop.is_set():
            torch.export.export(mlp, (torch.randn(3, 8),), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
            exports[0] += 1

    thread = None
    if concurrent:
        thread = threading.Thread(target=export_loop, daemon=True)
        thread.start()
        time.sleep(0.5)
    times = []
    with torch.no_grad():
        for _ in range(calls):
            t0 = time.perf_counter()
            try:
                model(**inputs)
            except Exception as exc:  # torch's tracer patches Module.__call__ process-wide while it traces
                errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200])
                continue
            times.append(time.perf_counter() - t0)
    stop.set()
    if thread:
        thread.join()
    return {"value": statistics.median(times) if times else float("nan"), "errors": len(errors),
            "first_error": errors[0] if errors else None, "concurrent_exports": exports[0]}


def child_export_torch(exports: int) -> dict:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    shapes = ({0: torch.export.Dim.DYNAMIC},)
    torch.export.export(mlp, (torch.randn(3, 8),), dynamic_shapes=shapes)  # warm: lazy imports
    times = []
    for _ in range(exports):
        t0 = time.perf_counter()
        torch.export.export(mlp, (torch.randn(3, 8),), dynamic_shapes=shapes)
        times.append(time.perf_counter() - t0)
    return {"value": statistics.median(times)}


def child_export_llama(helper: bool) -> dict:
    import copy
    import resource

    import torch

    sys.path.insert(0, str(HERE))
    import catalogue

    torch.set_num_threads(1)
    if helper:
        from transformers.integrations.executorch import register_dynamic_cache_export_support

        register_dynamic_cache_export_support()
    from _child import guess_dynamic_shapes

    model, a, b, _ = catalogue.CASES["llama/decode"].builder()
    shapes = guess_dynamic_shapes(a, b)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.export.export(model, (), kwargs=copy.deepcopy(a), dynamic_shapes=shapes)
    seconds = time.perf_counter() - t0
    return {"value": seconds, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "maxrss_before_export_kb": before}


def child_export_family(names: list) -> dict:
    """Export each named catalogue case once (after one untimed export that pays the lazy imports), as the
    coverage harness's autopatch column does; seconds of the export call alone, and whether it exported."""
    import torch

    sys.path.insert(0, str(HERE))
    import catalogue
    from _child import export, first_line

    torch.set_num_threads(1)
    cases = {}
    for k, name in enumerate([names[0], *names]):
        case = catalogue.CASES[name]
        if case.missing():
            continue
        with torch.no_grad():
            model, a, b, _ = case.builder()
            t0 = time.perf_counter()
            try:
                export("autopatch", case, model, a, b)
                seconds, error = time.perf_counter() - t0, None
            except Exception as exc:
                seconds, error = None, first_line(exc)
        if k:  # the first is the warm-up
            cases[name] = {"seconds": seconds, "error": error}
    return {"value": 0.0, "cases": cases}


def child_main(argv) -> None:
    mode = argv[0]
    if mode == "import":
        out = child_import()
    elif mode == "eager":
        out = child_eager(int(argv[1]), concurrent=False)
    elif mode == "eager_50ms":
        out = child_eager(int(argv[1]), concurrent=False, size="50ms")
    elif mode == "export_family":
        out = child_export_family(argv[1:])
    elif mode == "eager_concurrent":
        out = child_eager(int(argv[1]), concurrent=True)
    elif mode == "export_torch":
        out = child_export_torch(int(argv[1]))
    elif mode == "export_llama":
        out = child_export_llama(helper=argv[1] == "helper")
    else:
        raise SystemExit(f"unknown mode {mode}")
    print("RESULT " + json.dumps(out), flush=True)


# ---------------------------------------------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------------------------------------------


def _env(agent) -> dict:
    """``agent``: False (EXPORT_PATCHES unset), True (``1``) or a selection (``pytree``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXPORT_PATCHES")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore",
               HF_HUB_OFFLINE="1")
    if agent:
        env["EXPORT_PATCHES"] = "1" if agent is True else agent
    return env


#: Two-sided 95 % quantiles of Student's t by degrees of freedom (1 to 30); beyond, the normal's 1.96.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def paired_ratio(off: list, on: list) -> dict:
    """Geometric mean of the paired ratios on/off and its 95 % t-interval (None with fewer than two pairs)."""
    import math

    logs = [math.log(b / a) for a, b in zip(off, on) if a > 0 and b > 0]
    if not logs:
        return {"paired_ratio": None, "ratio_ci": None}
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return {"paired_ratio": math.exp(mean), "ratio_ci": None}
    df = len(logs) - 1
    half = (T975[df - 1] if df <= len(T975) else 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
    return {"paired_ratio": math.exp(mean), "ratio_ci": [math.exp(mean - half), math.exp(mean + half)]}


def _run(python: str, argv: list, agent: bool) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run([python, str(Path(__file__)), "--child", *argv], env=_env(agent), capture_output=True,
                          text=True, cwd="/tmp")
    wall = time.perf_counter() - t0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
        raise RuntimeError(f"child {argv} (agent={agent}) failed: {tail[0]}")
    return wall, json.loads(lines[-1][len("RESULT "):])


def measure(python, name, argv_off, argv_on, repeat, key, unit, note, agent_off=False, agent_on=True):
    """Interleaved runs; ``key`` picks the value: "wall" (the child's wall time) or a field of its result."""
    off, on, extra_off, extra_on = [], [], [], []
    for _ in range(repeat):
        for agent, argv, values, extras in ((agent_off, argv_off, off, extra_off), (agent_on, argv_on, on, extra_on)):
            wall, result = _run(python, argv, agent)
            values.append(wall if key == "wall" else result[key])
            extras.append(result)
    row = {"name": name, "unit": unit, "without": statistics.median(off), "with": statistics.median(on),
           "runs": repeat, "samples_without": off, "samples_with": on, "note": note}
    row["ratio"] = row["with"] / row["without"]
    row.update(paired_ratio(off, on))
    # The best run of each side: less sensitive to other load on the machine than the median.
    row["best_without"], row["best_with"] = min(off), min(on)
    row["best_ratio"] = row["best_with"] / row["best_without"]
    errors_on = sum(r.get("errors", 0) for r in extra_on)
    errors_off = sum(r.get("errors", 0) for r in extra_off)
    if errors_on or errors_off:
        first = next((r["first_error"] for r in extra_on + extra_off if r.get("first_error")), "")
        row["note"] += f"; forwards that raised during a concurrent export: {errors_off} off, {errors_on} on ({first})"
    if any("concurrent_exports" in r for r in extra_on):
        row["concurrent_exports"] = {"without": [r["concurrent_exports"] for r in extra_off],
                                     "with": [r["concurrent_exports"] for r in extra_on]}
    ci = row["ratio_ci"]
    print(f"  {name:<44} {row['without']:.4g} -> {row['with']:.4g} {unit}   x{row['ratio']:.3f}"
          + (f"  [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""), flush=True)
    return row, extra_off, extra_on


def measure_families(python, repeat: int) -> list:
    """Export time per family, EXPORT_PATCHES=1 against EXPORT_PATCHES=pytree, runs interleaved; per family the
    pairs (case, run) where both selections exported."""
    names = [name for cases in FAMILY_CASES.values() for name in cases]
    pytree, full = [], []
    for _ in range(repeat):
        pytree.append(_run(python, ["export_family", *names], "pytree")[1]["cases"])
        full.append(_run(python, ["export_family", *names], True)[1]["cases"])
    rows = []
    for family, cases in FAMILY_CASES.items():
        off, on, only_full = [], [], set()
        for run_off, run_on in zip(pytree, full):
            for name in cases:
                a, b = run_off.get(name, {}).get("seconds"), run_on.get(name, {}).get("seconds")
                if a and b:
                    off.append(a)
                    on.append(b)
                elif b and not a:
                    only_full.add(name)
        failing = sorted({name for run in full for name in cases if name in run and run[name]["error"]})
        row = {"name": f"export, {family} family: pytree only -> all defaults", "unit": "s", "family": family,
               "cases": list(cases), "pairs": len(off), "runs": repeat,
               "needs_more_than_pytree": sorted(only_full), "fails_with_defaults": failing,
               "without": statistics.median(off) if off else None, "with": statistics.median(on) if on else None,
               "note": f"{', '.join(cases)}; pairs where both selections export: {len(off)}"}
        if only_full:
            row["note"] += "; exports only with the defaults (not timed): " + ", ".join(sorted(only_full))
        if failing:
            row["note"] += "; fails with the defaults: " + ", ".join(failing)
        if off:
            row["ratio"] = row["with"] / row["without"]
            row.update(paired_ratio(off, on))
            ci = row["ratio_ci"]
            print(f"  {row['name']:<44} {row['without']:.4g} -> {row['with']:.4g} s   x{row['ratio']:.3f}"
                  + (f"  [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""), flush=True)
        else:
            row.update(ratio=None, paired_ratio=None, ratio_ci=None)
            print(f"  {row['name']:<44} no case exports both ways", flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="interleaved runs per measure")
    parser.add_argument("--calls", type=int, default=200, help="eager forwards per child")
    parser.add_argument("--eager-repeat", type=int, default=12,
                        help="interleaved runs of the ~50 ms forward (a ratio near 1.00 needs more runs)")
    parser.add_argument("--family-repeat", type=int, default=3, help="interleaved runs of the per-family exports")
    parser.add_argument("--quick", action="store_true", help="1 run, few calls (for the smoke test)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--out", default=str(RESULTS / "overhead.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.calls, args.eager_repeat, args.family_repeat = 1, 10, 1, 0
    started = time.perf_counter()
    code = provenance.git_state()
    load_at_start = list(os.getloadavg())
    python = args.python
    versions = json.loads(subprocess.run(
        [python, "-c", "import json, torch, transformers; print(json.dumps({'torch': torch.__version__, "
                       "'transformers': transformers.__version__}))"],
        env=_env(False), capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    print(f"overhead: {args.repeat} interleaved runs per measure, transformers {versions['transformers']}", flush=True)
    rows = []
    rows.append(measure(python, "import torch, transformers + tiny Llama", ["import"], ["import"], args.repeat,
                        "wall", "s", "fresh interpreter, wall time")[0])
    rows.append(measure(python, "eager forward, tiny Llama, 1 thread", ["eager", str(args.calls)],
                        ["eager", str(args.calls)], args.repeat, "value", "s",
                        f"median of {args.calls} calls per run, (1, 16) tokens")[0])
    big_calls = str(max(5, args.calls // 5))
    rows.append(measure(python, "eager forward, ~50 ms Llama, 1 thread", ["eager_50ms", big_calls],
                        ["eager_50ms", big_calls], args.eager_repeat, "value", "s",
                        f"median of {big_calls} calls per run, (1, {LLAMAS['50ms'][1]}) tokens, "
                        f"{args.eager_repeat} runs")[0])
    # With an exporting thread, every forward waits for the GIL (5 ms switch interval): fewer calls.
    concurrent_calls = str(max(5, args.calls // 10))
    rows.append(measure(python, "eager forward while another thread exports", ["eager_concurrent", concurrent_calls],
                        ["eager_concurrent", concurrent_calls], args.repeat, "value", "s",
                        f"a second thread exports a 2-layer MLP in a loop; median of {concurrent_calls} calls "
                        "per run")[0])
    rows.append(measure(python, "export, pure torch (MLP, dynamic batch)", ["export_torch", "5"], ["export_torch", "5"],
                        args.repeat, "value", "s", "median of 5 exports after a warm-up, both columns pass")[0])
    llama_repeat = max(1, min(args.repeat, 3))
    row, off, on = measure(python, "export, llama decode: transformers' helper -> autopatch",
                           ["export_llama", "helper"], ["export_llama", "agent"], llama_repeat, "value", "s",
                           "without = register_dynamic_cache_export_support(), with = EXPORT_PATCHES=1; first "
                           "export in the process (lazy imports included)")
    rows.append(row)
    mem_off = statistics.median(r["maxrss_kb"] for r in off) / 1024
    mem_on = statistics.median(r["maxrss_kb"] for r in on) / 1024
    best_off = min(r["maxrss_kb"] for r in off) / 1024
    best_on = min(r["maxrss_kb"] for r in on) / 1024
    rows.append({"name": "peak memory (ru_maxrss), llama decode export", "unit": "MiB", "without": mem_off,
                 "with": mem_on, "ratio": mem_on / mem_off, "runs": llama_repeat, "best_without": best_off,
                 "best_with": best_on, "best_ratio": best_on / best_off,
                 "note": "the child of the row above: transformers' helper vs autopatch"})
    print(f"  {rows[-1]['name']:<44} {mem_off:.4g} -> {mem_on:.4g} MiB   x{mem_on / mem_off:.3f}")
    if args.family_repeat:
        rows += measure_families(python, args.family_repeat)
    data = {"meta": {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), **code, **versions,
                     "python": platform.python_version(), "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
                     "command": "python benchmarks/overhead.py " + " ".join(sys.argv[1:] if argv is None else argv),
                     "repeat": args.repeat, "seconds": round(time.perf_counter() - started, 1),
                     "load_average_at_start": load_at_start, "load_average_at_end": list(os.getloadavg())},
            "measures": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out} ({data['meta']['seconds']} s)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
    else:
        main()
