"""`autopatch status`: golden text (a pipe, a terminal, NO_COLOR, --all, --wide) and JSON, the live --probe
view, exit codes, and the logging it relies on. The CLI runs in a child process, as a user runs it."""

import json
import os
import re

import pytest
import transformers

import autopatch
from autopatch import cli, registry, selection, versions
from autopatch.spec import PatchSpec
from cli_run import plain, run_cli, run_cli_in_terminal, write_plugin
from conftest import REPO, run_py

GOLDEN = REPO / "tests" / "golden"
# Rows of version-gated patches differ between transformers 4.x and 5.x: one golden file per major version.
MAJOR = f"tf{transformers.__version__.split('.')[0]}"
README = REPO / "README.md"
README_START = "<!-- generated: EXPORT_PATCHES=1 autopatch status"
README_END = "<!-- end of generated status -->"


def _golden(name: str, actual: str) -> str:
    """The golden text; UPDATE_GOLDEN=1 rewrites it from ``actual`` first (review the diff before committing)."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(actual)
    return path.read_text()


def _status(*args, **env):
    return run_cli("status", *args, **env)


def _normalise(text: str) -> str:
    """Versions and paths differ between machines and venvs; the rest must match to the character."""
    text = re.sub(r"(autopatch|python|torch|transformers|wrapt) [0-9][^ \n]*", r"\1 <version>", text)
    text = re.sub(r"\[[^\]\n]*site-packages/", "[<site-packages>/", text)
    return text.replace(str(REPO), "<repo>")


def _widest(text: str) -> int:
    return max(len(line) for line in plain(text).splitlines())


def test_status_text_golden_through_a_pipe():
    """Not a terminal: 80 columns, no color; a summary, the rows that concern this interpreter, the rest folded."""
    out = _status(EXPORT_PATCHES="1")
    assert out.returncode == 0 and out.stderr == ""
    assert _normalise(out.stdout) == _golden(f"status-{MAJOR}.txt", _normalise(out.stdout))
    assert "\x1b" not in out.stdout and _widest(out.stdout) <= 80
    lines = out.stdout.splitlines()
    skipped = [s for s in registry.PATCHES if s.default and versions.unmet(s.requires)]
    assert f"{len(skipped)} skipped for this version" in lines[lines.index("") - 1]
    assert not any(line.split()[:2] == ["skipped", s.id] for s in skipped for line in lines)


def test_status_in_an_80_column_terminal_is_the_pipe_text_in_color():
    shown, err, code = run_cli_in_terminal("status", columns=80, EXPORT_PATCHES="1")
    assert code == 0 and err == ""
    assert plain(shown) == _status(EXPORT_PATCHES="1").stdout
    assert "  \x1b[2mpending\x1b[0m  pytree.dynamic_cache" in shown  # pending: dim
    assert "\x1b[1mpytree\x1b[0m" in shown  # family headings: bold


def test_no_color_in_a_terminal():
    shown, _, code = run_cli_in_terminal("status", columns=80, EXPORT_PATCHES="1", NO_COLOR="1")
    assert code == 0 and "\x1b" not in shown
    assert shown == _status(EXPORT_PATCHES="1").stdout


def test_every_state_in_a_terminal(tmp_path):
    """applied (green), failed and drifted (red, with their detail whole), kept (skipped here, a row), opt-in,
    another version's (folded): patches of a plugin, probed live. The golden holds the escape codes."""
    write_plugin(tmp_path)
    args = ("status", "--probe", "--patches", "test.*")
    shown, err, code = run_cli_in_terminal(*args, columns=80, PYTHONPATH=tmp_path)
    assert code == 1, err  # a patch failed
    assert "test.raises failed to install" in err
    assert _normalise(shown) == _golden("status-states.txt", _normalise(shown))
    assert "\x1b[32mapplied\x1b[0m  test.works" in shown
    assert "\x1b[31mfailed\x1b[0m   test.raises" in shown and "\x1b[31mdrifted\x1b[0m  test.drifts" in shown
    assert "RuntimeError: boom while installing on VALUE" in shown
    assert "1 needs transformers>=99" in shown and "test.future" not in shown
    piped = _status(*args[1:], PYTHONPATH=tmp_path)
    assert piped.returncode == 1 and piped.stdout == plain(shown)


def test_status_all_lists_the_folded_patches_one_by_one():
    out = _status("--all", EXPORT_PATCHES="1")
    assert out.returncode == 0 and out.stderr == ""
    assert _normalise(out.stdout) == _golden(f"status-all-{MAJOR}.txt", _normalise(out.stdout))
    assert _widest(out.stdout) <= 80 and "--all lists them" not in out.stdout
    states = {"pending", "skipped", "opt-in", "disabled"}
    ids = [line.split()[1] for line in out.stdout.splitlines() if line.split()[:1] and line.split()[0] in states]
    families: dict = {}  # every patch, by family (in order of first appearance), in the registry's order within
    for spec in registry.EXPORT_ENTRY_POINTS + registry.PATCHES:
        families.setdefault(spec.family, []).append(spec.id)
    assert ids == [i for members in families.values() for i in members]


def test_status_wide_cuts_nothing():
    out = _status("--wide", EXPORT_PATCHES="1", COLUMNS="80")
    assert out.returncode == 0 and out.stderr == ""
    assert _normalise(out.stdout) == _golden(f"status-wide-{MAJOR}.txt", _normalise(out.stdout))
    pending = [s for s in registry.PATCHES if s.default and not versions.unmet(s.requires)]
    for spec in pending:  # the full target and requirements of every row
        assert f"{spec.target_name}" in out.stdout and spec.requirement_text in out.stdout
    assert "sitecustomize  does not run: " in out.stdout  # the doors, with why not and where


