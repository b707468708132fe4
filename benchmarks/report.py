"""Regenerates docs/coverage.md and docs/coverage.png from every results file in benchmarks/results/.

    python benchmarks/report.py

Reads coverage-<transformers>.json (coverage.py), sweep-<transformers>.json (sweep.py),
overhead.json (overhead.py), startup.json (startup.py) and run_all.json (run_all.sh's timings).  Each file's
numbers are shown with the commit they were measured at (provenance.py; "dirty" when the tree differed from it;
files written before that was recorded say so).  The chart needs matplotlib: without it the PNG is skipped with a
message and the markdown is still written.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from needed import base_version  # benchmarks/ is on the path: report.py is run from there or imported beside it

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
DOCS = REPO / "docs"
TITLES = {"none": "no patches", "autopatch": "autopatch", "autopatch_strict": "autopatch, strict=True",
          "transformers": "transformers' own", "onnx_diagnostic": "onnx-diagnostic",
          "onnx_diagnostic_off": "onnx-diagnostic installed, patches off",
          "hf_dynamo": "DynamoExporter", "hf_dynamo_autopatch": "DynamoExporter + autopatch",
          "hf_onnx": "OnnxExporter", "hf_onnx_autopatch": "OnnxExporter + autopatch",
          "onnx": "ONNX, no patches", "onnx_autopatch": "ONNX + autopatch",
          "onnx_diagnostic_onnx": "ONNX + onnx-diagnostic"}
STATUSES = ["ok", "export_error", "run_error", "wrong_result", "build_error", "timeout", "crash", "harness_error",
            "unavailable", "n/a", "not_run"]


def _paths(pattern: str) -> list:
    def key(path):
        return tuple(int(p) if p.isdigit() else 0 for p in path.stem.split("-")[-1].split("."))

    return sorted(RESULTS.glob(pattern), key=key, reverse=True)


def _load(pattern: str) -> list:
    return [json.loads(p.read_text()) for p in _paths(pattern)]


def measured_at(record: dict) -> str:
    """The commit a results file's numbers were measured at, "dirty" when the tree differed from it; files from
    before it was recorded (no "commit" key) say so rather than borrow today's."""
    if "commit" not in record:
        return "commit not recorded"
    if not record["commit"]:
        return "commit unknown (no git repository)"
    return f"commit `{record['commit'][:12]}`" + (" (dirty)" if record.get("dirty") else "")


def provenance_section(files: list) -> list:
    """One row per results file: when and at which commit it was measured."""
    lines = ["| results file | measured | code |", "| --- | --- | --- |"]
    for path in files:
        data = json.loads(path.read_text())
        record = data["meta"]
        lines.append(f"| `benchmarks/results/{path.name}` | {record.get('date', '?')} | {measured_at(record)} |")
    return lines + [""]


def _cell(result: dict) -> str:
    status = result["status"]
    return "**ok**" if status == "ok" else status


def _escape(text: str) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")[:160]


def coverage_section(data: dict) -> list:
    meta, columns = data["meta"], data["columns"]
    n = len(data["cases"])
    lines = [f"## transformers {meta['transformers']}", "",
             f"torch {meta['torch']}, Python {meta['python']}, {meta['machine']}; {meta['date']}, "
             f"{measured_at(meta)}.  "
             f"`{meta['command']}` took **{meta['seconds'] / 60:.1f} min** with {meta['workers']} workers "
             f"(per-case timeout {meta['timeout']:.0f} s).", ""]
    od = meta.get("onnx_diagnostic")
    if od is not None:
        if od.get("available"):
            lines += [f"onnx-diagnostic {od.get('version')} imports (with transformers {od.get('transformers')}); "
                      "its column runs `torch_export_patches(patch_transformers=True)` around export and run.", ""]
        else:
            lines += [f"onnx-diagnostic {od.get('version') or ''}: **{_escape(od.get('error'))}** -- so its column "
                      "is `unavailable` on this version (that is the result).", ""]
    lines += ["| column | " + " | ".join(s for s in STATUSES if any(s in data["summary"][c] for c in columns)) + " |"]
    used = [s for s in STATUSES if any(s in data["summary"][c] for c in columns)]
    lines += ["| --- " * (len(used) + 1) + "|"]
    for column in columns:
        counts = data["summary"][column]
        lines.append(f"| {TITLES[column]} | " + " | ".join(
            (f"**{counts.get(s, 0)}**/{n}" if s == "ok" else str(counts.get(s, 0))) for s in used) + " |")
    lines += ["", "Most frequent failures per column (error's first line, numbers and quoted names masked):", "",
              "| column | n | status | cause | cases |", "| --- | --- | --- | --- | --- |"]
    for column in columns:
        groups: dict = {}
        for case in data["cases"]:
            result = case["results"][column]
            if result["status"] not in ("ok", "unavailable", "n/a", "not_run"):
                groups.setdefault((result["status"], _cause(result.get("error"))), []).append(case["name"])
        for (status, cause), names in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:4]:
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            lines.append(f"| {TITLES[column]} | {len(names)} | {status} | {_escape(cause)} | {shown} |")
    lines += ["", "<details><summary>every case</summary>", "",
              "| case | family | " + " | ".join(TITLES[c] for c in columns) + " | autopatch patches that ran | "
              "first error (first failing column) |",
              "| --- " * (len(columns) + 4) + "|"]
    for case in data["cases"]:
        results = case["results"]
        patches = ", ".join(f"`{p}`" for p in (results.get("autopatch", {}).get("patches") or {}))
        errors = [f"{TITLES[c]}: {results[c].get('error')}" for c in ("autopatch", "none", "transformers",
                                                                       "onnx_diagnostic")
                  if c in results and results[c]["status"] not in ("ok", "unavailable", "n/a", "not_run")
                  and results[c].get("error")]
        lines.append(f"| {case['name']} | {case['family']} | " + " | ".join(_cell(results[c]) for c in columns)
                     + f" | {patches} | {_escape(errors[0]) if errors else ''} |")
    lines += ["", "</details>", ""]
    return lines


