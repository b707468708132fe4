"""The benchmark code itself, on the smallest inputs: the coverage runner on one pure-torch case and one llama
decode case (no patches vs autopatch, one worker), a sweep of one architecture, the report rendering of their
JSON, one overhead measure with one run; the catalogue's real regimes (the config classes' own windows and layer
patterns, a left-padded twin of every decoder and vision-language case), the comparison of every output leaf and
of the output's structure, and the commit every results file records.  Structure and statuses only: no timing is
asserted."""

import copy
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from conftest import needs_onnx, requires

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))
STATUSES = {"ok", "export_error", "run_error", "wrong_result", "build_error", "timeout", "crash", "harness_error",
            "unavailable", "n/a", "not_run"}
# The families whose cases take an attention mask over a batch of token rows (and so have a padded twin).
PADDED_FAMILIES = {"decoder", "decoder-rope", "moe", "ssm", "vlm"}
#: The runs of the harness itself (coverage, sweep, time limit, merge, ONNX columns, needs, family timing): its code is
#: the same whatever transformers is installed, and a run takes up to a minute, so they run on the latest we test
#: (the CI budget); the catalogue's cases, which do change with the version, are tested on both by the tests below
#: and the rest of the suite, and the 4.57 sweep runs this harness whole.
HARNESS_RUN = requires("transformers>=5.23")


@HARNESS_RUN
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


def _check_measured_at(meta):
    """The commit the numbers were measured at and whether the tree was dirty; outside a git checkout, both
    unknown with the reason."""
    if not (BENCH.parent / ".git").exists():
        assert meta["commit"] is None and meta["dirty"] is None and meta["git_error"], meta
        return
    assert re.fullmatch(r"[0-9a-f]{40}", meta["commit"]), meta.get("commit")
    assert meta["dirty"] in (True, False)


def _check_structure(coverage):
    meta = coverage["meta"]
    for key in ("date", "torch", "transformers", "python", "command", "seconds", "workers", "timeout"):
        assert key in meta, key
    _check_measured_at(meta)
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
    assert report.measured_at(coverage["meta"]) in text


@HARNESS_RUN
def test_sweep_of_one_architecture_records_its_commit_and_every_step(tmp_path):
    out = tmp_path / "sweep.json"
    run = subprocess.run([sys.executable, str(BENCH / "sweep.py"), "--kinds", "causal", "--only", "llama",
                          "--workers", "1", "--timeout", "280", "--no-docs", "--out", str(out)],
                         check=True, capture_output=True, text=True, timeout=400)
    sweep = json.loads(out.read_text())
    _check_measured_at(sweep["meta"])
    assert sweep["meta"]["complete"] is True
    [row] = sweep["architectures"]
    assert row["model_type"] == "llama" and row["build"] == "ok", row
    assert set(row["steps"]) == {"prefill", "decode", "loop", "strict", "onnx"}
    assert {step: entry["verdict"] for step, entry in row["steps"].items()} == dict.fromkeys(row["steps"], "ok"), row
    assert "8 steps" in row["steps"]["loop"]["detail"]
    assert "over 5 tensors" in row["steps"]["onnx"]["detail"]  # onnxruntime's logits and cache, each compared
    # one progress line per step: architecture, step, verdict, seconds, done/total
    assert "[1/1] causal   llama" in run.stdout and " loop      ok " in run.stdout, run.stdout

    import report

    text = "\n".join(report.sweep_section([sweep]))
    assert report.measured_at(sweep["meta"]) in text
    assert "| causal | llama | ok | ok | ok | ok | ok |" in text
    assert "**1 of 1** architectures export every step" in text and "1 through ONNX and onnxruntime" in text
    headline = "\n".join(report.sweep_headline([sweep]))
    assert "**1 of 1** architectures export every step" in headline and report.measured_at(sweep["meta"]) in headline


@HARNESS_RUN
def test_a_step_past_the_time_limit_keeps_the_steps_done_before_it(tmp_path):
    """The limit is per architecture: a step that never ends (made to hang) is recorded as that step's timeout,
    beside the steps finished before it, not as one 'run' entry that hides them."""
    out = tmp_path / "sweep.json"
    env = {**os.environ, "AUTOPATCH_SWEEP_HANG_AT": "decode"}
    run = subprocess.run([sys.executable, str(BENCH / "sweep.py"), "--kinds", "causal", "--only", "llama",
                          "--workers", "1", "--timeout", "20", "--no-onnx", "--no-docs", "--out", str(out)],
                         check=True, capture_output=True, text=True, timeout=300, env=env)
    [row] = json.loads(out.read_text())["architectures"]
    verdicts = {step: (entry["verdict"], entry["outcome"]) for step, entry in row["steps"].items()}
    assert verdicts == {"prefill": ("ok", "ok"), "decode": ("agent", "timeout")}, (row, run.stdout)
    assert "20 s limit" in row["steps"]["decode"]["detail"] and row["seconds"] >= 20
    assert " prefill   ok " in run.stdout and " decode    agent " in run.stdout, run.stdout


