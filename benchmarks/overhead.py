"""What the agent costs, measured side by side in one run: every measure runs the same child with the agent on
(EXPORT_PATCHES=1) and off (unset), interleaved (off, on, off, on...) so that machine noise hits both alike;
the medians of the per-run values are compared (ratio = on / off).

    python benchmarks/overhead.py [--repeat 7] [--quick]

Measures:
  import          `import torch, transformers` + building a tiny Llama, wall time of a fresh interpreter
  eager           one forward of a tiny Llama (single thread): median over calls, in a child per run
  eager+export    the same while another thread of the process exports a model in a loop
  export torch    torch.export of a pure-torch case (two-layer MLP, dynamic batch) that passes either way
  export llama    decode step of a tiny Llama with a DynamicCache: autopatch vs transformers' own helper
                  (register_dynamic_cache_export_support), the one pair where both pass
  peak memory     ru_maxrss of the child that did the llama export (autopatch vs transformers' helper)
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


def _tiny_llama():
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
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


def child_eager(calls: int, concurrent: bool) -> dict:
    import threading

    import torch

    torch.set_num_threads(1)
    model = _tiny_llama()
    inputs = {"input_ids": torch.randint(0, 128, (1, 16)), "use_cache": False}
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


def child_main(argv) -> None:
    mode = argv[0]
    if mode == "import":
        out = child_import()
    elif mode == "eager":
        out = child_eager(int(argv[1]), concurrent=False)
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


def _env(agent: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXPORT_PATCHES")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore",
               HF_HUB_OFFLINE="1")
    if agent:
        env["EXPORT_PATCHES"] = "1"
    return env


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
    print(f"  {name:<44} {row['without']:.4g} -> {row['with']:.4g} {unit}   x{row['ratio']:.3f}", flush=True)
    return row, extra_off, extra_on


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="interleaved runs per measure")
    parser.add_argument("--calls", type=int, default=200, help="eager forwards per child")
    parser.add_argument("--quick", action="store_true", help="1 run, few calls (for the smoke test)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--out", default=str(RESULTS / "overhead.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.calls = 1, 10
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