@pytest.mark.parametrize("columns", [40, 60, 100, 160])
def test_status_fits_the_width_it_is_given(columns):
    out = _status(EXPORT_PATCHES="1", COLUMNS=str(columns))
    assert out.returncode == 0
    for line in out.stdout.splitlines():
            # Only a row whose id is longer than the room left to it passes the width: ids are never cut.
        if len(line) > columns:
            patch_id = line.split()[1]
            assert len(line) == line.index(patch_id) + len(patch_id), line
    if columns >= 160:  # room for the reason's first words
        assert "  pytree.dynamic_cache  " in out.stdout and "DynamicCache (and every" in out.stdout


def test_status_without_the_variable_says_so():
    out = _status()
    assert out.stdout.splitlines()[:2] == [
        "EXPORT_PATCHES is unset: your programs run unpatched. Showing what",
        "  EXPORT_PATCHES=1 selects."]


@pytest.mark.requires("transformers>=5")
def test_readme_shows_the_default_output():
    """The README's example is a capture of `EXPORT_PATCHES=1 autopatch status` at 80 columns (UPDATE_GOLDEN=1,
    on transformers 5, captures it again)."""
    out = _status(EXPORT_PATCHES="1")
    text = README.read_text()
    start = text.index("```text\n", text.index(README_START)) + len("```text\n")
    end = text.index("```\n", start)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        text, end = text[:start] + out.stdout + text[end:], start + len(out.stdout)
        README.write_text(text)
    assert _normalise(text[start:end]) == _normalise(out.stdout)


def test_status_json_golden():
    out = _status("--json", EXPORT_PATCHES="all,-pytree")
    data = json.loads(out.stdout)
    assert set(data["header"]) == {
        "autopatch", "python", "torch", "transformers", "wrapt", "EXPORT_PATCHES", "active", "selected", "problems",
        "doors_used", "interpreter_flags", "doors", "view", "measured_needs"}
    assert data["header"]["EXPORT_PATCHES"] == "all,-pytree"
    assert data["header"]["selected"] == [s.id for s in registry.PATCHES if s.default and s.family != "pytree"]
    assert data["header"]["doors_used"] == ["pth"] and data["header"]["view"] == "this process"
    actual = json.dumps(data["patches"], indent=2) + "\n"
    assert data["patches"] == json.loads(_golden(f"status_patches-{MAJOR}.json", actual))
    # Complete whatever the width, and the same with the options of the text view.
    same = _status("--json", "--all", "--wide", EXPORT_PATCHES="all,-pytree", COLUMNS="40")
    assert json.loads(same.stdout)["patches"] == data["patches"]


def test_status_json_in_a_terminal_has_no_color():
    shown, _, code = run_cli_in_terminal("status", "--json", columns=80, EXPORT_PATCHES="pytree")
    assert code == 0 and "\x1b" not in shown and json.loads(shown)["header"]["EXPORT_PATCHES"] == "pytree"


def test_probe_shows_live_states_from_a_child_interpreter():
    out = _status("--probe", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["header"]["view"] == "probe"
    states = {p["id"]: p["state"] for p in data["patches"]}
    defaults = set(selection.parse("1", registry.PATCHES).ids)
    expected = {}
    for spec in registry.EXPORT_ENTRY_POINTS + registry.PATCHES:
        if spec.id not in defaults and spec.family != "agent":
            expected[spec.id] = "disabled"
        else:  # every default patch is installed where its versions match, and says why not elsewhere
            expected[spec.id] = "skipped" if versions.unmet(spec.requires) else "applied"
    assert states == expected


def test_status_exits_non_zero_when_a_patch_failed(agent, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    spec = PatchSpec("test.status_fails", "torch", "json", "dumps", "install", "fault_patches:raising_installer")
    if spec.id not in agent.records:
        agent.add(spec)
    assert cli.main(["status", "--patches", "test.status_fails"]) == 1
    out = capsys.readouterr()
    lines = out.out.splitlines()
    row = [i for i, line in enumerate(lines) if line.split()[:2] == ["failed", "test.status_fails"]]
    assert row and lines[row[0] + 1].strip() == "RuntimeError: boom while installing on dumps"
    assert "1 failed" in out.out.split("\n\n")[0]  # counted in the summary
    assert out.err == ""  # the warning goes through logging, which pytest captures
    assert cli.main(["status", "--patches", "pytree"]) == 0


def test_debug_log_prints_every_state_change():
    code = "import autopatch, transformers.cache_utils"
    out = run_py(code, EXPORT_PATCHES="pytree", EXPORT_PATCHES_LOG="debug")
    assert out.returncode == 0
    lines = out.stderr.splitlines()
    assert "autopatch: pytree.dynamic_cache: pending" in lines
    pytree_ids = [s.id for s in registry.PATCHES if s.family == "pytree" and s.default]
    assert f"autopatch: active with {len(pytree_ids)} patches: {', '.join(pytree_ids)}" in lines
    assert any(line.startswith("autopatch: pytree.dynamic_cache: applied") for line in lines)
    assert "autopatch: agent.scope.public_export: applied" in lines
    out = run_py("import autopatch", EXPORT_PATCHES="pytree", EXPORT_PATCHES_LOG="loud")
    assert out.stderr == "autopatch: EXPORT_PATCHES_LOG: unknown level 'loud'; valid: debug, info, warning, error\n"


def test_in_process_status_matches_the_cli_structure(agent):
    agent.enable("pytree.dynamic_cache")
    data = autopatch.status()
    assert [p["id"] for p in data["patches"]][:4] == [
        "agent.scope.export", "agent.scope.public_export", "agent.scope.draft_export", "agent.scope.onnx_export"]
    assert data["header"]["selected"] == ["pytree.dynamic_cache"]