#: The README's headline table: its columns in order (a results file without a column shows "-").
HEADLINE = ("none", "autopatch", "autopatch_strict", "transformers", "onnx_diagnostic", "hf_dynamo",
            "hf_dynamo_autopatch", "hf_onnx", "hf_onnx_autopatch")
README = REPO / "README.md"
HEADLINE_START, HEADLINE_END = "<!-- headline: generated by benchmarks/report.py -->", "<!-- /headline -->"


def headline_cell(data: dict, column: str) -> str:
    """ok / cases, with the wrong results named: a wrong number is worse than a failed export."""
    if column not in data["columns"]:
        return "-"
    counts, n = data["summary"][column], len(data["cases"])
    # A case added to the catalogue after a column was measured is "not_run" there: not asked, so not counted.
    measured = n - counts.get("n/a", 0) - counts.get("unavailable", 0) - counts.get("not_run", 0)
    if measured == 0 and counts.get("unavailable", 0):
        return "cannot be imported"  # every case it was asked about (later ones were not asked)
    cell = f"{counts.get('ok', 0)} / {measured}"
    cell = f"**{cell}**" if column == "autopatch" else cell
    wrong = counts.get("wrong_result", 0)
    od = data["meta"].get("onnx_diagnostic") or {}
    notes = [od["version"]] if column == "onnx_diagnostic" and od.get("version") else []
    notes += [f"{wrong} wrong"] if wrong else []
    return cell + (f" ({'; '.join(notes)})" if notes else "")


def headline_code(data: dict) -> str:
    """When and at which commit the table's columns of one results file were measured: each column's own record (a
    later run may have merged other columns into the file, and its meta names that run), grouped by commit."""
    codes = data["meta"].get("column_code") or {}
    groups: dict = {}  # "on <date> at <commit>" -> the titles of the columns measured so
    for column in HEADLINE:
        if column in data["columns"]:
            stamp = codes.get(column, data["meta"])
            when = f"on {(stamp.get('date') or data['meta']['date'])[:10]} at {measured_at(stamp)}"
            groups.setdefault(when, []).append(TITLES[column])
    version = data["meta"]["transformers"]
    if len(groups) <= 1:
        return f"{version} " + next(iter(groups), f"on {data['meta']['date'][:10]} at {measured_at(data['meta'])}")
    return f"{version}: " + ", ".join(f"{' / '.join(titles)} {when}" for when, titles in groups.items())


def headline(coverage: list) -> list:
    """The README's table: per transformers version, cases exported and matching eager at other sizes, per column."""
    columns = [c for c in HEADLINE if any(c in d["columns"] for d in coverage)]
    lines = [HEADLINE_START, "",
             "| transformers | " + " | ".join(TITLES[c] for c in columns) + " |", "| --- " * (len(columns) + 1) + "|"]
    for data in coverage:
        lines.append(f"| {data['meta']['transformers']} | " + " | ".join(headline_cell(data, c) for c in columns) + " |")
    lines += ["", "Measured " + "; ".join(headline_code(d) for d in coverage)
              + " (`benchmarks/results/`).  A column's `n / m` counts the cases it could be asked (transformers' "
              "exporters take no pure-torch module; a case added after the column was measured is not among them); "
              "`-`: not measured on that version.", "", HEADLINE_END]
    return lines


