"""Runs the real `autopatch` command in a child process: through pipes, or with stdout or stderr on a
pseudo-terminal of a given size (what a user's terminal is to it: isatty() true, a real window size)."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading

from conftest import REPO, clean_env

ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def cli_env(**env) -> dict:
    """``clean_env`` without what would change the output behind a test's back: the runner's own
    $COLUMNS, NO_COLOR or TERM. A test sets them itself."""
    base = clean_env()
    for name in ("COLUMNS", "LINES", "NO_COLOR", "TERM"):
        base.pop(name, None)
    base.update({k: str(v) for k, v in env.items()})
    return base


def run_cli(*args, **env) -> subprocess.CompletedProcess:
    """stdout and stderr are pipes: the width is $COLUMNS, else 80."""
    return subprocess.run([sys.executable, "-m", "autopatch", *args], env=cli_env(**env), cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def run_cli_in_terminal(*args, columns: int = 80, stream: str = "stdout", **env):
    """``stream`` ("stdout" or "stderr") on a pseudo-terminal ``columns`` wide, the other one a pipe.
    Returns (what the terminal showed, with \\r\\n as \\n; what the pipe got; exit code)."""
    env.setdefault("TERM", "xterm-256color")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    on_terminal = {"stdout": slave, "stderr": subprocess.PIPE} if stream == "stdout" else {
        "stdout": subprocess.PIPE, "stderr": slave}
    child = subprocess.Popen([sys.executable, "-m", "autopatch", *args], env=cli_env(**env), cwd=REPO,
                             stdin=subprocess.DEVNULL, **on_terminal)
    os.close(slave)
    chunks = []

    def drain():  # the terminal's buffer is small: read while the child writes
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    out, err = child.communicate(timeout=600)
    reader.join(timeout=60)
    os.close(master)
    shown = b"".join(chunks).decode().replace("\r\n", "\n")
    piped = (out if stream == "stderr" else err).decode()
    return shown, piped, child.returncode


def plain(text: str) -> str:
    """``text`` as it reads: without escape codes."""
    return ESCAPES.sub("", text)


def write_plugin(directory) -> None:
    """A distribution on ``directory`` (to put on PYTHONPATH) whose ``autopatch.patches`` entry point adds
    one patch per outcome: applied, failed, drifted, kept (skipped here), another version's, opt-in. Through
    the real plugin door, so that `autopatch status` shows them without any code of the test in its process."""
    (directory / "autopatch_status_target.py").write_text("VALUE = 1\n")
    (directory / "autopatch_status_plugin.py").write_text('''\
from autopatch.kit import Drifted, Skip
from autopatch.spec import PatchSpec


def works(record, owner, name, original):
    return lambda: ""


def raises(record, owner, name, original):
    raise RuntimeError(f"boom while installing on {name}")


def drifts(record, owner, name, original):
    raise Drifted(f"source of {name} changed (written against 0123abcd, found 4567ef01); not applied")


def keeps(record, owner, name, original):
    raise Skip(f"{name} is already a pytree node registered by someone.else; kept that registration")


def _spec(id, installer, **fields):
    reason = f"The {id} patch of the status tests, with a reason long enough to be cut at any width."
    return PatchSpec(id, "custom", "autopatch_status_target", "VALUE", "install",
                     f"autopatch_status_plugin:{installer}", reason=reason, **fields)


PATCHES = [
    _spec("test.works", "works"),
    _spec("test.raises", "raises"),
    _spec("test.drifts", "drifts"),
    _spec("test.keeps", "keeps"),
    _spec("test.future", "works", requires=(("transformers", ">=99"),)),
    _spec("test.optional", "works", default=False),
]
''')
    info = directory / "autopatch_status_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: autopatch-status-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[autopatch.patches]\nstatus = autopatch_status_plugin:PATCHES\n")