def test_the_readme_figures_are_the_committed_results():
    """The README's headline table, supported-models, torch-release and overhead figures are generated from
    benchmarks/results (report.py): a
    results file regenerated without the README, or a figure edited by hand, fails here."""
    import report

    blocks = report.readme_blocks(report._load("coverage-*.json"), report._load("sweep-*.json"))
    readme = report.README.read_text()
    assert set(blocks) == {report.HEADLINE_START, report.OVERHEAD_START, report.SWEEP_START, report.TORCH_START}
    for marker, lines in blocks.items():
        assert marker in readme, marker
        assert "\n".join(lines) in readme, f"README block {marker} differs from the results: run benchmarks/report.py"


def test_a_prefill_whose_eager_attends_ahead_is_told_apart_from_a_causal_one():
    """sweep_arch's upstream check: eager Doge on 4.57 drops the causal mask of an unpadded batch, so a (causal)
    program cannot match it. A running sum is causal, a whole-row sum is not."""
    import sweep_arch

    class Running(torch.nn.Module):
        def forward(self, input_ids):
            return {"logits": input_ids.float().cumsum(-1)[..., None]}

    class Whole(torch.nn.Module):
        def forward(self, input_ids):
            return {"logits": input_ids.float().sum(-1, keepdim=True).expand(input_ids.shape)[..., None]}

    inputs = {"input_ids": torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])}
    assert not sweep_arch._attends_ahead(Running(), inputs)
    assert sweep_arch._attends_ahead(Whole(), inputs)
    assert inputs["input_ids"][0, -1] == 5  # the inputs themselves are left as they were


@requires("transformers>=5.23")  # the versions we run that ship Dots3
def test_an_export_failure_that_eager_shares_on_a_padded_batch_is_upstream():
    """dots.ocr 3's latent attention makes one key per query head; given a layer that says its keys are grouped
    (num_key_value_groups 2, what a config with half as many key/value heads gives), transformers' sdpa repeats them
    whenever a mask is given: eager skips the all-ones mask of an unpadded prefill and runs, a traced program always
    takes the masked path, and eager fails there too (a left-padded batch). The sweep calls that upstream, naming
    eager's error; a model whose padded batch runs in eager (Llama, dots.ocr 3 as configured) has nothing to say."""
    import sweep_arch

    from autopatch.models import tiny

    errors = {}
    for name in ("dots3_note", "llama"):
        arch = tiny.architecture(name, "causal")
        model = tiny.build(arch)
        errors[name] = sweep_arch._eager_masked_path_error(model, arch, "prefill")
        if name == "dots3_note":
            model.model.layers[0].self_attn.num_key_value_groups = 2
            errors["dots3_note, grouped"] = sweep_arch._eager_masked_path_error(model, arch, "prefill")
    assert "must match the size of tensor" in errors["dots3_note, grouped"], errors
    assert errors["llama"] == errors["dots3_note"] == "", errors


def test_dia_reads_text_and_decodes_one_code_per_codebook_each_step():
    """Dia (text to speech): its encoder reads text token ids and its decoder one code per codebook at each
    position, ``(batch, length, channels)`` as its generate() gives them, cross-attending to the encoder's width
    (cross sizes shrunk with it). Eager runs the forward and decode sets, and the sweep's next loop step puts each
    (sample, codebook) row's token back at its codebook, which eager runs too."""
    import sweep_arch

    from autopatch.models import tiny

    arch = tiny.architecture("dia", "speech")
    model = tiny.build(arch)
    decoder = model.config.decoder_config
    assert decoder.cross_hidden_size == model.config.encoder_config.hidden_size
    forward, decode = (tiny.inputs(model, arch, step, 0) for step in ("forward", "decode"))
    assert forward["input_ids"].dtype == torch.long
    batch, channels = decode["encoder_outputs"].last_hidden_state.shape[0], decoder.num_channels
    assert forward["decoder_input_ids"].shape[::2] == (forward["input_ids"].shape[0], channels)
    with torch.no_grad():
        model(**forward)
        out = model(**copy.deepcopy(decode))
    token = out.logits[:, -1].argmax(-1, keepdim=True)  # rows (sample, codebook)
    following = sweep_arch.advance(decode, out, token)["decoder_input_ids"]
    assert following.shape == (batch, 1, channels) and following.is_contiguous()
    assert torch.equal(following.reshape(-1), token.reshape(-1))
    with torch.no_grad():
        model(**sweep_arch.advance(decode, out, token))


