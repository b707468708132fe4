"""The package as users get it: a wheel built from this checkout, installed in a throwaway venv.

This is where the .pth and .start doors really come from (site-packages), so it is tested for real: a fresh
venv, `pip install autopatch-*.whl`, fresh interpreters.  No torch in that venv: activation must not need it.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from autopatch import registry
from conftest import REPO, clean_env



def _pip(python, *args):
    out = subprocess.run([str(python), "-m", "pip", "-q", "--disable-pip-version-check", *args],
                         capture_output=True, text=True, env=clean_env())
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    _pip(sys.executable, "wheel", "--no-deps", "-w", str(root / "dist"), str(REPO))
    (wheel,) = (root / "dist").glob("autopatch-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    _pip(python, "install", str(wheel))
    return python


def _run(python, code, *args, **env):
    return subprocess.run([str(python), *args, "-c", code], env=clean_env(**env), capture_output=True, text=True,
                          cwd=Path(python).parent)


def test_wheel_installs_both_start_files_and_the_template(venv):
    out = _run(venv, "import site; print(site.getsitepackages()[0])")
    site_dir = Path(out.stdout.strip())
    assert (site_dir / "autopatch.pth").read_text() == (REPO / "autopatch/_doors/autopatch.pth").read_text()
    assert (site_dir / "autopatch.start").read_text() == (REPO / "autopatch/_doors/autopatch.start").read_text()
    assert (site_dir / "autopatch_sitecustomize" / "sitecustomize.py").is_file()
    # The benchmarks' verdicts `autopatch status` reads (not needed on ...) travel with the package.
    assert (site_dir / "autopatch" / "measured_needs.json").read_text() == \
        (REPO / "autopatch" / "measured_needs.json").read_text()


def test_real_pth_is_inert_without_the_variable(venv):
    out = _run(venv, "import sys; print('autopatch' in sys.modules, 'wrapt' in sys.modules)")
    assert (out.stdout, out.stderr) == ("False False\n", "")


def test_real_pth_activates_with_the_variable(venv):
    code = "import sys, autopatch._bootstrap as b; from autopatch.agent import AGENT; print(b.doors, AGENT.selection.ids, 'torch' in sys.modules)"
    out = _run(venv, code, EXPORT_PATCHES="1")
    ids = tuple(spec.id for spec in registry.PATCHES if spec.default)
    assert (out.stdout, out.stderr) == (f"['pth'] {ids} False\n", "")


def test_real_pth_respects_dash_S_and_survives_a_bad_selection(venv):
    out = _run(venv, "import sys; print('autopatch' in sys.modules)", "-S", EXPORT_PATCHES="1")
    assert (out.stdout, out.stderr) == ("False\n", "")
    out = _run(venv, "print('program ran')", EXPORT_PATCHES="nonsense")
    assert out.stdout == "program ran\n"
    assert out.stderr.startswith("autopatch: EXPORT_PATCHES: unknown patch or family 'nonsense'; valid:")
    assert out.stderr.count("\n") == 1


def test_installed_status_shows_the_doors(venv):
    out = _run(venv, "from autopatch.cli import main; main(['status', '--json'])")
    assert out.returncode == 0, out.stderr
    import json

    doors = {d["door"]: d for d in json.loads(out.stdout)["header"]["doors"]}
    assert doors["pth"]["runs"] and doors["pth"]["installed"].endswith("site-packages/autopatch.pth")
    assert doors["sitecustomize"]["installed"].endswith("site-packages/autopatch_sitecustomize")
    assert not doors["start"]["runs"] and "3.15" in doors["start"]["why_not"]


def _wheel(path: Path, name: str, files: dict, entry_points: str) -> Path:
    """A real (hand-built) wheel: pip installs it like any other distribution."""
    import zipfile

    dist_info = f"{name}-0.1.dist-info"
    files = {
        **files,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist_info}/entry_points.txt": entry_points,
    }
    files[f"{dist_info}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{dist_info}/RECORD,,\n"
    wheel = path / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for arcname, text in files.items():
            z.writestr(arcname, text)
    return wheel


PLUGIN = '''
from autopatch.spec import PatchSpec

PATCHES = [PatchSpec(id="demo.loud_dumps", family="torch", trigger="demo_target", target="dumps", mode="route",
                     replacement="demo_autopatch_plugin:loud_dumps", reason="plugin demo")]


def loud_dumps(obj):
    return "LOUD"
'''


def test_plugins_are_discovered_lazily_and_a_broken_one_is_a_status_line(venv, tmp_path):
    good = _wheel(tmp_path, "demo_autopatch_plugin", {
        "demo_autopatch_plugin.py": PLUGIN,
        "demo_target.py": "def dumps(obj):\n    return 'quiet'\n",
    }, "[autopatch.patches]\ndemo = demo_autopatch_plugin:PATCHES\n")
    broken = _wheel(tmp_path, "broken_autopatch_plugin", {}, "[autopatch.patches]\nbroken = no_such_module:PATCHES\n")
    _pip(venv, "install", str(good), str(broken))
    code = (
        "import sys, autopatch\n"
        "from autopatch.agent import AGENT\n"
        "r = AGENT.records['demo.loud_dumps']\n"
        "print(r.state, 'demo_target' in sys.modules)\n"
        "import demo_target\n"
        "print(r.state, demo_target.dumps(1))\n"
        "print(autopatch.status()['header']['selected'][-1])\n"
    )
    out = _run(venv, code, EXPORT_PATCHES="all,demo.*")
    assert out.stdout == "pending False\napplied quiet\ndemo.loud_dumps\n", out.stderr
    assert out.stderr == (
        "autopatch: plugin 'broken' (no_such_module:PATCHES) not loaded: ModuleNotFoundError: "
        "No module named 'no_such_module'\n"
    )
