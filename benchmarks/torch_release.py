"""benchmarks/torch_release.sh's results file: the focused suite's junit xml, the catalogue's coverage summary and
the torch rows' states (`autopatch status --probe --json`) on one torch release, merged into one JSON.

    python benchmarks/torch_release.py --out benchmarks/results/torch-2.14.1-transformers-5.23.0.json --junit suite.xml \\
        --coverage coverage.json --status status.json --provenance provenance.json --files tests/... \\
        --seconds 1234 --command "bash benchmarks/torch_release.sh 2.14.1 5.23.0"

Run with the release's interpreter: the versions recorded are this interpreter's.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata as metadata
import json
import platform
import xml.etree.ElementTree as ET
from pathlib import Path


def first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def suite_summary(junit: Path, files: list) -> dict:
    """Counts and failures of a pytest --junitxml file; the error is the failure's message, first line."""
    summary = {"files": files, "passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    if not junit.exists():
        summary["note"] = f"no junit xml at {junit}: pytest did not run to the end"
        return summary
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            summary["passed"] += 1
        elif outcome.tag == "skipped":
            summary["skipped"] += 1
        else:
            summary["failed" if outcome.tag == "failure" else "errors"] += 1
            summary["failures"].append({"test": test, "kind": outcome.tag,
                                        "error": first_line(outcome.get("message") or outcome.text)})
    return summary


def deselected(log: Path):
    """How many tests the summary line of a pytest log says were deselected (the version-gated ones), or None."""
    import re

    try:
        lines = [line for line in log.read_text().splitlines() if " in " in line and "passed" in line]
    except OSError:
        return None
    match = re.search(r"(\d+) deselected", lines[-1]) if lines else None
    return int(match.group(1)) if match else (0 if lines else None)


def catalogue_summary(coverage: Path) -> dict:
    """The none and autopatch columns of a benchmarks/coverage.py results file."""
    if not coverage.exists():
        return {"cases": 0, "none_ok": 0, "autopatch_ok": 0, "autopatch_failures": [],
                "note": f"no results at {coverage}: coverage.py did not finish"}
    data = json.loads(coverage.read_text())
    failures = []
    for case in data["cases"]:
        result = case["results"].get("autopatch", {})
        if result.get("status") != "ok":
            failures.append({"case": case["name"], "status": result.get("status"),
                             "error": first_line(result.get("error"))})
    summary = data["summary"]
    return {"cases": len(data["cases"]), "none_ok": summary.get("none", {}).get("ok", 0),
            "autopatch_ok": summary.get("autopatch", {}).get("ok", 0), "autopatch_failures": failures,
            "seconds": data["meta"].get("seconds")}


def torch_rows(status: Path) -> dict:
    """id -> [state, detail] of the torch rows (applied, drifted: fingerprint changed, skipped...)."""
    try:
        patches = json.loads(status.read_text())["patches"]
    except (OSError, ValueError, KeyError):
        return {}
    return {p["id"]: [p["state"], p.get("detail", "")] for p in patches if p["id"].startswith("torch.")}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--junit", required=True)
    parser.add_argument("--coverage", required=True)
    parser.add_argument("--status", required=True)
    parser.add_argument("--provenance", required=True)
    parser.add_argument("--files", nargs="*", default=[])
    parser.add_argument("--log", help="the suite's pytest output (its summary line counts the deselected tests)")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--command", required=True)
    args = parser.parse_args(argv)
    code = json.loads(Path(args.provenance).read_text())
    data = {
        "meta": {"torch": metadata.version("torch"), "transformers": metadata.version("transformers"),
                 "python": platform.python_version(),
                 "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                 "commit": code.get("commit"), "dirty": code.get("dirty"), "command": args.command,
                 "seconds": args.seconds},
        "suite": {**suite_summary(Path(args.junit), args.files),
                  "deselected": deselected(Path(args.log)) if args.log else None},
        "catalogue": catalogue_summary(Path(args.coverage)),
        "torch_rows": torch_rows(Path(args.status)),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    suite, cat = data["suite"], data["catalogue"]
    print(f"wrote {out}: suite {suite['passed']} passed, {suite['failed']} failed, {suite['errors']} errors, "
          f"{suite['skipped']} skipped; catalogue none {cat['none_ok']}/{cat['cases']}, "
          f"autopatch {cat['autopatch_ok']}/{cat['cases']}")


if __name__ == "__main__":
    main()