def test_kyutai_stt_reads_a_text_token_and_every_codebooks_code_at_each_position():
    """Kyutai's speech-to-text decoder sums, at each position, a text token and one code per audio codebook:
    ``(batch, length, 1 + codebooks)``, one row per sample (not MusicGen's row per codebook), codes below the audio
    special ids. Eager runs the prefill, a left-padded prefill and the decode set; the loop's next step is the
    predicted text token beside the last frame's codes (a runtime reads the next frame's from its codec)."""
    import sweep_arch

    from autopatch.models import tiny

    arch = tiny.architecture("kyutai_speech_to_text", "speech")
    model = tiny.build(arch)
    config = model.config
    forward, decode = (tiny.inputs(model, arch, step, 0) for step in ("forward", "decode"))
    padded = tiny.inputs(model, arch, "forward", 1, padded=True)
    for found in (forward, decode, padded):
        ids = found["input_ids"]
        assert ids.dim() == 3 and ids.shape[2] == 1 + config.num_codebooks
        assert ids.shape[:2] == found["attention_mask"].shape[:1] + (ids.shape[1],)
        assert int(ids[..., 1:].max()) < config.audio_bos_token_id
    assert not bool(padded["attention_mask"].all())
    with torch.no_grad():
        model(**forward)
        model(**padded)
        out = model(**copy.deepcopy(decode))
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    following = sweep_arch.advance(decode, out, token)
    ids = following["input_ids"]
    assert torch.equal(ids[:, 0, 0], token[:, 0]) and torch.equal(ids[:, :, 1:], decode["input_ids"][:, -1:, 1:])
    with torch.no_grad():
        model(**following)


@requires("transformers>=5")  # 4.57's eager RecurrentGemma fails on its own prefill (upstream, another verdict)
def test_a_model_that_keeps_its_state_in_its_modules_has_an_upstream_decode():
    """RecurrentGemma's recurrent blocks hold their states as module attributes (its _setup_cache) and its output
    has no cache: the sweep calls its decode step upstream, saying why, not a harness failure."""
    import sweep_arch

    from autopatch.models import tiny

    arch = tiny.architecture("recurrent_gemma", "causal")
    with pytest.raises(sweep_arch.Verdict) as verdict:
        sweep_arch._input_sets(tiny.build(arch), arch, "decode")
    assert (verdict.value.verdict, verdict.value.outcome) == (sweep_arch.UPSTREAM, "stateful_model")
    assert "keeps its recurrent state in its own modules" in verdict.value.detail


def test_a_stopped_sweep_resumes_at_the_same_commit_only(tmp_path):
    import provenance
    import sweep

    code = provenance.git_state()
    versions = {"torch": "2.13.0", "transformers": "5.23.0"}
    rows = [{"model_type": "llama", "kind": "causal", "build": "ok", "steps": {}}]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"meta": {**code, **versions, "onnx": True, "complete": False}, "architectures": rows}))
    assert sweep.resumable(path, code, versions) == rows
    assert sweep.resumable(path, {**code, "commit": "0" * 40}, versions) == []
    assert sweep.resumable(path, code, {**versions, "transformers": "4.57.6"}) == []
    assert sweep.resumable(path, code, versions, onnx=False) == []  # a run with other steps
    path.write_text(json.dumps({"meta": {**code, **versions, "complete": True}, "architectures": rows}))
    assert sweep.resumable(path, code, versions) == []


def test_overhead_and_startup_results_record_their_commit(tmp_path, monkeypatch):
    """Their measures stubbed (each takes minutes): what is checked is the results file they write."""
    import overhead
    import startup

    row = {"name": "stub", "unit": "s", "without": 1.0, "with": 1.0, "ratio": 1.0, "best_ratio": 1.0}
    stub = (dict(row), [{"maxrss_kb": 1}], [{"maxrss_kb": 1}])
    monkeypatch.setattr(overhead, "measure", lambda *args, **kwargs: stub)
    overhead.main(["--quick", "--out", str(tmp_path / "overhead.json")])
    _check_measured_at(json.loads((tmp_path / "overhead.json").read_text())["meta"])

    samples = {name: [0.01] for name in ("without autopatch", "with autopatch, EXPORT_PATCHES unset",
                                         "with autopatch, EXPORT_PATCHES=1")}
    monkeypatch.setattr(startup, "measure", lambda repeat: samples)
    startup.main(["--repeat", "1", "--out", str(tmp_path / "startup.json")])
    _check_measured_at(json.loads((tmp_path / "startup.json").read_text())["meta"])


