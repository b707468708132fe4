"""`autopatch status`: golden text and JSON, the live --probe view, exit codes, and the logging it relies on."""

import json
import re
import subprocess
import sys

import autopatch
from autopatch import cli
from autopatch.spec import PatchSpec
from conftest import REPO, clean_env, run_py

GOLDEN = REPO / "tests" / "golden"


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
    assert _normalise(out.stdout) == (GOLDEN / "status.txt").read_text()


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
    assert data["header"]["EXPORT_PATCHES"] == "all,-pytree" and data["header"]["selected"] == []
    assert data["header"]["doors_used"] == ["pth"] and data["header"]["view"] == "this process"
    expected = json.loads((GOLDEN / "status_patches.json").read_text())
    assert data["patches"] == expected


def test_probe_shows_live_states_from_a_child_interpreter():
    out = _status("--probe", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["header"]["view"] == "probe"
    states = {p["id"]: p["state"] for p in data["patches"]}
    assert states == {p: "applied" for p in states}, states


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
    assert "autopatch: active with 3 patches: pytree.dynamic_cache, pytree.static_cache, pytree.encoder_decoder_cache" in lines
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
