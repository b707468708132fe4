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


@pytest.fixture
def agent():
    """The process-wide agent, guaranteed off before and after the test."""
    from autopatch.agent import AGENT

    AGENT.disable()
    yield AGENT
    AGENT.disable()