def test_results_files_without_a_commit_still_render():
    """Results written before the commit was recorded load, and say so rather than borrow today's."""
    import report

    assert report.measured_at({"date": "2026-11-23"}) == "commit not recorded"
    assert report.measured_at({"commit": "0123456789abcdef" * 2 + "01234567", "dirty": True}) == \
        "commit `0123456789ab` (dirty)"
    assert report.measured_at({"commit": "0123456789abcdef" * 2 + "01234567", "dirty": False}) == \
        "commit `0123456789ab`"


def test_provenance_ignores_only_the_harness_outputs():
    import provenance

    porcelain = ("?? benchmarks/results/coverage-5.23.0.json\n M benchmarks/results/sweep-4.57.6.json\n"
                 " M docs/coverage.md\n M benchmarks/catalogue.py\n?? autopatch/new_patch.py\n"
                 " M autopatch/measured_needs.json\n")
    assert provenance.changed_paths(porcelain) == ["benchmarks/catalogue.py", "autopatch/new_patch.py"]
    assert provenance.changed_paths("?? benchmarks/results/\n") == []


def test_one_overhead_measure():
    import overhead

    row, off, on = overhead.measure(sys.executable, "export, pure torch", ["export_torch", "1"],
                                    ["export_torch", "1"], 1, "value", "s", "smoke")
    assert set(row) >= {"name", "unit", "without", "with", "ratio", "best_ratio", "samples_without", "samples_with"}
    assert row["without"] > 0 and row["with"] > 0
    assert len(off) == len(on) == 1


def test_merged_columns_keep_their_commit_and_onnx_diagnostic_version():
    """A run that measures the agent's columns again keeps the other columns' results, the commit that measured
    them, and the onnx-diagnostic version of the run that measured its columns; the README names each commit."""
    import coverage
    import report

    def run(columns, commit, od):
        cases = [{"name": "c/forward", "results": {c: {"status": "ok"} for c in columns}}]
        stamp = {"commit": commit, "dirty": False, "date": f"2026-11-2{len(commit)}"}
        return {"meta": {**stamp, "transformers": "4.57.6", "onnx_diagnostic": od,
                         "column_code": {c: stamp for c in columns}},
                "columns": columns, "cases": cases, "summary": coverage.summarise(cases, columns)}

    old = run(["none", "autopatch", "onnx_diagnostic"], "a" * 40, {"available": True, "version": "0.9.2"})
    merged = coverage.merge_columns(old, run(["autopatch"], "b" * 40, None))
    assert merged["meta"]["onnx_diagnostic"]["version"] == "0.9.2"
    assert merged["meta"]["column_code"]["none"]["commit"] == "a" * 40
    assert merged["meta"]["column_code"]["autopatch"]["commit"] == "b" * 40
    assert report.headline_cell(merged, "onnx_diagnostic") == "1 / 1 (0.9.2)"
    text = report.headline_code(merged)
    assert "no patches / onnx-diagnostic" in text and "`aaaaaaaaaaaa`" in text
    assert "autopatch on" in text and "`bbbbbbbbbbbb`" in text


def test_paired_ratio_interval():
    """The interval is the t-interval of the mean log ratio of the pairs: exact ratios give a point, noisy ones an
    interval around their geometric mean, one pair no interval."""
    import math

    import overhead

    exact = overhead.paired_ratio([1.0, 2.0, 4.0], [1.5, 3.0, 6.0])
    assert math.isclose(exact["paired_ratio"], 1.5)
    assert all(math.isclose(bound, 1.5) for bound in exact["ratio_ci"])
    noisy = overhead.paired_ratio([1.0, 1.0, 1.0, 1.0], [0.9, 1.1, 1.0, 1.05])
    low, high = noisy["ratio_ci"]
    assert low < noisy["paired_ratio"] < high and low < 1.0 < high
    assert overhead.paired_ratio([1.0], [2.0]) == {"paired_ratio": 2.0, "ratio_ci": None}


def test_an_interval_is_shown_beside_the_estimate_it_bounds():
    """The ratio of the medians and the paired estimate are two statistics of the same runs: the first can fall
    outside the second's interval (1.04x beside 0.95x - 1.01x), so the interval is printed with its own estimate."""
    import overhead
    import report

    off, on = [1.0, 1.0, 1.2, 1.0], [1.1, 0.95, 1.0, 1.05]
    row = {"name": "export", "unit": "s", "without": 1.0, "with": 1.025, "ratio": 1.025, "best_ratio": 0.95,
           **overhead.paired_ratio(off, on)}
    meta = {"repeat": 4, "date": "2026-12-07T00:00:00", "commit": "c" * 40}
    family = {**row, "family": "torch"}
    [line, families] = report.overhead_figures({"meta": meta, "measures": [row, family]}, None)[3:5]
    paired = f"paired runs {row['paired_ratio']:.2f}x, 95 % interval {row['ratio_ci'][0]:.2f}x - "
    assert "**1.02x**; " + paired in line and paired in families, (line, families)
    meta.update(command="overhead.py", torch="2.13.0", transformers="5.23.0", machine="x86_64", seconds=60)
    table = "\n".join(report.overhead_section({"meta": meta, "measures": [row]}))
    assert f"| {row['paired_ratio']:.2f}x, 95 % interval " in table


