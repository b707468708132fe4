"""The sweep: every architecture of transformers' auto mappings, built tiny, exported with EXPORT_PATCHES=1 only.

    python benchmarks/sweep.py                          # every kind, 2 workers, resumes an unfinished run
    python benchmarks/sweep.py --kinds causal --only 'qwen*' llama --workers 1
    python benchmarks/sweep.py --fresh                  # forget what the results file holds and start again
    python benchmarks/sweep.py --no-onnx                # torch.export only (no torch.onnx.export step)

This is the supported-models list: one row per architecture (tiny.architectures: causal LM, seq2seq, vision-language,
speech seq2seq, encoders), with a verdict per step (prefill or forward, decode with the model's own cache, an
8-step decode loop, strict=True, and the main step through torch.onnx.export and onnxruntime) from sweep_arch.py.
Each architecture runs in its own forked process (_child.py's server) with a timeout; a crash or a hang is that
architecture's verdict, not the run's end.

The results file (benchmarks/results/sweep-<transformers>.json) is written after every architecture, with the
commit it was measured at: a run that stops (a time limit, Ctrl-C, a lost machine) resumes where it stopped when
started again at the same commit, and starts afresh at any other.  One progress line per step:

    [ 12/391] causal   llama                  decode    ok        2.3 s
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

from coverage import Servers, clean_env, interpreter_versions  # noqa: E402  (beside this file)

#: Step names in the order the page shows them (a kind has some of them).
STEP_ORDER = ("prefill", "forward", "decode", "loop", "strict", "onnx")


def list_architectures(python: str, kinds: list) -> list:
    """[(model_type, kind, class_name)] as tiny.architectures gives them, in the measured interpreter."""
    code = ("import json, sys; sys.path.insert(0, %r); from autopatch.models import tiny\n"
            "print(json.dumps([(a.model_type, a.kind, a.class_name) for a in tiny.architectures(%r)]))"
            % (str(HERE.parent), tuple(kinds)))
    out = subprocess.run([python, "-c", code], env=clean_env(), capture_output=True, text=True, check=True)
    return [tuple(row) for row in json.loads(out.stdout.strip().splitlines()[-1])]


def resumable(path: Path, code: dict, versions: dict, onnx: bool = True) -> list:
    """The rows of an earlier run of the same code, versions and steps that did not finish, or []."""
    if not path.exists():
        return []
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return []
    meta = old.get("meta", {})
    same = all(meta.get(k) == code.get(k) for k in ("commit", "dirty")) and \
        all(meta.get(k) == versions.get(k) for k in ("torch", "transformers")) and meta.get("onnx", False) == onnx
    return old.get("architectures", []) if same and not meta.get("complete") else []


def progress_line(done: int, total: int, row: dict) -> list:
    head = f"[{done:>{len(str(total))}}/{total}] {row['kind']:<8} {row['model_type']:<26}"
    if row["build"] != "ok":
        return [f"{head} build     {row['build']:<9} {row.get('build_error', '')[:90]}"]
    lines = []
    for step in STEP_ORDER:
        entry = row["steps"].get(step)
        if entry:
            detail = "" if entry["verdict"] == "ok" else f"{entry['outcome']}: {entry['detail'][:80]}"
            lines.append(f"{head} {step:<9} {entry['verdict']:<9} {entry['seconds']:6.1f} s  {detail}".rstrip())
    return lines


def run(args) -> dict:
    import provenance

    started = time.perf_counter()
    code = provenance.git_state()
    versions = interpreter_versions(args.python)
    # A run of some architectures only is a look, not the page's numbers: it goes to /tmp unless told otherwise.
    default = RESULTS if not args.only else Path(tempfile.gettempdir())
    out = Path(args.out) if args.out else default / f"sweep-{versions['transformers']}.json"
    archs = list_architectures(args.python, args.kinds)
    if args.only:
        archs = [a for a in archs if any(fnmatch.fnmatch(a[0], p) for p in args.only)]
    kept = [] if args.fresh else resumable(out, code, versions, onnx=not args.no_onnx)
    done_keys = {(r["model_type"], r["kind"]) for r in kept}
    todo = [a for a in archs if (a[0], a[1]) not in done_keys]
    rows = list(kept)
    meta = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), **code, **versions,
            "command": "python benchmarks/sweep.py " + " ".join(sys.argv[1:]), "workers": args.workers,
            "timeout": args.timeout, "kinds": list(args.kinds), "onnx": not args.no_onnx, "architectures": len(archs),
            "shipped": [[a[1], a[0]] for a in archs], "complete": False}
    print(f"sweep: {len(archs)} architectures ({len(kept)} kept from an unfinished run at this commit), "
          f"transformers {versions['transformers']}, torch {versions['torch']}, {args.workers} workers, "
          f"{args.timeout:.0f} s each -> {out}", flush=True)
    lock = threading.Lock()
    servers = Servers(args.timeout, Path(tempfile.mkdtemp(prefix="autopatch-sweep-")))

    def save(complete: bool) -> None:
        order = {(a[0], a[1]): i for i, a in enumerate(archs)}
        rows.sort(key=lambda r: order.get((r["model_type"], r["kind"]), len(order)))
        meta.update(complete=complete, seconds=round(time.perf_counter() - started, 1))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"meta": meta, "architectures": rows}, indent=1) + "\n")

    def work(arch):
        model_type, kind, class_name = arch
        if args.limit and time.perf_counter() - started > args.limit:
            return None
        t0 = time.perf_counter()
        row = servers.run(args.python, "autopatch", ["--arch", model_type, kind, *(["--no-onnx"] * args.no_onnx)])
        partial = row.get("partial") if row.get("status") == "timeout" else None
        if partial:  # the steps done before the limit stand; the one running is the timeout
            partial["steps"][partial.pop("running")] = {
                "verdict": "agent", "outcome": "timeout",
                "detail": f"no result within the {args.timeout:.0f} s limit of the architecture (every step included)",
                "seconds": round(time.perf_counter() - t0 - partial["seconds"], 1)}
            partial["seconds"] = round(time.perf_counter() - t0, 2)
            return partial
        if row.get("status") in ("timeout", "crash"):  # the process, not a step, ended it
            row = {"model_type": model_type, "kind": kind, "class_name": class_name, "build": "ok",
                   "steps": {"run": {"verdict": "agent" if row["status"] == "timeout" else "harness",
                                     "outcome": row["status"], "detail": row["error"],
                                     "seconds": round(time.perf_counter() - t0, 1)}}}
        return row

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.workers) as pool:
            for row in pool.map(work, todo):
                if row is None:
                    continue
                with lock:
                    rows.append(row)
                    save(complete=False)
                    for line in progress_line(len(rows), len(archs), row):
                        print(line, flush=True)
    finally:
        servers.close()
    save(complete=len(rows) == len(archs))
    print(f"wrote {out}: {len(rows)} of {len(archs)} architectures"
          + ("" if len(rows) == len(archs) else " (unfinished: run again at this commit to resume)"), flush=True)
    return json.loads(out.read_text())


def main(argv=None) -> None:
    from autopatch.models import tiny

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="*", default=list(tiny.KINDS), choices=tiny.KINDS)
    parser.add_argument("--only", nargs="*", help="glob patterns over model types")
    parser.add_argument("--workers", type=int, default=2, help="architectures at once (the reference machine has 2 cores)")
    parser.add_argument("--timeout", type=float, default=420,
                        help="seconds per architecture, every step included (300 before the ONNX step)")
    parser.add_argument("--limit", type=float, default=0,
                        help="stop starting architectures after this many seconds (0: none); run again to resume")
    parser.add_argument("--fresh", action="store_true", help="ignore an unfinished run in the results file")
    parser.add_argument("--no-onnx", action="store_true", help="leave out the torch.onnx.export step")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the children")
    parser.add_argument("--out", help="results JSON (default: benchmarks/results/sweep-<transformers>.json)")
    parser.add_argument("--no-docs", action="store_true", help="do not regenerate docs/coverage.md")
    args = parser.parse_args(argv)
    # The children run in a directory of their own: a relative interpreter path would not be found there.
    if os.sep in args.python:
        args.python = os.path.abspath(args.python)
    run(args)
    if not args.no_docs and not args.only:
        import report

        report.main([])


if __name__ == "__main__":
    main()
