"""The code a results file was measured with: the git commit and whether the work tree differed from it.

    python benchmarks/provenance.py        # prints {"commit": ..., "dirty": ...} (run_all.sh puts it in run_all.json)

Every results file records this in its "meta" (coverage-*.json, sweep-*.json, overhead.json, startup.json,
run_all.json); benchmarks/report.py shows it beside each file's numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The harness's own outputs: a run rewrites them while it goes (coverage before sweep before overhead), so a
# change there says nothing about the code that measured. autopatch/measured_needs.json is report.py's copy of
# needed.py's verdicts for `autopatch status`: results, not code.
OUTPUTS = ("benchmarks/results/", "docs/coverage.md", "docs/coverage.png", "autopatch/measured_needs.json")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def changed_paths(porcelain: str) -> list:
    """Paths of `git status --porcelain` lines that are not the harness's own outputs."""
    paths = []
    for line in porcelain.splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        if line.strip() and not path.startswith(OUTPUTS):
            paths.append(path)
    return paths


def git_state() -> dict:
    """{"commit": full sha of HEAD, "dirty": whether tracked or untracked files differ from it (outside the
    harness's outputs)}; both None, with the reason, where there is no git or no repository."""
    try:
        commit = _git("rev-parse", "HEAD").strip()
        changed = changed_paths(_git("status", "--porcelain"))
    except (OSError, subprocess.CalledProcessError) as exc:
        return {"commit": None, "dirty": None, "git_error": f"{type(exc).__name__}: {exc}"[:200]}
    return {"commit": commit, "dirty": bool(changed)}


if __name__ == "__main__":
    json.dump(git_state(), sys.stdout)
    print()
