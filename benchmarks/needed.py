"""Which default patches a torch and transformers release still needs (issue 19, item 5).

    python benchmarks/needed.py --coverage coverage.json            # that run's autopatch column, this interpreter
    python benchmarks/needed.py --coverage coverage.json --only 'torch.*'

A patch is *needed* on a release when some catalogue case that passes with the agent (``EXPORT_PATCHES=1``) and
used the patch (its hits in the coverage run) fails with every default but that one (``EXPORT_PATCHES=all,-<id>``):
the first such case is recorded with its status and error. A patch every one of whose cases still passes without
it is *not needed* here: a row upstream has made unnecessary, to retire once no supported release needs it. A
default patch no case used is *not exercised*: the catalogue says nothing about it.

Every case runs in a child forked from the coverage harness's autopatch-column server (benchmarks/_child.py,
started with EXPORT_PATCHES=1), which selects ``all,-<id>`` before it runs; a patch's cases run cheapest first. The coverage file must come from this
interpreter's versions (torch_release.sh passes the one it just measured). Results:
benchmarks/results/needed-torch-<version>-transformers-<version>.json; benchmarks/report.py folds every such file
into the package's ``autopatch/measured_needs.json``, which ``autopatch status`` reads.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import fnmatch
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import coverage  # noqa: E402  (benchmarks/coverage.py: the catalogue's harness)
import provenance  # noqa: E402
from torch_release import first_line  # noqa: E402  (one error line, as the release results record it)

NEEDED, NOT_NEEDED, NOT_EXERCISED = "needed", "not_needed", "not_exercised"


def base_version(version: str) -> str:
    """'2.13.0+cpu' -> '2.13.0': a release, whatever its build."""
    return version.split("+")[0]


def default_patches(python: str) -> list:
    """Ids of the patches EXPORT_PATCHES=1 selects, as the measured interpreter's registry has them."""
    code = "import json; from autopatch import registry; print(json.dumps([s.id for s in registry.PATCHES if s.default]))"
    out = subprocess.run([python, "-c", code], env=coverage.clean_env(), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cases_using(coverage_data: dict) -> dict:
    """patch id -> the cases that pass with the agent and hit it, cheapest first."""
    using: dict = {}
    for case in coverage_data["cases"]:
        result = case["results"].get("autopatch") or {}
        if result.get("status") != "ok":
            continue
        for patch_id in result.get("patches") or {}:
            using.setdefault(patch_id, []).append((result.get("seconds") or 0.0, case["name"]))
    return {patch_id: [name for _, name in sorted(pairs)] for patch_id, pairs in using.items()}


def measure_one(servers, python: str, patch_id: str, cases: list) -> dict:
    """Runs ``cases`` with every default but ``patch_id`` until one fails. Each case is forked from a server
    started with EXPORT_PATCHES=1 (the autopatch column's), and the child selects ``all,-<id>`` before it runs:
    the row is undone as ``autopatch.enable`` undoes any row, and no interpreter start is paid per patch."""
    if not cases:
        return {"verdict": NOT_EXERCISED, "cases": []}
    tried = []
    for name in cases:
        result = servers.run(python, "autopatch", ["--select", f"all,-{patch_id}", name, "autopatch"])
        tried.append(name)
        if result["status"] != "ok":
            return {"verdict": NEEDED, "case": name, "status": result["status"],
                    "error": first_line(result.get("error")), "cases": tried}
    return {"verdict": NOT_NEEDED, "cases": tried}


def run(args) -> dict:
    started = time.perf_counter()
    code = provenance.git_state()
    versions = coverage.interpreter_versions(args.python)
    data = json.loads(Path(args.coverage).read_text())
    measured = {k: base_version(data["meta"].get(k, "")) for k in ("torch", "transformers")}
    here = {k: base_version(versions[k]) for k in ("torch", "transformers")}
    if measured != here:
        raise SystemExit(f"needed.py: {args.coverage} was measured with {measured}, this interpreter has {here}")
    if "autopatch" not in data.get("columns", []):
        raise SystemExit(f"needed.py: {args.coverage} has no autopatch column (columns: {data.get('columns')})")
    using = cases_using(data)
    ids = [i for i in default_patches(args.python) if not args.only or any(fnmatch.fnmatch(i, p) for p in args.only)]
    workdir = Path(tempfile.mkdtemp(prefix="autopatch-needed-"))
    print(f"needed: {len(ids)} default patches, {sum(1 for i in ids if using.get(i))} used by a passing case, "
          f"torch {here['torch']}, transformers {here['transformers']}", flush=True)
    patches = {}
    servers = coverage.Servers(args.timeout, workdir)  # one autopatch-column server per worker thread
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.workers) as pool:
        jobs = {pool.submit(measure_one, servers, args.python, i, using.get(i, [])): i for i in ids}
        for done, job in enumerate(concurrent.futures.as_completed(jobs), 1):
            patch_id = jobs[job]
            patches[patch_id] = job.result()
            result = patches[patch_id]
            why = f"{result['case']}: {result['status']}" if result["verdict"] == NEEDED else \
                f"{len(result['cases'])} cases pass without it" if result["cases"] else ""
            print(f"[{done}/{len(ids)}] {patch_id:<58} {result['verdict']:<13} {why[:90]}", flush=True)
    servers.close()
    return {
        "meta": {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), **code,
                 "torch": versions["torch"], "transformers": versions["transformers"],
                 "python": versions["python"], "coverage": {k: data["meta"].get(k) for k in ("commit", "date")},
                 "command": "python benchmarks/needed.py " + " ".join(sys.argv[1:]),
                 "seconds": round(time.perf_counter() - started, 1)},
        "patches": {i: patches[i] for i in ids},
    }


def merge(old: dict, new: dict) -> dict:
    """``new``'s verdicts over ``old``'s; each verdict keeps the commit that measured it (meta.patch_code)."""
    stamp = {k: new["meta"].get(k) for k in ("commit", "dirty", "date")}
    legacy = {k: old["meta"].get(k) for k in ("commit", "dirty", "date")}
    code = {i: old["meta"].get("patch_code", {}).get(i, legacy) for i in old["patches"]}
    code.update({i: stamp for i in new["patches"]})
    patches = {**old["patches"], **new["patches"]}
    new["meta"]["patch_code"] = {i: code[i] for i in patches}
    new["patches"] = patches
    return new


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coverage", required=True, help="a coverage.py results file with the autopatch column")
    parser.add_argument("--only", nargs="*", help="glob patterns over patch ids")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per case")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the release measured")
    parser.add_argument("--out", help="default: benchmarks/results/needed-torch-<v>-transformers-<v>.json")
    parser.add_argument("--merge", action="store_true",
                        help="keep the results file's verdicts of the patches this run does not measure (--only)")
    args = parser.parse_args(argv)
    data = run(args)
    torch, transformers = (base_version(data["meta"][k]) for k in ("torch", "transformers"))
    out = Path(args.out) if args.out else coverage.RESULTS / f"needed-torch-{torch}-transformers-{transformers}.json"
    if args.merge and out.exists():
        data = merge(json.loads(out.read_text()), data)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    counts = Counter(result["verdict"] for result in data["patches"].values())
    print(f"wrote {out} ({data['meta']['seconds']} s): " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
