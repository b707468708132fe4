"""strict=True parity: every patch the coverage catalogue exercises also works under strict=True (Dynamo).

Replacements run inside Dynamo's trace under strict=True, where locks, functools.lru_cache, logging or a
ContextVar read can stop an export that works non-strict. For each patch that the last published coverage run
(benchmarks/results/coverage-<transformers>.json) saw in a passing autopatch case, one such case is exported
here with strict=True and run against eager at other sizes (the catalogue's own inputs and comparison: every
output leaf), and the patch must have run. A new replacement Dynamo cannot trace fails here, not for a user."""

import json
import sys

import pytest
import transformers

import autopatch
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import _child  # noqa: E402
import catalogue  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / f"coverage-{transformers.__version__}.json"


def _case_per_patch() -> dict:
    """patch id -> a catalogue case whose autopatch export passed using it: as few cases as cover every such patch
    (greedily, the case that uses most of the patches not yet covered first; ties in catalogue order), each patch
    checked once as before, in fewer exports."""
    if not RESULTS.exists():
        return {}
    used = {}
    for case in json.loads(RESULTS.read_text())["cases"]:
        result = case["results"].get("autopatch", {})
        if result.get("status") == "ok" and case["name"] in catalogue.CASES:
            used.setdefault(case["name"], set()).update(result.get("patches") or {})
    names = sorted(used, key=list(catalogue.CASES).index)
    left, chosen = set().union(*used.values()), {}
    while left:
        name = max(names, key=lambda n: len(used[n] & left))  # max keeps the first of ties
        chosen.update(dict.fromkeys(used[name] & left, name))
        left -= used[name]
    return chosen


CASE_PER_PATCH = _case_per_patch()
CASES = sorted(set(CASE_PER_PATCH.values()), key=list(catalogue.CASES).index)


def test_the_published_results_name_the_patches_to_check():
    """Runs in the venvs whose coverage is published (5.23, 4.57): there must be something to check."""
    assert RESULTS.exists(), RESULTS
    assert len(CASE_PER_PATCH) >= 10 and "pytree.dynamic_cache" in CASE_PER_PATCH


@pytest.mark.parametrize("name", CASES)
def test_every_patch_the_catalogue_exercises_exports_strict(agent, name):
    """Parity, not a score: where strict=True fails, the same case must fail non-strict too (a case the current
    catalogue builds differently from the published run, e.g. with its config's own layer pattern)."""
    agent.enable("1")
    result = _child.run_case(name, "autopatch_strict")
    if result["status"] != "ok":
        plain = _child.run_case(name, "autopatch")
        assert plain["status"] != "ok", f"exports with strict=False but not with strict=True: {result}"
        return
    used = set(autopatch.last_export_report()["patches"])
    expected = {patch_id for patch_id, case in CASE_PER_PATCH.items() if case == name}
    assert expected <= used, (expected - used, used)