def overhead_figures(overhead: dict | None, startup: dict | None) -> list:
    """Every figure of the page's overhead and start-up tables, one bullet each, for the README."""
    lines = [OVERHEAD_START, ""]
    if startup:
        lines.append(f"- Interpreter start-up (`python -c pass`, medians of {startup['meta']['repeat']}; "
                     f"{startup['meta']['date'][:10]}, {measured_at(startup['meta'])}): " + "; ".join(
                         f"{name} {row['median_ms']:.1f} ms ({row['ratio']:.2f}x)"
                         for name, row in startup["cases"].items()) + ".")
    if overhead:
        meta = overhead["meta"]
        lines.append(f"- With the agent / without, medians of {meta['repeat']} interleaved runs ("
                     f"{meta['date'][:10]}, {measured_at(meta)}; best runs in brackets where meaningful):")
        families = [row for row in overhead["measures"] if "family" in row]
        for row in overhead["measures"]:
            if "family" in row:
                continue
            # the interval bounds the paired estimate, not the ratio of medians: both shown, each named
            ci = f"; paired runs {_paired(row)}" if row.get("ratio_ci") else ""
            best = f" (best runs {row['best_ratio']:.2f}x)" if "best_ratio" in row and \
                "concurrent_exports" not in row else ""
            lines.append(f"  - {row['name']}: {_fmt(row['without'], row.get('unit', 's'))} -> "
                         f"{_fmt(row['with'], row.get('unit', 's'))}, **{row['ratio']:.2f}x**{ci}{best}.")
        if families:
            lines.append("  - export time per family of cases, all default patches / pytree registrations only "
                         "(two cases each, where both export): " + "; ".join(
                             f"{row['family']} **{row['ratio']:.2f}x** (paired runs {_paired(row)})"
                             if row.get("ratio_ci")
                             else f"{row['family']}: no case exports with pytree registrations only"
                             for row in families) + ".")
    return lines + ["", OVERHEAD_END]


OVERHEAD_START, OVERHEAD_END = "<!-- overhead: generated by benchmarks/report.py -->", "<!-- /overhead -->"


def update_readme(blocks: dict) -> list:
    """Replaces each generated block of the README (``{start marker: lines from marker to end marker}``) that
    the README has; returns the markers replaced."""
    text, done = README.read_text(), []
    for start_marker, lines in blocks.items():
        end_marker = lines[-1]
        if start_marker in text and end_marker in text:
            start, end = text.index(start_marker), text.index(end_marker) + len(end_marker)
            text = text[:start] + "\n".join(lines) + text[end:]
            done.append(start_marker)
    README.write_text(text)
    return done


SWEEP_START, SWEEP_END = "<!-- sweep: generated by benchmarks/report.py -->", "<!-- /sweep -->"


def sweep_headline(sweeps: list) -> list:
    """The README's supported-models figures: architectures exported out of architectures shipped, per version,
    with the commit each sweep measured."""
    lines = [SWEEP_START, ""]
    for data in sweeps:
        lines.append(f"- {sweep_summary(data)}; {data['meta']['date'][:10]}, {measured_at(data['meta'])}.")
    return lines + ["", SWEEP_END]


TORCH_START, TORCH_END = "<!-- torch: generated by benchmarks/report.py -->", "<!-- /torch -->"


def torch_headline(releases: list) -> list:
    """The README's torch-releases figures: per release measured by torch_release.sh, the focused suite and the
    catalogue with the agent (the needed.py verdicts, measured apart, are on the page)."""
    lines = [TORCH_START, ""]
    for data in sorted(releases, key=_release_key):
        meta, suite, cat = data["meta"], data["suite"], data["catalogue"]
        ran = suite["passed"] + suite["failed"] + suite["errors"] + suite["skipped"]
        lines.append(f"- torch {base_version(meta['torch'])} + transformers {meta['transformers']}: focused suite "
                     f"**{suite['passed']} / {ran}** passed ({suite.get('deselected', '?')} deselected there by their "
                     f"version marks); catalogue with autopatch **{cat['autopatch_ok']} / {cat['cases']}** (no patches "
                     f"{cat['none_ok']}); {meta.get('date', '?')[:10]}, {measured_at(meta)}.")
    return lines + ["", TORCH_END]


def readme_blocks(coverage: list, sweeps: list = ()) -> dict:
    """The README's generated blocks from the results files present."""
    blocks = {HEADLINE_START: headline(coverage)} if coverage else {}
    if sweeps:
        blocks[SWEEP_START] = sweep_headline(sweeps)
    releases = _load("torch-*.json")
    if releases:
        blocks[TORCH_START] = torch_headline(releases)
    overhead, startup = (RESULTS / "overhead.json", RESULTS / "startup.json")
    if overhead.exists() or startup.exists():
        blocks[OVERHEAD_START] = overhead_figures(
            json.loads(overhead.read_text()) if overhead.exists() else None,
            json.loads(startup.read_text()) if startup.exists() else None)
    return blocks


#: The supported-models table's step columns: a kind's first step (prefill, or forward for seq2seq, speech and
#: encoders) shares the first column.
SWEEP_COLUMNS = (("prefill / forward", ("prefill", "forward")), ("decode", ("decode",)), ("8-step loop", ("loop",)),
                 ("strict", ("strict",)), ("ONNX", ("onnx",)))

#: Steps after torch.export: shown in their own columns, not part of "export every step".
BEYOND_EXPORT = ("onnx",)


def sweep_verdict(row: dict, steps: tuple) -> str:
    """One cell: the verdict of the row's step among ``steps``; "build: harness" when the model was not built, ""
    where the kind has no such step."""
    if row["build"] != "ok":
        return row["build"]
    entry = next((row["steps"][s] for s in steps if s in row["steps"]), row["steps"].get("run"))
    return entry["verdict"] if entry else ""


