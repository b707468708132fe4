"""The benchmark code itself, on the smallest inputs: the coverage runner on one pure-torch case and one llama
decode case (no patches vs autopatch, one worker), the report rendering of its JSON, and one overhead measure
with one run.  Structure and statuses only: no timing is asserted."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
STATUSES = {"ok", "export_error", "run_error", "wrong_result", "build_error", "timeout", "crash", "harness_error",
            "unavailable", "n/a"}


def test_coverage_one_torch_case_and_one_llama_case(tmp_path):
    # One test (not a module fixture): under pytest-xdist a shared fixture would run once per worker.
    out = tmp_path / "coverage.json"
    subprocess.run([sys.executable, str(BENCH / "coverage.py"), "--cases", "torch_mlp/forward", "llama/decode",
                    "--columns", "none", "autopatch", "--workers", "1", "--timeout", "120", "--no-docs",
                    "--out", str(out)], check=True, capture_output=True, text=True, timeout=240)
    coverage = json.loads(out.read_text())
    _check_structure(coverage)
    _check_statuses(coverage)
    _check_report(coverage)


def _check_structure(coverage):
    meta = coverage["meta"]
    for key in ("date", "torch", "transformers", "python", "command", "seconds", "workers", "timeout"):
        assert key in meta, key
    assert coverage["columns"] == ["none", "autopatch"]
    assert [case["name"] for case in coverage["cases"]] == ["torch_mlp/forward", "llama/decode"]
    for case in coverage["cases"]:
        assert set(case) >= {"name", "family", "kind", "note", "results"}
        assert set(case["results"]) == {"none", "autopatch"}
        for result in case["results"].values():
            assert result["status"] in STATUSES
    counts = {column: sum(coverage["summary"][column].values()) for column in coverage["columns"]}
    assert counts == {"none": 2, "autopatch": 2}


def _check_statuses(coverage):
    results = {case["name"]: case["results"] for case in coverage["cases"]}
    # The control case passes without any patch; the decode step needs the cache registration.
    assert results["torch_mlp/forward"]["none"]["status"] == "ok"
    assert results["torch_mlp/forward"]["autopatch"]["status"] == "ok"
    assert results["llama/decode"]["none"]["status"] == "export_error"
    assert "DynamicCache" in results["llama/decode"]["none"]["error"]
    assert results["llama/decode"]["autopatch"]["status"] == "ok", results["llama/decode"]["autopatch"]
    # The patches that ran come from EXPORT_PATCHES_REPORT in the child: the zero-code door was used.
    assert "pytree.dynamic_cache" in results["llama/decode"]["autopatch"]["patches"]
    assert "patches" not in results["llama/decode"]["none"]


def _check_report(coverage):
    sys.path.insert(0, str(BENCH))
    import report

    text = "\n".join(report.coverage_section(coverage))
    assert "| llama/decode | decoder | export_error | **ok** |" in text
    assert "`pytree.dynamic_cache`" in text


def test_one_overhead_measure():
    sys.path.insert(0, str(BENCH))
    import overhead

    row, off, on = overhead.measure(sys.executable, "export, pure torch", ["export_torch", "1"],
                                    ["export_torch", "1"], 1, "value", "s", "smoke")
    assert set(row) >= {"name", "unit", "without", "with", "ratio", "best_ratio", "samples_without", "samples_with"}
    assert row["without"] > 0 and row["with"] > 0
    assert len(off) == len(on) == 1


def test_the_benchmark_vlm_list_is_the_tests_zoo():
    sys.path.insert(0, str(BENCH))
    import catalogue
    import vlm_zoo

    assert [name for name, _ in catalogue.VLM_ZOO] == list(vlm_zoo.NAMES)
    assert [name for name, _ in catalogue.IDEFICS_ZOO] == list(vlm_zoo.IDEFICS)
