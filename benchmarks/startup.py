"""Interpreter start-up with autopatch installed, measured side by side against the same interpreter without it.

    python benchmarks/startup.py [--repeat 40]

Two throwaway venvs from the same base Python: one with the autopatch wheel built from this checkout (so its
real .pth is in site-packages), one without.  Runs are interleaved (A, B, A, B, ...) so that machine noise hits
both alike; medians are compared.  The claim to check: with EXPORT_PATCHES unset, `python -c pass` is not
measurably slower with the package installed.  Activation (EXPORT_PATCHES=1: imports autopatch and wrapt and
registers hooks, no torch) is shown too.  Takes about a minute on 2 cores.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
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


def _time(python: Path, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], env=env, check=True)
    return time.perf_counter() - start


def measure(repeat: int) -> dict:
    """Start-up samples (seconds) per interpreter, interleaved runs in throwaway venvs."""
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("EXPORT_PATCHES", "PYTHON"))}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "-q", "wheel", "--no-deps", "-w", str(root / "dist"), str(REPO)],
                       check=True, capture_output=True)
        wheel = next((root / "dist").glob("autopatch-*.whl"))
        with_pkg = _venv(root, "with", str(wheel))
        without = _venv(root, "without", "wrapt", "packaging")  # same dependencies, no autopatch
        cases = {
            "without autopatch": (without, base_env),
            "with autopatch, EXPORT_PATCHES unset": (with_pkg, base_env),
            "with autopatch, EXPORT_PATCHES=1": (with_pkg, {**base_env, "EXPORT_PATCHES": "1"}),
        }
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
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "startup.json"))
    args = parser.parse_args(argv)
    code = provenance.git_state()  # before the wheel is built from the checkout
    samples = measure(args.repeat)
    baseline = statistics.median(samples["without autopatch"])
    results = {"meta": {"command": f"python benchmarks/startup.py --repeat {args.repeat}", "repeat": args.repeat,
                        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        **code, "python": platform.python_version(), "machine": f"{os.cpu_count()} cpus"},
               "cases": {}}
    print(f"interpreter start-up, median of {args.repeat} interleaved runs")
    for name, values in samples.items():
        median = statistics.median(values)
        results["cases"][name] = {"median_ms": round(median * 1000, 2), "ratio": round(median / baseline, 3)}
        print(f"  {name:<40} {median * 1000:7.2f} ms   x{median / baseline:.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