def exported(row: dict) -> bool:
    """Every torch.export step the architecture has (its export steps, the loop and strict) passed."""
    return row["build"] == "ok" and all(e["verdict"] == "ok" for step, e in row["steps"].items()
                                        if step not in BEYOND_EXPORT)


def through_onnx(row: dict) -> bool:
    """The main step converted by torch.onnx.export and matched eager in onnxruntime."""
    return row["build"] == "ok" and row["steps"].get("onnx", {}).get("verdict") == "ok"


def sweep_summary(data: dict) -> str:
    """The headline of one sweep: architectures exported (every step) out of the architectures shipped."""
    rows, meta = data["architectures"], data["meta"]
    measured = f"{len(rows)} of {meta['architectures']} measured (unfinished run)" \
        if len(rows) < meta["architectures"] else f"{meta['architectures']} shipped"
    onnx = f", {sum(through_onnx(r) for r in rows)} through ONNX and onnxruntime" if meta.get("onnx") else ""
    return (f"transformers {meta['transformers']}: **{sum(exported(r) for r in rows)} of {meta['architectures']}** "
            f"architectures export every step ({measured}; {sum(r['build'] == 'ok' for r in rows)} built{onnx})")


def sweep_section(sweeps: list) -> list:
    """The supported-models list: one row per architecture, per transformers version its four step verdicts."""
    lines = ["## Supported models", "",
             "`python benchmarks/sweep.py` (`sweep.py`, `sweep_arch.py`, the package's `autopatch.models.tiny`): every architecture of "
             "transformers' auto mappings a user exports (causal LM, seq2seq LM, image-text-to-text / vision-to-seq, "
             "speech seq2seq, and encoders through their masked-LM or sequence-classification head), built from "
             "its default config shrunk to tiny sizes (sizes only: windows, layer patterns, positions, RoPE and "
             "attention implementation stay the config's), exported with `EXPORT_PATCHES=1` and plain "
             "`torch.export.export`, each architecture in its own process.  Steps: prefill or forward; decode with "
             "the model's own cache; the exported decode program stepped 8 times as a runtime steps it (its cache "
             "fed back) from another batch and past than traced, beside eager; the main step again with "
             "`strict=True`; the main step through `torch.onnx.export(dynamo=True)` and onnxruntime (ONNX: not "
             "counted in \"export every step\"; `not measured` for a run without that step).  Every output leaf "
             "compared with eager at sizes other than traced.", "",
             "Verdicts: `ok`; `agent` (export fails or differs from eager with the agent on: ours to fix); "
             "`harness` (the sweep could not build the model or its inputs); `upstream` (eager itself fails, is "
             "not deterministic, or returns a structure that follows the input sizes: no program can be right); "
             "`timeout`/`crash` of the architecture's process are `agent` and `harness`.", ""]
    for data in sweeps:
        meta = data["meta"]
        lines.append(f"- {sweep_summary(data)}; {meta['date']}, {measured_at(meta)}, "
                     f"{meta.get('seconds', 0) / 60:.0f} min on {meta['workers']} workers.")
    lines.append("")
    by_arch: dict = {}
    for index, data in enumerate(sweeps):
        for row in data["architectures"]:
            by_arch.setdefault((row["kind"], row["model_type"]), {})[index] = row
    versions = [d["meta"]["transformers"] for d in sweeps]
    header = "| kind | architecture | " + " | ".join(f"{title} ({v})" for v in versions for title, _ in SWEEP_COLUMNS)
    lines += [header + " |", "| --- " * (2 + len(versions) * len(SWEEP_COLUMNS)) + "|"]
    for (kind, model_type), rows in sorted(by_arch.items()):
        cells = [_sweep_cell(sweeps[i], rows.get(i), kind, model_type, steps)
                 for i in range(len(sweeps)) for _, steps in SWEEP_COLUMNS]
        lines.append(f"| {kind} | {model_type} | " + " | ".join(cells) + " |")
    lines += [""]
    for data in sweeps:
        lines += sweep_failures(data)
    return lines


def _sweep_cell(data: dict, row: dict | None, kind: str, model_type: str, steps: tuple) -> str:
    if row is None:
        return _absent(data, kind, model_type)
    if set(steps) <= set(BEYOND_EXPORT) and not data["meta"].get(steps[0]):  # a run without that step
        return "not measured"
    return sweep_verdict(row, steps)


def _absent(data: dict, kind: str, model_type: str) -> str:
    """An architecture a sweep has no row for: not in that transformers, or not reached by an unfinished run."""
    return "not measured" if [kind, model_type] in data["meta"].get("shipped", []) else "—"


def sweep_failures(data: dict) -> list:
    """Failures of one sweep grouped by step, verdict and cause (the first error line, names and numbers masked)."""
    groups: dict = {}
    for row in data["architectures"]:
        if row["build"] != "ok":
            groups.setdefault(("build", row["build"], _cause(row.get("build_error"))), []).append(row["model_type"])
        for step, entry in row["steps"].items():
            if entry["verdict"] != "ok":
                key = (step, entry["verdict"], _cause(f"{entry['outcome']}: {entry['detail']}"))
                groups.setdefault(key, []).append(row["model_type"])
    lines = [f"<details><summary>Failures on transformers {data['meta']['transformers']}, grouped by cause "
             f"({sum(len(v) for v in groups.values())})</summary>", "",
             "| step | verdict | cause | n | architectures |", "| --- | --- | --- | --- | --- |"]
    for (step, verdict, cause), names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"| {step} | {verdict} | {_escape(cause)} | {len(names)} | {', '.join(sorted(names))} |")
    return lines + ["", "</details>", ""]


