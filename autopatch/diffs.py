"""What each patch changes, as text: unified diffs of route patches, the layout of pytree registrations."""

from __future__ import annotations

import difflib
import importlib
import inspect
import textwrap

from .spec import owner_and_name


def original_of(spec):
    """The original object behind ``spec``'s target, importing its module if needed (diagnostics only)."""
    module = importlib.import_module(spec.trigger)
    owner, name = owner_and_name(module, spec.target)
    raw = inspect.getattr_static(owner, name)
    fn = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    return getattr(fn, "__autopatch_original__", fn)


def _source(obj) -> str:
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError) as exc:
        return f"<source not available: {exc}>\n"


def _header(spec) -> str:
    return f"{spec.family}: {spec.target_name} -> {spec.replacement or '(export scope entry)'}"


def _body(spec) -> tuple[str, str]:
    """What the patch changes and the language of that text ("diff" or "text"); raises when the target
    cannot be read (not installed, missing from this version)."""
    if spec.mode == "route":
        original = original_of(spec)
        replacement = spec.resolve_replacement()
        body = "".join(
            difflib.unified_diff(
                _source(original).splitlines(keepends=True),
                _source(replacement).splitlines(keepends=True),
                fromfile=f"original {spec.target_name}",
                tofile=f"patched {spec.replacement}",
            )
        )
    elif spec.mode == "rewrite":
        from .rewrite.control_flow import normalized_source

        original = original_of(spec)
        rewritten = spec.resolve_replacement()(original)  # the same text the installed patch compiled
        body = "".join(
            difflib.unified_diff(
                normalized_source(original).splitlines(keepends=True),
                rewritten.__autopatch_source__.splitlines(keepends=True),
                fromfile=f"original {spec.target_name} (as parsed: comments and layout dropped)",
                tofile=f"rewritten by {spec.replacement}",
            )
        )
    elif spec.mode == "install":
        module = importlib.import_module(spec.replacement.partition(":")[0])
        body = f"installs (does not rewrite code); what it installs:\n\n{inspect.cleandoc(module.__doc__ or '')}\n"
    else:
        body = (
            "wraps (does not rewrite code): calling it turns the export scope on for the calling thread, so that "
            "route patches use their replacements for the duration of the call.\n"
        )
    return body, "diff" if spec.mode in ("route", "rewrite") else "text"


def format_diff(spec, format: str = "raw") -> str:
    if format not in ("raw", "rst"):
        raise ValueError(f"format_diff: unknown format {format!r}; valid: raw, rst")
    body, language = _body(spec)
    return _render(spec, _header(spec), body, format, language)


def describe(spec) -> dict:
    """One patch as `autopatch diff --json` gives it. ``applies``: the installed versions are the patch's
    and its target is there; otherwise ``why_not`` says why and ``body`` holds no diff (a diff against code
    the patch never touches would mislead)."""
    from .versions import unmet

    why = unmet(spec.requires)
    body, language = "", "text"
    if not why:
        try:
            body, language = _body(spec)
        except Exception as exc:  # the target is missing although the versions match
            why = f"{type(exc).__name__}: {exc}"
    if why:
        body = f"no diff here: {why}\n"
    replacement = spec.replacement
    if callable(replacement):  # a custom patch may hand the function itself
        replacement = f"{replacement.__module__}:{replacement.__qualname__}"
    return {
        "id": spec.id,
        "family": spec.family,
        "mode": spec.mode,
        "target": spec.target_name,
        "replacement": replacement,
        "requires": spec.requirement_text,
        "applies": not why,
        "why_not": why,
        "header": _header(spec),
        "language": language,
        "body": body,
    }


def format_entry(spec, format: str = "raw") -> str:
    """``format_diff`` where the patch applies to the installed versions; elsewhere its header and why not."""
    entry = describe(spec)
    return _render(spec, entry["header"], entry["body"], format, entry["language"])


def _render(spec, header: str, body: str, format: str, language: str) -> str:
    if format == "raw":
        return f"{header}\n{body}"
    title = spec.id
    indented = textwrap.indent(body, "    ")
    return (
        f".. _l-patch-{spec.id.replace('.', '-')}:\n\n{title}\n{'=' * len(title)}\n\n{spec.reason}\n\n"
        f"``{header}``\n\n.. code-block:: {language}\n\n{indented}\n"
    )
