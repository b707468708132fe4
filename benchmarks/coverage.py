"""Coverage matrix: which export cases pass with no patches, with autopatch, with transformers' own helper and
with onnx-diagnostic, side by side in one run of one interpreter.

    python benchmarks/coverage.py                      # every case of catalogue.py, all columns
    python benchmarks/coverage.py --cases 'llama*' 'torch_*' --columns none autopatch

Each case runs in its own child interpreter (benchmarks/_child.py) whose export code is plain torch.export:
autopatch is switched on only by EXPORT_PATCHES=1 in that child's environment (the zero-code promise), and
EXPORT_PATCHES_REPORT tells which patches ran.  Results go to benchmarks/results/coverage-<transformers>.json (the
sweep of every architecture is sweep.py's); docs/coverage.md, the chart and the README's generated figures are
regenerated from every results file present (benchmarks/report.py).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import fnmatch
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
CHILD = HERE / "_child.py"
COLUMNS = ["none", "autopatch", "autopatch_strict", "transformers", "onnx_diagnostic", "onnx_diagnostic_off",
           "hf_dynamo", "hf_dynamo_autopatch", "hf_onnx", "hf_onnx_autopatch", "onnx", "onnx_autopatch",
           "onnx_diagnostic_onnx"]
#: Columns whose children run with EXPORT_PATCHES=1 (zero-code activation).
AGENT_COLUMNS = ("autopatch", "autopatch_strict", "hf_dynamo_autopatch", "hf_onnx_autopatch", "onnx_autopatch")
DEFAULT_OD_PYTHON = "/tmp/autopatch-bench/od-{tag}/bin/python"


def clean_env() -> dict:
    """The parent's environment without any autopatch variable, one thread per child (two run at once)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXPORT_PATCHES")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
               PYTHONWARNINGS="ignore")
    return env


def interpreter_versions(python: str) -> dict:
    code = ("import json, platform, torch, transformers; print(json.dumps({'torch': torch.__version__, "
            "'transformers': transformers.__version__, 'python': platform.python_version()}))")
    out = subprocess.run([python, "-c", code], env=clean_env(), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def probe_onnx_diagnostic(python: str | None) -> dict:
    """Whether onnx-diagnostic imports in its interpreter (a throwaway venv, see setup_onnx_diagnostic.sh)."""
    if not python or not Path(python).exists():
        return {"available": False, "error": f"not installed (no interpreter at {python}; "
                                              "run benchmarks/setup_onnx_diagnostic.sh)"}
    code = ("import json, importlib.metadata as m, transformers\n"
            "info = {'version': m.version('onnx-diagnostic'), 'transformers': transformers.__version__}\n"
            "from onnx_diagnostic.torch_export_patches import torch_export_patches\n"
            "print(json.dumps(info))")
    out = subprocess.run([python, "-c", code], env=clean_env(), capture_output=True, text=True)
    if out.returncode != 0:
        lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
        version = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('onnx-diagnostic'))"],
                                 capture_output=True, text=True).stdout.strip()
        return {"available": False, "version": version or None,
                "error": "import fails: " + (lines[-1] if lines else f"exit code {out.returncode}")}
    return {"available": True, **json.loads(out.stdout.strip().splitlines()[-1])}