def _cause(error: str | None) -> str:
    import re

    text = error or "unknown"
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\d+", "N", text)
    return text[:120]


def overhead_section(data: dict) -> list:
    meta = data["meta"]
    lines = ["## Overhead", "",
             f"`{meta['command']}`: {meta['date']}, {measured_at(meta)}, torch {meta['torch']}, transformers "
             f"{meta['transformers']}, {meta['machine']}; took **{meta['seconds'] / 60:.1f} min**.  Medians of {meta['repeat']} "
             "interleaved runs (llama export: at most 3; the ~50 ms forward and the families: their own counts); "
             "ratio = with the agent / without (1.00 = no "
             "difference); best = the ratio of the fastest run of each side, less sensitive to other load.  "
             f"Load average (1, 5, 15 min) at start {_load_avg(meta.get('load_average_at_start'))}, at end "
             f"{_load_avg(meta.get('load_average_at_end'))}: on a busy machine single runs are noisy.  The 95 % "
             "interval is that of the geometric mean of the paired ratios (each run with the agent over the run "
             "without it just before): an interval that contains 1.00 is no measured difference.", "",
             "| measure | without | with | ratio (medians) | ratio (paired runs), 95 % interval | ratio (best runs) | "
             "note |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in data["measures"]:
        unit = row.get("unit", "s")
        if row.get("ratio") is None:
            lines.append(f"| {row['name']} | - | - | - | - | - | {_escape(row.get('note', ''))} |")
            continue
        # With a concurrent exporting thread a run's median depends on who holds the GIL: best-of is meaningless.
        best = f"{row['best_ratio']:.3f}" if "best_ratio" in row and "concurrent_exports" not in row else ""
        ci = _paired(row) if row.get("ratio_ci") else ""
        lines.append(f"| {row['name']} | {_fmt(row['without'], unit)} | {_fmt(row['with'], unit)} | "
                     f"**{row['ratio']:.3f}** | {ci} | {best} | {_escape(row.get('note', ''))} |")
    lines.append("")
    return lines


def export_time_section(coverage: list) -> list:
    """Export wall time per column, on the cases every available column exports: from the coverage runs' own
    export_seconds (same process layout for every column: a forked child of a warmed-up server)."""
    lines = ["### Export wall time on the cases every tool passes", "",
             "From the coverage runs above (each case's `torch.export.export` call alone, in its own forked child): "
             "the cases where every column that could run exported and matched eager; median seconds per column and "
             "the median of the per-case ratios to autopatch.", "",
             "| transformers | cases | column | median export | median ratio to autopatch |", "| --- | --- | --- | --- | --- |"]
    for data in coverage:
        columns = [c for c in data["columns"] if c != "none"]
        usable = [c for c in columns
                  if any(case["results"][c]["status"] not in ("unavailable", "n/a", "not_run")
                         for case in data["cases"])]
        common = [case for case in data["cases"] if all(case["results"][c]["status"] == "ok" for c in usable)]
        if not common or "autopatch" not in usable:
            continue
        for column in usable:
            seconds = [case["results"][column]["export_seconds"] for case in common]
            ratios = [case["results"][column]["export_seconds"] / case["results"]["autopatch"]["export_seconds"]
                      for case in common]
            lines.append(f"| {data['meta']['transformers']} | {len(common)} | {TITLES.get(column, column)} | "
                         f"{statistics.median(seconds):.2f} s | **{statistics.median(ratios):.2f}** |")
    lines.append("")
    return lines


def startup_section(data: dict) -> list:
    meta, cases = data["meta"], data["cases"]
    lines = ["### Interpreter start-up", "",
             f"`{meta['command']}`: {meta['date']}, {measured_at(meta)}, Python {meta['python']}, "
             f"{meta['machine']}.  `python -c pass` in "
             "two throwaway venvs of the same base Python, one with the autopatch wheel (its real `.pth` in "
             f"site-packages) and one without; medians of {meta['repeat']} interleaved runs.", "",
             "| interpreter | median | quartiles | ratio to without |", "| --- | --- | --- | --- |"]
    for name, row in cases.items():
        spread = f"{row['q1_ms']:.2f} - {row['q3_ms']:.2f} ms" if "q1_ms" in row else "-"  # older files: none
        lines.append(f"| {name} | {row['median_ms']:.2f} ms | {spread} | **{row['ratio']:.3f}** |")
    lines.append("")
    return lines


def _paired(row: dict) -> str:
    """The geometric mean of the paired ratios and its 95 % interval: the estimate the interval is about (the
    ratio of the medians beside it may fall outside it: another statistic of the same runs)."""
    low, high = row["ratio_ci"]
    return f"{row['paired_ratio']:.2f}x, 95 % interval {low:.2f}x - {high:.2f}x"


def _load_avg(values) -> str:
    return ", ".join(f"{v:.1f}" for v in values) if values else "?"


def _fmt(value: float, unit: str) -> str:
    if unit == "s" and value < 0.1:
        return f"{value * 1000:.3g} ms"
    return f"{value:.4g} {unit}"


def chart(coverage: list, path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: chart skipped (pip install matplotlib to draw docs/coverage.png)"
    fig, axes = plt.subplots(1, len(coverage), figsize=(6 * len(coverage), 4.6), squeeze=False)
    colors = {"ok": "#2e7d32", "export_error": "#c62828", "run_error": "#ef6c00", "wrong_result": "#6a1b9a",
              "build_error": "#757575", "timeout": "#455a64", "crash": "#000000", "harness_error": "#000000",
              "unavailable": "#bdbdbd", "n/a": "#e0e0e0", "not_run": "#f5f5f5"}
    for ax, data in zip(axes[0], coverage):
        columns = data["columns"]
        left = [0] * len(columns)
        for status in STATUSES:
            values = [data["summary"][c].get(status, 0) for c in columns]
            if any(values):
                ax.barh([TITLES[c] for c in columns], values, left=left, color=colors[status], label=status)
                left = [a + b for a, b in zip(left, values)]
        ax.invert_yaxis()
        ax.set_title(f"transformers {data['meta']['transformers']}: {len(data['cases'])} cases")
        ax.set_xlabel("cases")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"wrote {path}"


def _release_key(data: dict) -> tuple:
    meta = data["meta"]
    return tuple(tuple(int(p) if p.isdigit() else 0 for p in meta[k].split("+")[0].split("."))
                 for k in ("torch", "transformers"))


def torch_releases_section(results: list) -> list:
    """One row per benchmarks/torch_release.sh results file (torch-<v>-transformers-<v>.json): the focused suite
    and the catalogue's none and autopatch columns on that torch release."""
    lines = ["### torch releases", "",
             "The torch-family patches reach into torch internals, so `bash benchmarks/torch_release.sh TORCH "
             "[TRANSFORMERS]` runs the focused suite (torch-family tests, the rows inside torch.onnx's exporter, "
             "the scope and the example) and the catalogue's no-patches and autopatch columns with another torch "
             "release in a throwaway venv. Tests a release makes moot (a bug fixed upstream, a row that does not "
             "apply there) are deselected by their `requires` mark and counted apart; the failures are listed under "
             "the table.", "",
             "| torch | transformers | suite subset passed | deselected there | catalogue: no patches ok | "
             "autopatch ok | measured |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    failures = []
    for data in sorted(results, key=_release_key):
        meta, suite, cat = data["meta"], data["suite"], data["catalogue"]
        total = suite["passed"] + suite["failed"] + suite["errors"] + suite["skipped"]
        lines.append(f"| {base_version(meta['torch'])} | {meta['transformers']} | {suite['passed']} / {total} | "
                     f"{suite.get('deselected', '?')} | {cat['none_ok']} / {cat['cases']} | "
                     f"**{cat['autopatch_ok']} / {cat['cases']}** | {meta.get('date', '?')[:10]}, {measured_at(meta)} |")
        where = f"torch {base_version(meta['torch'])}, transformers {meta['transformers']}"
        failures += [f"- {where}, suite: `{f['test']}`: {f['error']}" for f in suite["failures"]]
        failures += [f"- {where}, catalogue `{f['case']}` ({f['status']}): {f['error']}"
                     for f in cat["autopatch_failures"]]
    if failures:
        lines += ["", "<details><summary>Failures with autopatch on these releases</summary>", "", *failures, "",
                  "</details>"]
    return lines + [""]


def needed_section(results: list) -> list:
    """benchmarks/needed.py per release: which default patches some catalogue case still needs there."""
    lines = ["### Patches a release no longer needs", "",
             "`python benchmarks/needed.py --coverage <that release's coverage run>` (torch_release.sh runs it): a "
             "default patch is *needed* on a release when a catalogue case that passes with `EXPORT_PATCHES=1` and "
             "used it fails with `EXPORT_PATCHES=all,-<patch>`; *not needed* when every such case still passes; "
             "*not exercised* when no case used it. `autopatch status` shows `no catalogue case needs it on ...` for "
             "the installed pair (from `autopatch/measured_needs.json`, which this page's generator writes). The cases "
             "run non-strict, as the autopatch column does. A row proven by its own tests in a regime the catalogue "
             "lacks (`strict=True`, a longer run), or one that improves a message rather than an export, reads *not "
             "needed* here too: check its tests before retiring it.", "",
             "| torch | transformers | needed | not needed | not exercised | measured |", "| --- | --- | --- | --- | --- | --- |"]
    for data in sorted(results, key=_release_key):
        meta, counts = data["meta"], Counter(result["verdict"] for result in data["patches"].values())
        lines.append(f"| {base_version(meta['torch'])} | {base_version(meta['transformers'])} | {counts.get('needed', 0)} | "
                     f"{counts.get('not_needed', 0)} | {counts.get('not_exercised', 0)} | "
                     f"{meta.get('date', '?')[:10]}, {verdict_commits(data)} |")
    for data in sorted(results, key=_release_key):
        meta = data["meta"]
        idle = [f"`{i}` ({len(r['cases'])} cases)" for i, r in data["patches"].items() if r["verdict"] == "not_needed"]
        if idle:
            lines += ["", f"Not needed on torch {base_version(meta['torch'])}, transformers {base_version(meta['transformers'])}: "
                      + ", ".join(idle) + "."]
    verdicts: dict = {}
    for data in results:
        for patch_id, result in data["patches"].items():
            verdicts.setdefault(patch_id, set()).add(result["verdict"])
    idle = sorted(i for i, v in verdicts.items() if "not_needed" in v and "needed" not in v)
    unused = sorted(i for i, v in verdicts.items() if v == {"not_exercised"})
    if idle:
        lines += ["", "Used by some case but needed by none, on every release measured (candidates to retire, or to "
                  "give a catalogue case that shows them): " + ", ".join(f"`{i}`" for i in idle) + "."]
    if unused:
        lines += ["", f"{len(unused)} default patches are used by no catalogue case of these releases (rows for "
                  "other transformers versions, and models the catalogue does not build): their own tests are their "
                  "only proof."]
    return lines + [""]


def verdict_commits(data: dict) -> str:
    """The commits a needed-*.json's verdicts were measured at: one, or each with its count where a later run
    measured some patches again (needed.py --merge keeps each verdict's commit in meta.patch_code)."""
    code = data["meta"].get("patch_code")
    if not code:
        return measured_at(data["meta"])
    counts = Counter(measured_at(stamp) for stamp in code.values())
    return ", ".join(f"{key} ({n} verdicts)" for key, n in counts.most_common())


def write_measured_needs(results: list, path: Path) -> str:
    """The package's copy of the needed.py verdicts, one entry per release pair, for `autopatch status`."""
    releases = []
    for data in sorted(results, key=_release_key):
        meta = data["meta"]
        entry = {"torch": base_version(meta["torch"]), "transformers": base_version(meta["transformers"]),
                 "commit": meta.get("commit"), "date": meta.get("date")}
        for verdict in ("needed", "not_needed", "not_exercised"):
            entry[verdict] = sorted(i for i, r in data["patches"].items() if r["verdict"] == verdict)
        releases.append(entry)
    text = json.dumps({"about": "written by benchmarks/report.py from benchmarks/results/needed-*.json "
                                "(benchmarks/needed.py); read by autopatch status", "releases": releases}, indent=1)
    if not path.exists() or path.read_text() != text + "\n":
        path.write_text(text + "\n")
        return f"wrote {path}"
    return f"{path} unchanged"


def main(argv=None) -> None:
    coverage, sweeps, overhead = _load("coverage-*.json"), _load("sweep-*.json"), RESULTS / "overhead.json"
    run_all = RESULTS / "run_all.json"
    DOCS.mkdir(exist_ok=True)
    lines = ["# Coverage and overhead", "",
             "<!-- generated by benchmarks/report.py from benchmarks/results/*.json: do not edit by hand -->", "",
             "Regenerate everything with `bash benchmarks/run_all.sh` (both venvs, onnx-diagnostic's throwaway "
             "venvs under /tmp, coverage, sweep, overhead, this page)."]
    if run_all.exists():
        timing = json.loads(run_all.read_text())
        meta = timing["meta"]
        lines += [f"Its last run took **{meta['seconds'] / 60:.1f} min** on {meta.get('machine', '2 cores')} "
                  f"({meta.get('date', '')}, {measured_at(meta)}): " + ", ".join(f"{k} {v / 60:.1f} min"
                                                           for k, v in timing.get("steps", {}).items()) + "."]
    steps = {}
    if coverage:
        steps["coverage (both venvs side by side)"] = max(d["meta"]["seconds"] for d in coverage)
    if sweeps:
        steps["sweep (both venvs side by side)"] = max(d["meta"]["seconds"] for d in sweeps)
    if overhead.exists():
        steps["overhead"] = json.loads(overhead.read_text())["meta"]["seconds"]
    if steps:
        lines += ["From the results files below, its steps take on 2 cores: " + ", ".join(
            f"{k} {v / 60:.1f} min" for k, v in steps.items()) + f": about **{sum(steps.values()) / 60:.0f} min**."]
    lines += ["",
              "Each case is a tiny model built from a config (random weights, nothing downloaded) and three input "
              "sets of different sizes: traced at A, `dynamic_shapes` = every dim that differs between A and B "
              "(`autopatch.guess_dynamic_shapes`, caches as the active pytree registration flattens them), "
              "exported program compared with eager on C: every tensor of the output by its path (model-output "
              "fields, every cache layer's states, dicts of linear-attention states included), both trees holding "
              "the same paths (a leaf missing or added is a `wrong_result` naming the first such path), atol = "
              "rtol = 1e-4; the eager reference is computed before any column's context.  Only sizes are tiny: "
              "sliding windows, layer patterns (as many layers as the class's own pattern needs to hold every "
              "kind), `max_position_embeddings`, RoPE parameters and the attention implementation are each config "
              "class's own; a regime that needs a special value is a case of its own (`*_past_window`: a window "
              "of 4 that every set is past), and every decoder and vision-language case has a `*_padded` twin "
              "whose batches are left-padded, differently in A, B and C (the decode step's cache built by an eager "
              "prefill with the same padded mask).  Every case runs in its own process, forked from a per-column "
              "server interpreter that imported torch and transformers and ran one warm-up export of an MLP "
              "(`benchmarks/_child.py`), with the same plain "
              "`torch.export.export(model, (), kwargs=A, dynamic_shapes=...)`; only the column changes:", "",
              "| column | what is around the export |", "| --- | --- |",
              "| no patches | nothing (`EXPORT_PATCHES` unset) |",
              "| autopatch | nothing in code: `EXPORT_PATCHES=1` in the child's environment (zero-code) |",
              "| transformers' own | `transformers.integrations.executorch.register_dynamic_cache_export_support()` "
              "called first (`n/a` where the installed transformers has no such helper) |",
              "| onnx-diagnostic | `with torch_export_patches(patch_transformers=True):` around export and run, "
              "in a venv of its own per transformers version (`benchmarks/setup_onnx_diagnostic.sh`), with the "
              "onnx-diagnostic release written for that transformers: 0.9.2 on 4.x (0.9.3's mask patches take "
              "transformers 5's `q_length=` signature and build empty masks from 4.57's `cache_position=`), 0.9.3 "
              "on 5.x (its newest working transformers is 5.12.1: from 5.13 its sdpa patch calls `use_gqa_in_sdpa` "
              "with one argument too few, and its import fails on 5.18, 5.23 and 5.24) |",
              "| onnx-diagnostic installed, patches off | the control: the same venv, onnx-diagnostic imported and "
              "`torch_export_patches(patch_sympy=False, patch_torch=False, patch_transformers=False)` entered; "
              "it should match no patches, so a difference between the two onnx-diagnostic columns is the tool's "
              "patches, not its install |",
              "| autopatch, strict=True | as autopatch, with `strict=True` (Dynamo) |",
              "| DynamoExporter, OnnxExporter | transformers' own exporters (5.x `transformers.exporters`) through "
              "their public API, `Config(dynamic=True)` (their own dynamic shapes), the result run by their own "
              "runner (onnxruntime for ONNX), compared with eager given the output flags (`use_cache`...) as these "
              "exporters give them: applied to `model.config` by their own `patch_model_config`, not passed "
              "(a VLM's composite config declares no `use_cache`, so their program returns the cache eager's "
              "default gives); `n/a` on versions without them and for the pure-torch cases |",
              "| ... + autopatch | the same with `EXPORT_PATCHES=1` in the child's environment |", "",
              "A column measured by a later run than the others (`coverage.py --merge --columns ...`) names its "
              "own commit in the results file (`meta.column_code`).", "",
              "Statuses: `ok`; `export_error` (export raised); `run_error` (the program rejects C's sizes); "
              "`wrong_result` (runs, differs from eager in a value or in the output's structure); `build_error` "
              "(the case's own eager inputs could not be "
              "built on this version); `timeout`; `unavailable` (config class missing, or the column's tool "
              "cannot be imported).", "",
              "Each results file, with the commit its numbers were measured at (\"dirty\": the work tree differed "
              "from that commit, outside the results themselves):", ""]
    lines += provenance_section([*_paths("coverage-*.json"), *_paths("sweep-*.json"),
                                 *[RESULTS / name for name in ("overhead.json", "startup.json", "run_all.json")
                                   if (RESULTS / name).exists()]])
    chart_files = [d for d in coverage]
    if coverage:
        lines += ["![coverage](coverage.png)", ""]
    for data in coverage:
        lines += coverage_section(data)
    torch_releases = _load("torch-*.json")
    if torch_releases:
        lines += torch_releases_section(torch_releases)
    needed = _load("needed-*.json")
    if needed:
        lines += needed_section(needed)
        print(write_measured_needs(needed, REPO / "autopatch" / "measured_needs.json"))
    if sweeps:
        lines += sweep_section(sweeps)
    else:
        lines += ["## Supported models", "",
                  "No results of the sweep of every architecture (`python benchmarks/sweep.py`, one per transformers "
                  "version; `run_all.sh` runs it) at this point: the supported-models table appears here once one "
                  "has run.", ""]
    if overhead.exists():
        lines += overhead_section(json.loads(overhead.read_text()))
    if coverage:
        lines += export_time_section(coverage)
    if (RESULTS / "startup.json").exists():
        lines += startup_section(json.loads((RESULTS / "startup.json").read_text()))
    (DOCS / "coverage.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {DOCS / 'coverage.md'}")
    for marker in update_readme(readme_blocks(coverage, sweeps)):
        print(f"updated {README.name}: {marker}")
    if chart_files:
        print(chart(chart_files, DOCS / "coverage.png"))


if __name__ == "__main__":
    main(sys.argv[1:])
