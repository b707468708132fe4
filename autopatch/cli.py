"""The `autopatch` command: status, diff, run, validate, diagnose, sitecustomize-path, --version.

Text goes through ``terminal.Output`` (the terminal's width, color only on a terminal, no color under
NO_COLOR); ``--json`` is the complete, machine-readable form and is never cut, folded or colored.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

from . import config, doors, state, versions
from .terminal import Output, Progress

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


class _VersionAction(argparse.Action):
    """--version: autopatch and the versions it patches, read from package metadata (torch is not imported)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit(0)


def version_line() -> str:
    from . import __version__

    found = ", ".join(f"{dist} {versions.installed(dist) or 'not installed'}"
                      for dist in ("torch", "transformers", "wrapt"))
    return f"autopatch {__version__} ({found})"


def _variables_help() -> str:
    # Pre-wrapped to the terminal: the raw formatter (which keeps the list's layout) would not wrap it.
    out = Output(sys.stdout)
    lines = ["environment variables:"]
    for v in config.VARIABLES:
        lines.append(f"  {v.name} (default {v.default!r}):")
        lines += out.wrap(v.help.replace("`", ""), "    ", "    ")
    return "\n".join(lines)


def _add_output_options(command, what: str) -> None:
    command.add_argument("--json", action="store_true", help=f"machine-readable: {what}, complete")
    command.add_argument("--wide", action="store_true", help="cut nothing to fit the terminal's width")
    command.add_argument("--all", action="store_true", dest="show_all",
                         help="list one by one the patches folded into a count (other versions, not selected)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autopatch",
        description="Zero-code patches for torch.export. Activate with EXPORT_PATCHES=1 on any Python program.",
        epilog=_variables_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction,
                        help="print the versions of autopatch, torch, transformers and wrapt, and exit")
    sub = parser.add_subparsers(dest="command")
    st = sub.add_parser(
        "status",
        help="what would apply, what applied, what was skipped and why",
        epilog=parser.epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_output_options(st, "header and every patch")
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
    diff.add_argument("--format", choices=("raw", "rst"), default="raw",
                      help="rst: a reStructuredText page of every matching patch (never folded or colored)")
    _add_output_options(diff, "each matching patch with its header and body")
    sub.add_parser("sitecustomize-path", help="print the directory to put on PYTHONPATH for the sitecustomize door")
    va = sub.add_parser("validate", help="one model end to end: torch.export (and ONNX + onnxruntime) against eager "
                                         "at other sizes")
    _add_model_source(va)
    va.add_argument("--onnx", action="store_true", help="also torch.onnx.export(dynamo=True) and onnxruntime")
    va.add_argument("--strict", action="store_true", help="torch.export with strict=True (Dynamo)")
    va.add_argument("--padded", action="store_true", help="left-padded batches, as generate() gives them")
    va.add_argument("--patches", metavar="SPEC", help="selection (default: $EXPORT_PATCHES, else 1; none: no patches)")
    va.add_argument("--tolerance", type=float, default=1e-4, help="absolute and relative, per output leaf")
    va.add_argument("--json", action="store_true", help="machine-readable: the whole report")
    va.add_argument("-v", "--verbose", action="store_true", help="a progress line per stage, every leaf's error")
    dg = sub.add_parser("diagnose", help="which submodule stops torch.export: the model piece by piece, each "
                                         "piece's dynamic shapes, status and what to do")
    _add_model_source(dg)
    dg.add_argument("--patches", metavar="SPEC", help="selection (default: $EXPORT_PATCHES, else 1; none: no patches)")
    dg.add_argument("--strategy", default="only-if-failing",
                    help="only-if-failing (default: a piece's children are tried where it fails), always (every "
                         "piece), local (every piece, its submodules replaced by custom ops: its own code alone), "
                         "none (the whole model only)")
    dg.add_argument("--replace-failing", action="store_true",
                    help="each smallest failing piece becomes a custom op (output shapes learned from the recorded "
                         "calls) and the whole model is exported again, then compared with eager")
    dg.add_argument("--compare", action="store_true",
                    help="also export every piece tried with no patch: which pieces the patches make export")
    dg.add_argument("--tolerance", type=float, default=1e-4, help="absolute and relative, per output leaf")
    dg.add_argument("--json", action="store_true", help="machine-readable: the whole report")
    dg.add_argument("-v", "--verbose", action="store_true",
                    help="a progress line per piece; every piece's dynamic shapes and location")
    return parser


def _add_model_source(command) -> None:
    """The model sources validate and diagnose share: exactly one of --arch, --model, --builder."""
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--arch", metavar="MODEL_TYPE", help="a transformers architecture built tiny, offline (llama)")
    source.add_argument("--model", metavar="DIR", help="a local config or checkpoint directory (nothing is downloaded)")
    source.add_argument("--builder", metavar="MODULE:CALLABLE", help="returns (model, inputs_a, inputs_b)")
    command.add_argument("--kind", help="which head of --arch: causal, seq2seq, vlm, speech, encoder (default: the "
                                        "whole model, e.g. a VLM's conditional generation)")
    command.add_argument("--step", help="prefill, decode, forward (default: decode where the model has it)")


def main(argv=None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `autopatch diff '*' | head`: the reader left, which is not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:  # `autopatch` alone: what it can do, rather than an argparse error
        parser.print_help(sys.stderr)
        return 2
    if args.command == "status":
        return _status(args)
    if args.command == "run":
        return _run(args)
    if args.command == "diff":
        return _diff(args)
    if args.command == "validate":
        return _validate(args)
    if args.command == "diagnose":
        return _diagnose(args)
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
        with Progress("autopatch status --probe") as progress:
            progress.update("a child interpreter imports the modules the patches wait for...")
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
        from .status_text import render

        out = Output(sys.stdout, wide=args.wide)
        if not os.environ.get("EXPORT_PATCHES", "").strip() and args.patches is None:
            lines = out.wrap("EXPORT_PATCHES is unset: your programs run unpatched. Showing what EXPORT_PATCHES=1 "
                             "selects.", "  ")
            print("\n".join(lines))
        sys.stdout.write(render(data, out, show_all=args.show_all))
    return 1 if any(p["state"] == state.FAILED for p in data["patches"]) else 0


def _diff(args) -> int:
    import fnmatch

    from .agent import AGENT
    from .diffs import describe, format_entry

    specs = [r.spec for r in AGENT.records.values()]
    chosen = [s for s in specs if any(fnmatch.fnmatchcase(s.id, p) for p in args.patterns)]
    if not chosen:
        print(f"autopatch diff: no patch matches {' '.join(args.patterns)!r}; valid ids: {', '.join(s.id for s in specs)}",
              file=sys.stderr)
        return 2
    # Reading a patch's target imports its module (a transformers model can take a second): say where we are.
    entries = []
    with Progress("autopatch diff") as progress:
        for number, spec in enumerate(chosen, 1):
            if len(chosen) > 1:
                progress.update(f"{number}/{len(chosen)} {spec.id}")
            entries.append(format_entry(spec, "rst") if args.format == "rst" else describe(spec))
    if args.format == "rst":
        for text in entries:
            print(text)
    elif args.json:
        print(json.dumps({"patches": entries}, indent=2))
    else:
        from .diff_text import render

        # A patch named by its id is shown even where it does not apply: that is the question asked.
        named = set(args.patterns)
        sys.stdout.write(render(entries, Output(sys.stdout, wide=args.wide), args.show_all, named))
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


def _validate(args) -> int:
    from . import validate as validation
    from .validate_text import render

    return _model_report(args, "validate", lambda progress: validation.validate(
        arch=args.arch, step=args.step, model=args.model, builder=args.builder, kind=args.kind, onnx=args.onnx,
        strict=args.strict, padded=args.padded, patches=args.patches, tolerance=args.tolerance, progress=progress),
        lambda report, out: render(report, out, every_leaf=args.verbose))


def _diagnose(args) -> int:
    from . import diagnose as diagnosis
    from .diagnose_text import render

    return _model_report(args, "diagnose", lambda progress: diagnosis.diagnose(
        arch=args.arch, step=args.step, model=args.model, builder=args.builder, kind=args.kind, patches=args.patches,
        strategy=args.strategy, replace_failing=args.replace_failing, compare=args.compare, tolerance=args.tolerance,
        progress=progress),
        lambda report, out: render(report, out, verbose=args.verbose))


def _model_report(args, command: str, run, render) -> int:
    """validate and diagnose: progress lines under -v, a bad input as one line and exit 2, the report as text or
    --json, exit 0 when it is ok and 1 when not."""
    from .validate import BadInput

    progress = (lambda text: print(f"autopatch {command}: {text}", file=sys.stderr, flush=True)) if args.verbose \
        else None
    try:
        report = run(progress)
    except BadInput as exc:
        print(f"autopatch {command}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        sys.stdout.write(render(report, Output(sys.stdout)))
    return 0 if report["ok"] else 1
