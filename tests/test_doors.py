"""Every door, for real: fresh interpreters, the installed .pth, the sitecustomize template, `autopatch run`."""

import subprocess
import sys

from autopatch import registry
from conftest import REPO, clean_env, run_py

HEAVY = ("torch", "transformers", "wrapt")
SHOW_MODULES = (
    "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('autopatch', 'torch', 'transformers', 'wrapt') and '.' not in m))"
)


def test_without_the_variable_nothing_is_imported():
    out = run_py(SHOW_MODULES)
    assert (out.stdout, out.stderr, out.returncode) == ("[]\n", "", 0)


def test_pth_door_activates_without_importing_torch_or_transformers():
    # Not even wrapt: it is imported when the first module a hook waits for is (see hooks.py).
    code = SHOW_MODULES + "; import autopatch._bootstrap as b; print(b.doors)"
    out = run_py(code, EXPORT_PATCHES="1")
    assert (out.stdout, out.stderr, out.returncode) == ("['autopatch']\n['pth']\n", "", 0)


#: What activation used to import, and most of its cost (benchmarks/startup.py measures it): wrapt imports
#: asyncio and importlib.metadata; version gates import importlib.metadata and packaging. They now wait for the
#: import of a module a patch waits for.
DEFERRED = ("torch", "transformers", "wrapt", "asyncio", "packaging", "importlib.metadata")
#: Standard modules the activation path does without, so that it costs a fraction of the interpreter's start-up;
#: checked against a run without the variable (another .pth file of the environment may import them).
STDLIB_AVOIDED = ("dataclasses", "inspect", "logging", "threading", "re", "fnmatch", "contextlib", "functools",
                  "weakref", "importlib.util", "importlib.machinery")


def test_activation_leaves_the_costly_imports_to_the_hooks():
    # The modules present when the program starts, then what reading the states and importing a trigger does.
    code = (
        f"import sys; names = {DEFERRED + STDLIB_AVOIDED!r}; print(sorted(m for m in names if m in sys.modules)); "
        "from autopatch.agent import AGENT; states = {r.state for r in AGENT.records.values()}; "
        "print('pending' in states, 'skipped' in states, 'importlib.metadata' in sys.modules); "
        "import transformers.cache_utils; "
        "print(AGENT.records['pytree.dynamic_cache'].state, 'wrapt' in sys.modules)"
    )
    without = run_py(f"import sys; print(sorted(m for m in {STDLIB_AVOIDED!r} if m in sys.modules))")
    out = run_py(code, EXPORT_PATCHES="1")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    first = out.stdout.splitlines()[0]
    assert without.stdout.strip() == first, f"activation imported {first}"
    # Version gates are evaluated when the states are read (every CI version has patches for the other one).
    assert out.stdout.splitlines()[1:] == ["True True True", "applied True"]


def test_explicit_import_door_and_second_door_is_a_no_op():
    # -S: no site, so no .pth; the import itself is the door. A second activate() must do nothing.
    code = (
        f"import sys; sys.path[:0] = {[str(REPO)] + [p for p in sys.path if 'site-packages' in p]!r}; "
        "import autopatch; from autopatch.agent import AGENT; n = len(AGENT.selection.ids); "
        "autopatch._bootstrap.activate('pth'); print(autopatch._bootstrap.doors, n, len(AGENT.selection.ids), "
        "'torch' in sys.modules)"
    )
    out = run_py(code, args=("-S",), EXPORT_PATCHES="1")
    n = len([spec for spec in registry.PATCHES if spec.default])
    assert (out.stdout, out.stderr) == (f"['import', 'pth'] {n} {n} False\n", "")


def test_dash_S_disables_the_pth_door():
    out = run_py("import sys; print('autopatch' in sys.modules)", args=("-S",), EXPORT_PATCHES="1")
    assert out.stdout == "False\n"


def test_sitecustomize_template_activates_and_chains_to_the_users_own(tmp_path):
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import sys\nMARK = 'user sitecustomize ran'\nprint(MARK, file=sys.stderr)\n")
    code = (
        "import sys, autopatch._bootstrap as b, autopatch.doors as d; "
        "print(sys.modules['sitecustomize'].MARK); "
        "print([x['runs'] for x in d.describe() if x['door'] == 'sitecustomize'])"
    )
    template = REPO / "sitecustomize_template"
    out = run_py(code, EXPORT_PATCHES="1", PYTHONPATH=f"{template}:{user}")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "user sitecustomize ran\n[False]\n"
    assert out.stderr == "user sitecustomize ran\n"


def test_sitecustomize_template_is_reported_as_running(tmp_path):
    code = "import autopatch.doors as d; print([x['runs'] for x in d.describe() if x['door'] == 'sitecustomize'])"
    out = run_py(code, EXPORT_PATCHES="1", PYTHONPATH=str(REPO / "sitecustomize_template"))
    assert (out.stdout, out.stderr) == ("[True]\n", "")


def _autopatch(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "autopatch", *args], env=clean_env(**env), cwd=REPO, capture_output=True, text=True
    )


def test_run_keeps_argv_and_exit_code_and_activates():
    script = (
        "import sys, autopatch._bootstrap as b; from autopatch.agent import AGENT; "
        "print(sys.argv[1:], b.doors, AGENT.selection.ids); sys.exit(3)"
    )
    out = _autopatch("run", "--patches", "pytree.dynamic_cache", "--", sys.executable, "-c", script, "a b", "--flag")
    assert out.returncode == 3, out.stderr
    assert out.stdout == "['a b', '--flag'] ['pth'] ('pytree.dynamic_cache',)\n"
    assert out.stderr == ""


def test_run_defaults_to_all_and_respects_the_variable():
    script = "from autopatch.agent import AGENT; print(AGENT.selection.text)"
    assert _autopatch("run", "--", sys.executable, "-c", script).stdout == "1\n"
    assert _autopatch("run", "--", sys.executable, "-c", script, EXPORT_PATCHES="pytree").stdout == "pytree\n"


def test_run_reports_a_missing_program():
    out = _autopatch("run", "--", "no-such-program-xyz", "arg")
    assert out.returncode == 127
    assert out.stderr == "autopatch run: program not found: 'no-such-program-xyz' (not a file, nor on PATH)\n"
    out = _autopatch("run")
    assert out.returncode == 2 and "no program given" in out.stderr


def test_run_puts_the_sitecustomize_door_on_the_path():
    """The child gets the template too, for interpreters where the .pth door is not installed."""
    script = "import sys; print(sys.modules['sitecustomize'].__autopatch_template__)"
    out = _autopatch("run", "--", sys.executable, "-c", script)
    assert (out.stdout, out.stderr, out.returncode) == ("True\n", "", 0)


def test_start_file_names_a_callable_that_respects_the_gate():
    code = (
        "import pkgutil, sys; line = [l for l in open(sys.argv[1]).read().splitlines() if l and not l.startswith('#')]; "
        "fn = pkgutil.resolve_name(line[0]); fn(); import autopatch._bootstrap as b; "
        "from autopatch.agent import AGENT; print(line, b.doors, AGENT.active)"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, str(REPO / "autopatch/_doors/autopatch.start")],
        env=clean_env(PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
    )
    assert out.stdout == "['autopatch._bootstrap:activate_from_start_file'] ['import', 'start'] False\n", out.stderr
