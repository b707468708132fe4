"""The `autopatch` command: status, run, sitecustomize-path."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

from . import config, doors, state

# Run in a child interpreter by `status --probe`: imports every module a selected patch waits for, so that
# the states are the ones a real program would get (applied, drifted, failed...), then prints the status.
_PROBE = """
import importlib, json, sys
import autopatch
from autopatch.agent import AGENT
for trigger in sorted({r.spec.trigger for r in AGENT.records.values() if r.state == "pending"}):
    try:
        importlib.import_module(trigger)
    except Exception as exc:
        print("autopatch probe: cannot import %s: %s" % (trigger, exc), file=sys.stderr)
print(json.dumps(autopatch.status()))
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autopatch",
        description="Zero-code patches for torch.export. Activate with EXPORT_PATCHES=1 on any Python program.",
        epilog="environment variables:\n"
        + "\n".join(f"  {v.name} (default {v.default!r}): {v.help.replace('`', '')}" for v in config.VARIABLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser(
        "status",
        help="what would apply, what applied, what was skipped and why",
        epilog=parser.epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument(
        "--probe",
        action="store_true",
        help="live states from a child interpreter that imports every module the selected patches wait for",
    )
    st.add_argument("--patches", metavar="SPEC", help="selection to show (default: $EXPORT_PATCHES, else 1)")
    run = sub.add_parser("run", help="run a program with autopatch active: autopatch run -- python app.py")
    run.add_argument("--patches", metavar="SPEC", help="selection for the program (default: $EXPORT_PATCHES, else 1)")
    run.add_argument("program", nargs=argparse.REMAINDER, help="the command line to run, after --")
    diff = sub.add_parser("diff", help="what a patch changes: a unified diff, or the layout a registration installs")
    diff.add_argument("patterns", nargs="+", metavar="ID|GLOB")
    diff.add_argument("--format", choices=("raw", "rst"), default="raw")
    sub.add_parser("sitecustomize-path", help="print the directory to put on PYTHONPATH for the sitecustomize door")
    return parser


def main(argv=None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `autopatch diff '*' | head`: the reader left, which is not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv) -> int:
    args = _parser().parse_args(argv)
    if args.command == "status":
        return _status(args)
    if args.command == "run":
        return _run(args)
    if args.command == "diff":
        return _diff(args)
    print(doors.sitecustomize_dir() or "")
    return 0


def _selection_text(args) -> str:
    if args.patches is not None:
        return args.patches
    return os.environ.get("EXPORT_PATCHES", "").strip() or "1"


def _status(args) -> int:
    text = _selection_text(args)
    if args.probe:
        env = {**os.environ, "EXPORT_PATCHES": text}
        child = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True)
        sys.stderr.write(child.stderr)
        if child.returncode != 0 or not child.stdout.strip():
            print(f"autopatch status --probe: the child interpreter failed (exit {child.returncode})", file=sys.stderr)
            return 2
        data = json.loads(child.stdout.strip().splitlines()[-1])
    else:
        import autopatch
        from .agent import AGENT

        if AGENT.selection.text != text:
            AGENT.enable(text)
        data = autopatch.status()
    data["header"]["view"] = "probe" if args.probe else "this process"
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        from .report import render_text

        if not os.environ.get("EXPORT_PATCHES", "").strip() and args.patches is None:
            print("EXPORT_PATCHES is unset: your programs run unpatched. Showing what EXPORT_PATCHES=1 selects.")
        sys.stdout.write(render_text(data))
    return 1 if any(p["state"] == state.FAILED for p in data["patches"]) else 0


def _diff(args) -> int:
    import fnmatch

    from .agent import AGENT
    from .diffs import format_entry

    specs = [r.spec for r in AGENT.records.values()]
    chosen = [s for s in specs if any(fnmatch.fnmatchcase(s.id, p) for p in args.patterns)]
    if not chosen:
        print(f"autopatch diff: no patch matches {' '.join(args.patterns)!r}; valid ids: {', '.join(s.id for s in specs)}",
              file=sys.stderr)
        return 2
    for spec in chosen:
        print(format_entry(spec, args.format))
    return 0


def _run(args) -> int:
    program = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        print("autopatch run: no program given; usage: autopatch run [--patches SPEC] -- python app.py [args]",
              file=sys.stderr)
        return 2
    executable = shutil.which(program[0])
    if executable is None:
        print(f"autopatch run: program not found: {program[0]!r} (not a file, nor on PATH)", file=sys.stderr)
        return 127
    env = dict(os.environ)
    env["EXPORT_PATCHES"] = _selection_text(args)
    # The sitecustomize door works even where the .pth door cannot (another interpreter, .pth disabled);
    # when both run, the second one is a no-op.
    template = doors.sitecustomize_dir()
    if template is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(template), env.get("PYTHONPATH", "")) if p)
    sys.stdout.flush()
    sys.stderr.flush()
    # exec: the program takes this process over, so its exit code, signals and stdin are the user's own.
    os.execve(executable, program, env)
    return 0  # not reached