@HARNESS_RUN
def test_export_family_child_times_each_case_and_reports_failures():
    """The per-family child, as the parent runs it: with pytree registrations only, a pure-torch case exports and
    a dynamic-RoPE decode step (it needs transformers.rope.dynamic) fails with its error; with the defaults both
    export."""
    import overhead

    names = ["torch_mlp/forward", "llama_rope_dynamic/decode"]
    _, pytree = overhead._run(sys.executable, ["export_family", *names], "pytree")
    assert set(pytree["cases"]) == set(names)
    assert pytree["cases"]["torch_mlp/forward"]["seconds"] > 0
    failed = pytree["cases"]["llama_rope_dynamic/decode"]
    assert failed["seconds"] is None and "GuardOnDataDependentSymNode" in failed["error"]
    _, full = overhead._run(sys.executable, ["export_family", *names], True)
    assert all(full["cases"][name]["seconds"] > 0 and full["cases"][name]["error"] is None for name in names)


def test_the_benchmark_vlm_list_is_the_packages():
    import catalogue

    from autopatch.models import vlms

    assert [name for name, _ in catalogue.VLMS] == list(vlms.NAMES)
    assert [name for name, _ in catalogue.IDEFICS_VLMS] == list(vlms.IDEFICS)


# --- real regimes: the config classes' own windows and patterns, padded batches -----------------------------------


def test_every_decoder_and_vlm_case_has_a_padded_twin():
    import catalogue

    plain = [case for name, case in catalogue.CASES.items()
             if case.family in PADDED_FAMILIES and not name.endswith("_padded")]
    assert len(plain) > 50
    for case in plain:
        twin = catalogue.CASES.get(case.name + "_padded")
        assert twin is not None, case.name
        assert (twin.family, twin.kind) == (case.family, case.kind)
    for name in ("qwen3_next/decode_padded", "jamba/decode_padded", "bamba/decode_padded",
                 "falcon_h1/decode_padded", "granitemoehybrid/decode_padded", "llava/prefill_padded",
                 "idefics2/prefill_padded", "mistral_sliding/decode_past_window_padded"):
        assert name in catalogue.CASES, name


def _left_pads(mask):
    """Per row, the zeros before its first 1; the rest of the row must be ones (left padding only)."""
    pads = []
    for row in mask.tolist():
        pad = row.index(1)
        assert all(row[pad:]), row
        pads.append(pad)
    return pads


@pytest.mark.parametrize("name", ["llama/decode_padded", "llava/prefill_padded"])
def test_padded_batches_differ_in_a_b_and_c(name):
    import catalogue

    with torch.no_grad():
        model, *sets = catalogue.CASES[name].builder()
        patterns = [_left_pads(inputs["attention_mask"]) for inputs in sets]
        assert len({tuple(p) for p in patterns}) == 3, patterns
        for pads, inputs in zip(patterns, sets):
            assert 0 in pads and any(pads), pads  # some rows padded, the longest one not
            if "position_ids" in inputs:  # as generate() makes them: each real row starts at 0
                new = inputs["position_ids"].shape[1]
                for row, pad in enumerate(pads):
                    real = inputs["position_ids"][row, max(pad - inputs["attention_mask"].shape[1] + new, 0):]
                    assert real[-1].item() == inputs["attention_mask"].shape[1] - pad - 1
        assert torch.isfinite(model(**sets[2]).logits).all()


def test_the_padded_decode_cache_comes_from_a_padded_prefill():
    """The padded rows' cache differs from an unpadded prefill's, the unpadded row's is the same."""
    import catalogue

    model, config = catalogue.make_model("LlamaConfig", "LlamaForCausalLM", **catalogue.TINY)
    pads = catalogue.left_pads(3, 8, 1)
    with torch.no_grad():
        padded = catalogue.decode_inputs(model, config, 3, 8, 2, seed=2, pads=pads)
        plain = catalogue.decode_inputs(model, config, 3, 8, 2, seed=2)
    padded_keys, plain_keys = padded["past_key_values"].layers[0].keys, plain["past_key_values"].layers[0].keys
    assert padded["attention_mask"].shape == (3, 10) and _left_pads(padded["attention_mask"]) == pads
    for row, pad in enumerate(pads):
        assert torch.equal(padded_keys[row], plain_keys[row]) == (pad == 0), (row, pad)


