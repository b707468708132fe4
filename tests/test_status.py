"""`autopatch status`: golden text and JSON, the live --probe view, exit codes, and the logging it relies on."""

import json
import os
import re
import subprocess
import sys

import transformers

import autopatch
from autopatch import cli, registry, selection, versions
from autopatch.spec import PatchSpec
from conftest import REPO, clean_env, run_py

GOLDEN = REPO / "tests" / "golden"
# Rows of version-gated patches differ between transformers 4.x and 5.x: one golden file per major version.
MAJOR = f"tf{transformers.__version__.split('.')[0]}"


def _golden(name: str, actual: str) -> str:
    """The golden text; UPDATE_GOLDEN=1 rewrites it from ``actual`` first (review the diff before committing)."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(actual)
    return path.read_text()


def _status(*args, **env):
    return subprocess.run([sys.executable, "-m", "autopatch", "status", *args], env=clean_env(**env), cwd=REPO,
                          capture_output=True, text=True)


def _normalise(text: str) -> str:
    """Versions and paths differ between machines and venvs; the rest must match to the character."""
    text = re.sub(r"(autopatch|python|torch|transformers|wrapt) [0-9][^ \n]*", r"\1 <version>", text)
    text = re.sub(r"\[[^\]\n]*site-packages/", "[<site-packages>/", text)
    return text.replace(str(REPO), "<repo>")


def test_status_text_golden():
    out = _status(EXPORT_PATCHES="1")
    assert out.returncode == 0 and out.stderr == ""
    assert _normalise(out.stdout) == _golden(f"status-{MAJOR}.txt", _normalise(out.stdout))


def test_status_without_the_variable_says_so():
    out = _status()
    assert out.stdout.splitlines()[0] == (
        "EXPORT_PATCHES is unset: your programs run unpatched. Showing what EXPORT_PATCHES=1 selects.")


def test_status_json_golden():
    out = _status("--json", EXPORT_PATCHES="all,-pytree")
    data = json.loads(out.stdout)
    assert set(data["header"]) == {
        "autopatch", "python", "torch", "transformers", "wrapt", "EXPORT_PATCHES", "active", "selected", "problems",
        "doors_used", "interpreter_flags", "doors", "view"}
    assert data["header"]["EXPORT_PATCHES"] == "all,-pytree"
    assert data["header"]["selected"] == [s.id for s in registry.PATCHES if s.default and s.family != "pytree"]
    assert data["header"]["doors_used"] == ["pth"] and data["header"]["view"] == "this process"
    actual = json.dumps(data["patches"], indent=2) + "\n"
    assert data["patches"] == json.loads(_golden(f"status_patches-{MAJOR}.json", actual))


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


def test_status_exits_non_zero_when_a_patch_failed(agent, capsys):
    spec = PatchSpec("test.status_fails", "torch", "json", "dumps", "install", "fault_patches:raising_installer")
    if spec.id not in agent.records:
        agent.add(spec)
    assert cli.main(["status", "--patches", "test.status_fails"]) == 1
    out = capsys.readouterr()
    row = [line for line in out.out.splitlines() if line.startswith("test.status_fails")]
    assert row and row[0].split()[4] == "failed" and row[0].endswith("RuntimeError: boom while installing on dumps")
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