class Server:
    """A _child.py --server: imports once, forks one process per case (see _child.py)."""

    def __init__(self, python: str, column: str, env: dict, timeout: float, workdir: Path):
        self.proc = subprocess.Popen([python, str(CHILD), "--server", column, str(timeout)], env=env, cwd=workdir,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        self.workdir = workdir
        ready = self.proc.stdout.readline()
        if not ready:
            raise RuntimeError(f"the {column} server did not start (exit code {self.proc.wait()})")

    def run(self, argv: list) -> dict:
        fd, out = tempfile.mkstemp(suffix=".json", dir=self.workdir)
        os.close(fd)
        started = time.perf_counter()
        try:
            self.proc.stdin.write(json.dumps([*argv, out]) + "\n")
            self.proc.stdin.flush()
            answer = json.loads(self.proc.stdout.readline() or '{"status": "crash (server died)"}')["status"]
            with open(out) as f:
                text = f.read()
            if answer == "timeout":  # with what the case left of its work, if it checkpoints (the sweep's rows)
                return {"status": "timeout", "error": "no result within the per-case timeout",
                        "seconds": round(time.perf_counter() - started, 1), "partial": json.loads(text or "null")}
            if not text:
                return {"status": "crash", "error": answer, "seconds": round(time.perf_counter() - started, 1)}
            return json.loads(text)
        finally:
            os.unlink(out)

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()


class Servers:
    """One server per (worker thread, interpreter, column), started on first use."""

    def __init__(self, timeout: float, workdir: Path):
        import threading

        self.timeout, self.workdir, self.local, self.all = timeout, workdir, threading.local(), []

    def run(self, python: str, column: str, argv: list) -> dict:
        servers = self.local.__dict__.setdefault("servers", {})
        key = (python, column)
        if key not in servers or servers[key].proc.poll() is not None:
            env, _ = column_env(column, self.workdir, f"{column}-{len(self.all)}")
            servers[key] = Server(python, column, env, self.timeout, self.workdir)
            self.all.append(servers[key])
        return servers[key].run(argv)

    def close(self):
        for server in self.all:
            server.close()


def column_env(column: str, workdir: Path, tag: str) -> tuple[dict, str | None]:
    """The column's environment: only the agent's columns set EXPORT_PATCHES (and the report file; each forked
    case gets its own report path)."""
    env = clean_env()
    if column in AGENT_COLUMNS:
        report = str(workdir / f"report-{tag}.json")
        env.update(EXPORT_PATCHES="1", EXPORT_PATCHES_REPORT=report)
        return env, report
    return env, None


def run_coverage(args) -> dict:
    import catalogue
    import provenance

    started = time.perf_counter()
    code = provenance.git_state()  # before the run: the code the children import
    versions = interpreter_versions(args.python)
    names = [n for n in catalogue.CASES if not args.cases or any(fnmatch.fnmatch(n, p) for p in args.cases)]
    # one onnx-diagnostic venv per transformers minor (setup_onnx_diagnostic.sh): od-tf457, od-tf512, od-tf523
    od_python = args.od_python or DEFAULT_OD_PYTHON.format(tag="tf" + "".join(versions["transformers"].split(".")[:2]))
    od = probe_onnx_diagnostic(od_python) if any(c.startswith("onnx_diagnostic") for c in args.columns) else None
    if od and od.get("available") and od.get("transformers") != versions["transformers"]:
        od["note"] = f"runs with transformers {od['transformers']} (its own venv)"
    results = {name: {} for name in names}
    jobs = []
    for name in names:
        for column in args.columns:
            if column.startswith("onnx_diagnostic") and not od["available"]:
                results[name][column] = {"status": "unavailable", "error": od["error"]}
                continue
            jobs.append((name, column))
    workdir = Path(tempfile.mkdtemp(prefix="autopatch-coverage-"))
    print(f"coverage: {len(names)} cases x {len(args.columns)} columns, {len(jobs)} children, "
          f"{args.workers} workers, transformers {versions['transformers']}", flush=True)

    servers = Servers(args.timeout, workdir)

    def work(job):
        name, column = job
        python = od_python if column.startswith("onnx_diagnostic") else args.python
        return job, servers.run(python, column, [name, column])

    done = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.workers) as pool:
        for (name, column), result in pool.map(work, jobs):
            done += 1
            result.pop("case", None), result.pop("column", None), result.pop("versions", None)
            results[name][column] = result
            print(f"[{done}/{len(jobs)}] {name:<34} {column:<16} {result['status']:<13} "
                  f"{(result.get('error') or '')[:90]}", flush=True)
    servers.close()
    cases = []
    for name in names:
        case = catalogue.CASES[name]
        cases.append({"name": name, "family": case.family, "kind": case.kind, "note": case.note,
                      "results": {c: results[name][c] for c in args.columns}})
    stamp = {**code, "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
    return {
        "meta": {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            **code,
            **versions,
            "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
            "command": "python benchmarks/coverage.py " + " ".join(sys.argv[1:]),
            "workers": args.workers,
            "timeout": args.timeout,
            "seconds": round(time.perf_counter() - started, 1),
            "load_average_at_end": list(os.getloadavg()),
            "onnx_diagnostic": od,
            # Which code measured each column: a later run may measure some columns again (--merge).
            "column_code": {column: stamp for column in args.columns},
        },
        "columns": args.columns,
        "summary": summarise(cases, args.columns),
        "cases": cases,
    }


def summarise(cases: list, columns: list) -> dict:
    summary = {c: {} for c in columns}
    for case in cases:
        for column in columns:
            status = case["results"][column]["status"]
            summary[column][status] = summary[column].get(status, 0) + 1
    return summary


def merge_columns(old: dict, new: dict) -> dict:
    """``old`` updated by ``new``: the columns and cases ``new`` measured replace ``old``'s, everything else is
    kept (``not_run`` where neither measured a case in a column). Each column keeps the commit that measured it
    in meta.column_code; the other meta fields are ``new``'s."""
    columns = [c for c in COLUMNS if c in new["columns"] or c in old["columns"]]
    fresh = {case["name"]: case for case in new["cases"]}
    cases = [case for case in old["cases"] if case["name"] not in fresh] + list(fresh.values())
    for case in cases:
        measured = fresh[case["name"]]["results"] if case["name"] in fresh else {}
        kept = case["results"] if case["name"] not in fresh else _old_results(old, case["name"])
        case["results"] = {c: measured[c] if c in new["columns"] and c in measured else
                           kept.get(c, {"status": "not_run", "error": "not measured for this case"}) for c in columns}
    legacy = {"commit": old["meta"].get("commit"), "dirty": old["meta"].get("dirty"), "date": old["meta"]["date"]}
    new["meta"]["column_code"] = {**{c: old["meta"].get("column_code", {}).get(c, legacy) for c in old["columns"]},
                                  **new["meta"]["column_code"]}
    if not any(c.startswith("onnx_diagnostic") for c in new["columns"]):  # its columns are old's: so is their version
        new["meta"]["onnx_diagnostic"] = old["meta"].get("onnx_diagnostic")
    new["columns"], new["cases"], new["summary"] = columns, cases, summarise(cases, columns)
    return new


def _old_results(old: dict, name: str) -> dict:
    return next((case["results"] for case in old["cases"] if case["name"] == name), {})


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", help="glob patterns over case names")
    parser.add_argument("--columns", nargs="*", default=COLUMNS, choices=COLUMNS)
    parser.add_argument("--workers", type=int, default=2, help="children at once (the reference machine has 2 cores)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per case and column")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the children")
    parser.add_argument("--od-python", help="interpreter with onnx-diagnostic (default: " + DEFAULT_OD_PYTHON + ")")
    parser.add_argument("--out", help="results JSON (default: benchmarks/results/coverage-<transformers>.json)")
    parser.add_argument("--no-docs", action="store_true", help="do not regenerate docs/coverage.md")
    parser.add_argument("--merge", action="store_true",
                        help="keep the results file's other columns (measure the expensive ones in a run of their own)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    data = run_coverage(args)
    out = Path(args.out) if args.out else RESULTS / f"coverage-{data['meta']['transformers']}.json"
    if args.merge and out.exists():
        data = merge_columns(json.loads(out.read_text()), data)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out} ({data['meta']['seconds']} s)")
    for column, counts in data["summary"].items():
        print(f"  {column:<16} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if not args.no_docs:
        import report

        report.main([])


if __name__ == "__main__":
    main()