def test_default_sliding_cases_keep_the_config_class_window_and_pattern():
    import catalogue
    import transformers

    for name, config_class in (("gemma3_text/decode", "Gemma3TextConfig"), ("gpt_oss/decode", "GptOssConfig"),
                               ("mistral/decode", "MistralConfig")):
        model, *_ = catalogue.CASES[name].builder()
        own = getattr(transformers, config_class)()
        assert model.config.sliding_window == own.sliding_window, name
        assert model.config.max_position_embeddings == own.max_position_embeddings, name
        kinds = set(getattr(own, "layer_types", None) or [])
        assert set(getattr(model.config, "layer_types", None) or []) == kinds, name
    gemma3, *_ = catalogue.CASES["gemma3_text/decode"].builder()
    assert gemma3.config.layer_types == ["sliding_attention"] * 5 + ["full_attention"]  # its own 5:1
    # The special window is a case of its own, beside the real one.
    window, *_ = catalogue.CASES["mistral_sliding/decode_past_window"].builder()
    assert window.config.sliding_window == catalogue.PAST_WINDOW
    for _, _, _, _, extra in catalogue.DECODERS:
        assert not {"sliding_window", "layer_types", "max_position_embeddings"} & set(extra), extra


# --- every output leaf and the output's structure -------------------------------------------------------------


class _Layer:
    def __init__(self, conv, recurrent):
        self.conv_states, self.recurrent_states, self.is_initialized = {0: conv}, {0: recurrent}, True


class _Cache:
    def __init__(self, *layers):
        self.layers = list(layers)


def _output(recurrent_shift=0.0, drop_state=False):
    layer = _Layer(torch.ones(2, 3), torch.zeros(2, 4) + recurrent_shift)
    if drop_state:
        del layer.recurrent_states[0]
    return {"logits": torch.ones(2, 5), "past_key_values": _Cache(layer)}


def test_compare_walks_dict_states_and_the_structure():
    import _child

    assert _child.compare(_output(), _output())[0]
    same, detail = _child.compare(_output(recurrent_shift=1.0), _output())
    assert not same and "['past_key_values'].layers[0].recurrent_states[0]: max abs diff 1" in detail, detail
    same, detail = _child.compare(_output(drop_state=True), _output())
    assert not same and detail.startswith("structure: ") and "recurrent_states[0]" in detail, detail


def test_compare_scales_its_tolerance_to_the_output_dtype():
    """float32 leaves keep 1e-4; a float16 leaf's tolerance is two of its eps, absolute and relative (onnxruntime's
    fp16 kernels round differently from torch's): one or two ulps pass, eight do not."""
    import _child

    eager = torch.full((2, 3), 0.75, dtype=torch.float16)
    ulp = torch.finfo(torch.float16).eps * 0.5  # spacing of float16 in [0.5, 1)
    assert _child.compare({"logits": eager + ulp}, {"logits": eager})[0]
    assert _child.compare({"logits": eager + 2 * ulp}, {"logits": eager})[0]
    same, detail = _child.compare({"logits": eager + 8 * ulp}, {"logits": eager})
    assert not same and "max abs diff" in detail, detail
    single = torch.full((2, 3), 0.75)
    assert not _child.compare({"logits": single + 3e-4}, {"logits": single})[0]


@pytest.mark.parametrize("name", ["falcon_h1/decode", "bamba/decode", "jamba/decode"])
def test_hybrid_decode_cases_build_with_the_models_own_cache(name):
    """4.x hybrid caches are built empty before the prefill; FalconH1's wants one device per layer."""
    import catalogue

    with torch.no_grad():
        model, *sets = catalogue.CASES[name].builder()
        assert len(sets) == 3
        out = model(**copy.deepcopy(sets[0]))
    assert torch.isfinite(out.logits).all()


class _ExportDropsAState(torch.nn.Module):
    """Eager returns two linear-attention states in a dict; the exported program only one (a structure mismatch)
    and a wrong value in the other."""

    def forward(self, x):
        states = {"conv": x + 1, "recurrent": x - 1}
        if torch.compiler.is_exporting():
            states = {"conv": x + 2}
        return {"logits": x * 2, "states": states}


def test_run_case_reports_a_structure_mismatch_as_wrong_result(monkeypatch):
    import _child
    import catalogue

    def build():
        return (_ExportDropsAState(), *({"x": torch.ones(b, 3)} for b in (2, 3, 4)))

    name = "smoke_structure/forward"
    monkeypatch.setitem(catalogue.CASES, name, catalogue.Case(name, "torch", "forward", build))
    threads = torch.get_num_threads()
    try:
        result = _child.run_case(name, "none")
    finally:
        torch.set_num_threads(threads)
    assert result["status"] == "wrong_result", result
    assert result["error"] == ("structure: output['states']['recurrent']: in the eager output, missing from the "
                               "program's")


