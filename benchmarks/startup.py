"""Interpreter start-up with autopatch installed, measured side by side against the same interpreter without it.

    python benchmarks/startup.py [--repeat 40] [--compare REF]

Two throwaway venvs from the same base Python: one with the autopatch wheel built from this checkout (so its
real .pth is in site-packages), one without.  Runs are interleaved (A, B, A, B, ...) so that machine noise hits
both alike; medians are compared, with the spread (quartiles) beside them.  The claims to check: with
EXPORT_PATCHES unset, `python -c pass` is not measurably slower with the package installed; with
EXPORT_PATCHES=1, activation (selection parsed, hooks armed; wrapt, importlib.metadata, packaging and torch
wait for the first import of a module a patch waits for) stays a fraction of the interpreter's own start-up.
``--compare REF`` adds a third venv with the wheel built from a git ref (e.g. HEAD, the last commit), measured
in the same interleaved run: before and after a change, side by side.  Takes about a minute on 2 cores.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import provenance  # noqa: E402  (beside this file)


def _venv(root: Path, name: str, *packages: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(root / name)], check=True)
    python = root / name / "bin" / "python"
    if packages:
        subprocess.run([str(python), "-m", "pip", "-q", "--disable-pip-version-check", "install", *packages],
                       check=True, capture_output=True)
    return python


def _wheel(source: Path, dist: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "-q", "wheel", "--no-deps", "-w", str(dist), str(source)],
                   check=True, capture_output=True)
    return next(dist.glob("autopatch-*.whl"))


def _checkout(ref: str, root: Path) -> Path:
    """The tree of a git ref, extracted (not a worktree: nothing in the repository changes)."""
    archive = root / "ref.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref], cwd=REPO, check=True, capture_output=True)
    tree = root / "ref"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return tree


def _time(python: Path, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], env=env, check=True)
    return time.perf_counter() - start


def measure(repeat: int, compare: str | None = None) -> dict:
    """Start-up samples (seconds) per interpreter, interleaved runs in throwaway venvs."""
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("EXPORT_PATCHES", "PYTHON"))}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with_pkg = _venv(root, "with", str(_wheel(REPO, root / "dist")))
        without = _venv(root, "without", "wrapt", "packaging")  # same dependencies, no autopatch
        cases = {
            "without autopatch": (without, base_env),
            "with autopatch, EXPORT_PATCHES unset": (with_pkg, base_env),
            "with autopatch, EXPORT_PATCHES=1": (with_pkg, {**base_env, "EXPORT_PATCHES": "1"}),
        }
        if compare:
            at_ref = _venv(root, "ref", str(_wheel(_checkout(compare, root), root / "dist-ref")))
            cases[f"with autopatch @{compare}, EXPORT_PATCHES unset"] = (at_ref, base_env)
            cases[f"with autopatch @{compare}, EXPORT_PATCHES=1"] = (at_ref, {**base_env, "EXPORT_PATCHES": "1"})
        samples = {name: [] for name in cases}
        for name, (python, env) in cases.items():  # warm the OS caches once
            _time(python, env)
        for _ in range(repeat):
            for name, (python, env) in cases.items():
                samples[name].append(_time(python, env))
    return samples


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--compare", metavar="REF",
                        help="also measure the wheel built from this git ref (e.g. HEAD), in the same run")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "startup.json"))
    args = parser.parse_args(argv)
    code = provenance.git_state()  # before the wheel is built from the checkout
    samples = measure(args.repeat, compare=args.compare) if args.compare else measure(args.repeat)
    baseline = statistics.median(samples["without autopatch"])
    command = f"python benchmarks/startup.py --repeat {args.repeat}"
    if args.compare:
        command += f" --compare {args.compare}"
    results = {"meta": {"command": command, "repeat": args.repeat,
                        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        **code, "python": platform.python_version(), "machine": f"{os.cpu_count()} cpus"},
               "cases": {}}
    print(f"interpreter start-up, median of {args.repeat} interleaved runs (spread: first and third quartiles)")
    width = max(len(name) for name in samples)
    for name, values in samples.items():
        median = statistics.median(values)
        q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (median, median, median)
        results["cases"][name] = {"median_ms": round(median * 1000, 2), "q1_ms": round(q1 * 1000, 2),
                                  "q3_ms": round(q3 * 1000, 2), "ratio": round(median / baseline, 3)}
        print(f"  {name:<{width}} {median * 1000:7.2f} ms  [{q1 * 1000:6.2f} - {q3 * 1000:6.2f}]   "
              f"x{median / baseline:.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
