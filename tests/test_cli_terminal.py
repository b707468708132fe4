"""The command line besides `status`'s goldens: --version, no command, and `autopatch diff` in a terminal,
through a pipe, and as JSON. The CLI runs in a child process, on a pseudo-terminal where color is tested."""

import json
from importlib import metadata

import autopatch
import proving
from autopatch import registry, versions
from autopatch.diffs import format_entry
from cli_run import plain, run_cli, run_cli_in_terminal
from conftest import run_py


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def test_version_is_one_line_of_what_is_installed():
    expected = (f"autopatch {autopatch.__version__} (torch {_installed('torch')}, "
                f"transformers {_installed('transformers')}, wrapt {_installed('wrapt')})\n")
    out = run_cli("--version")
    assert (out.returncode, out.stdout, out.stderr) == (0, expected, "")
    # Read from metadata: answering does not import torch (nor transformers).
    code = ("import sys\nfrom autopatch.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = run_py(code, EXPORT_PATCHES="1")
    assert out.stdout.splitlines() == [expected.strip(), "[]"], out.stderr


def test_no_command_prints_the_help():
    out = run_cli()
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("usage: autopatch") and "--version" in out.stderr and "status" in out.stderr


def test_an_ascii_stream_gets_ascii_separators():
    out = run_cli("status", EXPORT_PATCHES="1", PYTHONIOENCODING="ascii")
    assert out.returncode == 0 and out.stderr == "" and out.stdout.isascii()
    assert out.stdout.startswith("autopatch ") and " | python " in out.stdout.splitlines()[0]


def _applies(spec) -> bool:
    return not versions.unmet(spec.requires)


def test_diff_folds_the_patches_of_other_versions():
    pytree = [s for s in registry.PATCHES if s.id.startswith("pytree.")]
    elsewhere = [s for s in pytree if not _applies(s)]
    assert elsewhere, "pytree.legacy.* belong to transformers<4.56 on both venvs"
    out = run_cli("diff", "pytree.*")
    assert out.returncode == 0 and out.stderr == "" and "\x1b" not in out.stdout
    headers = [line for line in out.stdout.splitlines() if line.startswith("pytree: transformers.")]
    assert len(headers) == len(pytree) - len(elsewhere)
    assert f"{len(elsewhere)} more matched but do not apply to these versions (--all shows them):" in out.stdout
    assert "no diff here" not in out.stdout
    # --all shows every one; a patch named by its id is shown where it does not apply: that is the question.
    everything = run_cli("diff", "pytree.*", "--all").stdout
    assert everything.count("no diff here: needs ") == len(elsewhere) and "more matched" not in everything
    named = run_cli("diff", elsewhere[0].id).stdout
    assert "no diff here: needs transformers" in named and "more matched" not in named


def test_diff_fits_its_prose_to_the_width_and_leaves_code_whole():
    spec = proving.row("transformers.cache.sliding_update")
    out = run_cli("diff", spec.id, COLUMNS="60")
    header, _, body = format_entry(spec).partition("\n")
    assert out.stdout.endswith(body + "\n"), "the diff is code: printed as written, never cut"
    target, _, replacement = header.partition(" -> ")
    assert len(header) > 60 and out.stdout[: -len(body) - 1] == f"{target}\n    -> {replacement}\n"
    assert run_cli("diff", spec.id, "--wide", COLUMNS="60").stdout == format_entry(spec) + "\n"


def test_diff_in_a_terminal_is_colored():
    shown, err, code = run_cli_in_terminal("diff", "transformers.cache.sliding_update", columns=100)
    assert code == 0 and err == ""
    lines = shown.splitlines()
    assert lines[0].startswith("\x1b[1mtransformers: ")
    assert any(line.startswith("\x1b[32m+") for line in lines) and any(line.startswith("\x1b[31m-") for line in lines)
    assert any(line.startswith("\x1b[36m@@") for line in lines)
    assert plain(shown) == run_cli("diff", "transformers.cache.sliding_update", COLUMNS="100").stdout
    shown, _, _ = run_cli_in_terminal("diff", "transformers.cache.sliding_update", columns=100, NO_COLOR="1")
    assert "\x1b" not in shown


def test_diff_json_on_stdout_progress_on_the_terminals_stderr():
    """A long diff says where it is on stderr when stderr is a terminal; stdout holds the JSON alone."""
    progress, stdout, code = run_cli_in_terminal("diff", "pytree.*", "--json", stream="stderr")
    assert code == 0
    entries = json.loads(stdout)["patches"]
    pytree = [s for s in registry.PATCHES if s.id.startswith("pytree.")]
    assert [e["id"] for e in entries] == [s.id for s in pytree]  # complete: never folded
    assert [e["applies"] for e in entries] == [_applies(s) for s in pytree]
    assert all(e["why_not"].startswith("needs ") for e in entries if not e["applies"])
    assert "\x1b" not in stdout
    assert f"autopatch diff: 1/{len(pytree)} {pytree[0].id}" in progress and progress.endswith("\r\x1b[K")
    # Through a pipe, stderr stays empty.
    out = run_cli("diff", "pytree.*", "--json")
    assert out.stderr == "" and json.loads(out.stdout)["patches"] == entries