@HARNESS_RUN
def test_transformers_exporter_and_strict_columns_then_a_merge(tmp_path):
    """The columns of transformers' own exporters (5.x) and strict=True, measured in a run of their own and merged
    into an earlier run's file: each column keeps the commit that measured it."""
    out = tmp_path / "coverage.json"
    common = ["--workers", "1", "--timeout", "240", "--no-docs", "--out", str(out)]
    subprocess.run([sys.executable, str(BENCH / "coverage.py"), "--cases", "torch_mlp/forward", "llama/decode",
                    "--columns", "none", *common], check=True, capture_output=True, text=True, timeout=400)
    columns = ["autopatch_strict", "hf_onnx", "hf_onnx_autopatch"]
    subprocess.run([sys.executable, str(BENCH / "coverage.py"), "--cases", "llama/decode", "--merge",
                    "--columns", *columns, *common], check=True, capture_output=True, text=True, timeout=600)
    coverage = json.loads(out.read_text())
    assert coverage["columns"] == ["none", *columns]
    assert set(coverage["meta"]["column_code"]) == {"none", *columns}
    cases = {case["name"]: case["results"] for case in coverage["cases"]}
    assert set(cases) == {"torch_mlp/forward", "llama/decode"}  # a case the second run left out is kept
    assert cases["torch_mlp/forward"]["none"]["status"] == "ok"
    assert cases["torch_mlp/forward"]["hf_onnx"]["status"] == "not_run"
    results = cases["llama/decode"]
    assert results["none"]["status"] == "export_error"  # kept from the first run
    assert results["autopatch_strict"]["status"] == "ok", results["autopatch_strict"]
    if tuple(int(p) for p in transformers.__version__.split(".")[:2]) >= (5, 23):
        assert results["hf_onnx"]["status"] == "ok", results["hf_onnx"]
        assert results["hf_onnx_autopatch"]["status"] == "ok", results["hf_onnx_autopatch"]
        assert "pytree.dynamic_cache" in results["hf_onnx_autopatch"]["patches"]
    else:  # transformers.exporters appeared in 5.x
        assert results["hf_onnx"]["status"] == results["hf_onnx_autopatch"]["status"] == "n/a"


@HARNESS_RUN
def test_onnx_columns_convert_check_and_run_with_onnxruntime(tmp_path):
    """The ONNX columns: torch.onnx.export(dynamo=True) of the case's model and shapes, onnx.checker, onnxruntime
    on inputs of other sizes, every leaf and the structure against eager (the program's output tree rebuilt from
    the flat ONNX outputs); without patches the cache stops torch.export, and the error names the cause."""
    needs_onnx()
    out = tmp_path / "coverage.json"
    subprocess.run([sys.executable, str(BENCH / "coverage.py"), "--cases", "torch_mlp/forward", "llama/decode",
                    "--columns", "onnx", "onnx_autopatch", "--workers", "1", "--timeout", "240", "--no-docs",
                    "--out", str(out)], check=True, capture_output=True, text=True, timeout=600)
    cases = {case["name"]: case["results"] for case in json.loads(out.read_text())["cases"]}
    assert cases["torch_mlp/forward"]["onnx"]["status"] == "ok", cases["torch_mlp/forward"]["onnx"]
    decode = cases["llama/decode"]
    assert decode["onnx"]["status"] == "export_error"
    assert "DynamicCache" in decode["onnx"]["error"] and "\x1b" not in decode["onnx"]["error"]
    assert decode["onnx_autopatch"]["status"] == "ok", decode["onnx_autopatch"]
    assert "over 5 tensors" in decode["onnx_autopatch"]["detail"]  # logits and both layers' keys and values
    assert "torch.onnx.output_names_from_paths" in decode["onnx_autopatch"]["patches"]


def test_torch_release_results_render_with_their_commit():
    """benchmarks/torch_release.sh's results files (one per torch release) in the page's torch-releases table."""
    import report

    results = report._load("torch-*.json")
    assert results, "no benchmarks/results/torch-*.json: run bash benchmarks/torch_release.sh 2.14.1"
    text = "\n".join(report.torch_releases_section(results))
    for data in results:
        suite, catalogue = data["suite"], data["catalogue"]
        assert suite["passed"] + suite["failed"] + suite["errors"] + suite["skipped"] > 0
        assert 0 < catalogue["autopatch_ok"] <= catalogue["cases"]
        assert f"| {data['meta']['torch'].split('+')[0]} | {data['meta']['transformers']} |" in text
        assert report.measured_at(data["meta"]) in text


