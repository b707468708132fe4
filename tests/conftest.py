import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "examples"))


def clean_env(**extra) -> dict:
    """The test process's environment without any EXPORT_PATCHES* variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXPORT_PATCHES")}
    env.pop("PYTHONPATH", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_py(code: str, python: str = sys.executable, args=(), timeout=300, **env):
    """Runs ``code`` in a fresh interpreter; returns the CompletedProcess (text mode)."""
    return subprocess.run(
        [python, *args, "-c", code],
        env=clean_env(**env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_bad_input(out, command: str, message: str) -> None:
    """A bad input to ``autopatch COMMAND``: exit code 2, nothing on stdout, one error line naming ``message``."""
    assert out.returncode == 2, (out.stdout, out.stderr[-2000:])
    errors = [line for line in out.stderr.splitlines() if line.startswith(f"autopatch {command}:")]
    assert len(errors) == 1 and message in errors[0], out.stderr[-2000:]
    assert out.stdout == ""


@pytest.fixture
def global_agent():
    """The process-wide agent, guaranteed off before and after the test."""
    from autopatch.agent import AGENT

    AGENT.disable()
    yield AGENT
    AGENT.disable()


@pytest.fixture
def agent(global_agent):
    """The process-wide agent (modules may override this name with a private agent)."""
    return global_agent


@pytest.fixture
def make_agent(global_agent):
    """Private agents over the real entry points: ``make_agent(patches, selection)``. The process-wide agent
    stays off; every private agent is disabled after the test."""
    from autopatch import registry
    from autopatch.agent import Agent

    made = []

    def make(patches=registry.PATCHES, selection="all"):
        own = Agent(registry.EXPORT_ENTRY_POINTS, list(patches))
        own.enable(selection)
        made.append(own)
        return own

    yield make
    for own in reversed(made):
        own.disable()


# ---------------------------------------------------------------------------------------------------------------
# Version-gated tests: @pytest.mark.requires("transformers<5") (or pytest.param(..., marks=...)).
# A test whose requirement the installed versions do not meet is deselected, not skipped: the patch it proves does
# not exist on this version. The summary names every deselected test and the version found, so nothing passes
# silently. Under xdist the workers collect, so they send their list to the controller, which prints it.
# ---------------------------------------------------------------------------------------------------------------

_DESELECTED: dict = {}


def needs_onnx() -> None:
    """Skips the calling test where the onnx extra (onnx, onnxscript, onnxruntime) is not installed."""
    for package in ("onnx", "onnxscript", "onnxruntime"):
        pytest.importorskip(package, reason="ONNX export and onnxruntime need the onnx extra (autopatch[onnx])")


def requires(requirement: str):
    """A mark for a test that applies only where ``requirement`` (PEP 508, e.g. "transformers>=5") holds."""
    return pytest.mark.requires(requirement)


@pytest.fixture
def onnx_extra():
    """``needs_onnx`` as a fixture, for a whole module (``ONNX_ROWS``)."""
    needs_onnx()


def _onnx_rows_marks() -> list:
    from autopatch.areas.bounds import TORCH_ONNX  # torch-free

    # The torch.onnx rows are measured on torch 2.13 to 2.15; 2.9's exporter is another one, and the rows are
    # not installed there.
    return [*(requires(bound) for bound in TORCH_ONNX), pytest.mark.usefixtures("onnx_extra")]


#: ``pytestmark`` of a module proving torch.onnx rows: torch in the rows' range (autopatch.areas.bounds.TORCH_ONNX)
#: and the onnx extra installed.
ONNX_ROWS = _onnx_rows_marks()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "requires(requirement): run only where the installed distribution satisfies the PEP 508 "
        "requirement; elsewhere the test is deselected and the summary says why")


def _unmet(item) -> str:
    from packaging.requirements import Requirement

    from autopatch import versions

    for mark in item.iter_markers("requires"):
        req = Requirement(mark.args[0])
        why = versions.unmet([(req.name, str(req.specifier))])
        if why:
            return why
    return ""


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        why = _unmet(item)
        if why:
            dropped.append(item)
            _DESELECTED.setdefault(why, set()).add(item.nodeid)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller prints the summary
        config.workeroutput["autopatch_deselected"] = json.dumps({k: sorted(v) for k, v in _DESELECTED.items()})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    for why, ids in json.loads(getattr(node, "workeroutput", {}).get("autopatch_deselected", "{}")).items():
        _DESELECTED.setdefault(why, set()).update(ids)


def pytest_terminal_summary(terminalreporter):
    for why, ids in sorted(_DESELECTED.items()):
        terminalreporter.write_line(f"deselected {len(ids)} test(s) for this version ({why}):")
        for nodeid in sorted(ids):
            terminalreporter.write_line(f"    {nodeid}")
