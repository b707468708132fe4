"""Every environment variable autopatch reads, declared once.

The README table and ``autopatch status --help`` are generated from ``VARIABLES``; a test checks the README
against it.  Reading the environment is kept here so that the rest of the code never calls ``os.environ``.
"""

from __future__ import annotations

import os


class EnvVar:
    """One variable: its name, default and the help text (a plain class: ``dataclasses`` is too slow to import
    at interpreter start-up)."""

    __slots__ = ("name", "default", "help")

    def __init__(self, name: str, default: str, help: str):
        self.name, self.default, self.help = name, default, help

    def __repr__(self):
        return f"EnvVar(name={self.name!r}, default={self.default!r}, help={self.help!r})"


VARIABLES = (
    EnvVar(
        "EXPORT_PATCHES",
        "",
        "Selects the patches: `1`/`all` the defaults, `0`/empty none, or a comma list of families, ids and "
        "globs; a leading `-` excludes (`all,-transformers.*`).",
    ),
    EnvVar(
        "EXPORT_PATCHES_STRICT",
        "0",
        "`1` turns every reported problem (bad selection, patch that fails to install) into an exception. For CI.",
    ),
    EnvVar(
        "EXPORT_PATCHES_REPORT",
        "",
        "A JSON file path: after every export in scope the process rewrites it with the list of its exports "
        "(entry point, thread, seconds, error, hits of every patch used, and its stages: each entry point it "
        "called, such as every try of torch.export inside torch.onnx.export, with its own seconds, error and hits; "
        "what the outer entry did besides, such as the ONNX conversion, under `outside_stages`).",
    ),
    EnvVar(
        "EXPORT_PATCHES_REWRITE",
        "",
        "Your own functions whose tensor-condition `if` statements become `torch.cond` under export: a comma list "
        "of `module:qualname` (`my_model:MyModel.forward`), each a patch `rewrite.user.<module>.<qualname>` "
        "installed when its module is imported; and/or `auto`: when an `if` on a tensor stops an export, that "
        "function is rewritten (`rewrite.auto.<module>.<qualname>`) and the export runs again.",
    ),
    EnvVar(
        "EXPORT_PATCHES_VALIDATE",
        "",
        "`1`: every export in scope checks what it made, on its own inputs, before returning it: the program "
        "(for `torch.onnx.export`, onnxruntime) against the eager model, every output leaf and the structure, and "
        "every dim `dynamic_shapes` asked for still symbolic. Results in `EXPORT_PATCHES_REPORT` and "
        "`autopatch.last_export_report()` (`validation`); a failed check is a warning line (an exception under "
        "`EXPORT_PATCHES_STRICT=1`). Costs an eager and a program call per export.",
    ),
    EnvVar(
        "EXPORT_PATCHES_LOG",
        "",
        "Log level of the `autopatch` logger printed to stderr (`debug` shows every state change). Empty: "
        "warnings only, through Python's default handler.",
    ),
)

_BY_NAME = {v.name: v for v in VARIABLES}
TRUE_WORDS = ("1", "true", "yes", "on")


def read(name: str) -> str:
    return os.environ.get(name, _BY_NAME[name].default).strip()


def strict() -> bool:
    return read("EXPORT_PATCHES_STRICT").lower() in TRUE_WORDS


def markdown_table() -> str:
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for v in VARIABLES:
        rows.append(f"| `{v.name}` | `{v.default}` | {v.help} |")
    return "\n".join(rows)