@HARNESS_RUN
def test_needed_tells_a_patch_a_case_needs_from_one_no_case_uses(tmp_path):
    """benchmarks/needed.py on a two-case coverage run: fast_binary and infer_size are each needed by the chained
    broadcast (every default but that one fails there), parameter_buffers is used by neither case."""
    cov, out = tmp_path / "coverage.json", tmp_path / "needed.json"
    subprocess.run([sys.executable, str(BENCH / "coverage.py"), "--cases", "torch_broadcast_add/forward",
                    "torch_broadcast_chain/forward", "--columns", "autopatch", "--workers", "1", "--timeout", "120",
                    "--no-docs", "--out", str(cov)], check=True, capture_output=True, text=True, timeout=240)
    subprocess.run([sys.executable, str(BENCH / "needed.py"), "--coverage", str(cov), "--workers", "1", "--only",
                    "torch.broadcast.*", "torch.export.parameter_buffers", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=400)
    data = json.loads(out.read_text())
    _check_measured_at(data["meta"])
    patches = data["patches"]
    assert set(patches) == {"torch.broadcast.fast_binary", "torch.broadcast.infer_size",
                            "torch.export.parameter_buffers"}  # the opt-in torch.broadcast_refs.* are not defaults
    for patch_id in ("torch.broadcast.fast_binary", "torch.broadcast.infer_size"):
        assert patches[patch_id]["verdict"] == "needed", patches[patch_id]
        assert patches[patch_id]["status"] in ("run_error", "export_error"), patches[patch_id]
    assert patches["torch.broadcast.infer_size"]["case"] == "torch_broadcast_chain/forward"
    assert patches["torch.export.parameter_buffers"] == {"verdict": "not_exercised", "cases": []}


def test_measured_needs_reach_status_for_the_installed_pair(tmp_path, monkeypatch):
    """report.py folds needed-*.json into the package's file; status notes 'no catalogue case needs it on ...' only
    for the pair installed, and only on the patches measured so."""
    import report

    from autopatch import measured, versions

    torch, transformers = (versions.installed(d).split("+")[0] for d in ("torch", "transformers"))
    results = [{"meta": {"torch": torch, "transformers": transformers, "commit": "a" * 40, "date": "2026-11-26"},
                "patches": {"torch.broadcast.infer_size": {"verdict": "not_needed", "cases": ["x"]},
                            "torch.broadcast.fast_binary": {"verdict": "needed", "case": "x", "status": "run_error",
                                                            "error": "e", "cases": ["x"]}}},
               {"meta": {"torch": "2.0.0", "transformers": "4.0.0", "commit": "b" * 40, "date": "2026-11-26"},
                "patches": {"torch.broadcast.fast_binary": {"verdict": "not_needed", "cases": ["x"]}}}]
    path = tmp_path / "measured_needs.json"
    report.write_measured_needs(results, path)
    monkeypatch.setattr(measured, "_FILE", str(path))  # an absolute path: Path(package) / it is it
    monkeypatch.setattr(measured, "_loaded", [])
    assert measured.note("torch.broadcast.infer_size") == \
        f"no catalogue case needs it on torch {torch}, transformers {transformers}"
    assert measured.note("torch.broadcast.fast_binary") == ""  # needed here; not needed only on another pair
    text = "\n".join(report.needed_section(results))
    assert "Not needed on torch 2.0.0, transformers 4.0.0: `torch.broadcast.fast_binary` (1 cases)." in text
    import autopatch
    from autopatch import status_text
    from autopatch.terminal import Output

    data = autopatch.status()
    row = next(p for p in data["patches"] if p["id"] == "torch.broadcast.infer_size")
    assert row["measured"].startswith("no catalogue case needs it on torch")
    assert "no catalogue case needs it on torch" in status_text.render(data, Output(io.StringIO(), wide=True), show_all=True)


def test_the_packaged_needs_are_the_committed_results(tmp_path):
    """autopatch/measured_needs.json (what `autopatch status` reads) is what report.py writes from the committed
    benchmarks/results/needed-*.json, and the page's table names every release measured with its commits."""
    import report

    results = report._load("needed-*.json")
    assert results, "no benchmarks/results/needed-*.json: run bash benchmarks/torch_release.sh 2.15.0"
    fresh = tmp_path / "measured_needs.json"
    report.write_measured_needs(results, fresh)
    assert (BENCH.parent / "autopatch" / "measured_needs.json").read_text() == fresh.read_text(), \
        "autopatch/measured_needs.json differs from the results: run benchmarks/report.py"
    text = "\n".join(report.needed_section(results))
    for data in results:
        meta = data["meta"]
        assert f"| {meta['torch'].split('+')[0]} | {meta['transformers'].split('+')[0]} |" in text
        assert report.verdict_commits(data) in text
        assert {r["verdict"] for r in data["patches"].values()} <= {"needed", "not_needed", "not_exercised"}
