"""`autopatch diagnose` for a person: the pieces tried as a tree, one line each, the smallest failing ones detailed.

    autopatch diagnose · llama · decode · patches none · only-if-failing
      ✗ (model) LlamaForCausalLM          FAIL   0.9 s  ValueError: Unsupported input type <class '...DynamicCache'>
        ✗ model LlamaModel                FAIL   0.0 s  ValueError: Unsupported input type ...  ◀ smallest failing
            dynamic_shapes={'input_ids': {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, ...}
            what to do: shipped patch pytree.dynamic_cache is off: EXPORT_PATCHES=pytree.dynamic_cache
          ✓ model.embed_tokens Embedding  ok     0.3 s  3 calls compared (2 at other sizes), max abs 0
    failed: 1 smallest failing piece: model
"""

from __future__ import annotations

from .diagnose import DISC, FAIL, NOT_CALLED, OK

#: A status's symbol, then its ASCII stand-in for a stream that cannot print it (a legacy code page).
SYMBOLS = {OK: ("✓", "+"), FAIL: ("✗", "x"), DISC: ("≠", "!"), NOT_CALLED: ("·", "-")}
WORDS = {OK: "ok", FAIL: "FAIL", DISC: "DISC", NOT_CALLED: "-"}
COLORS = {OK: "green", FAIL: "red", DISC: "red", NOT_CALLED: None}


def _symbol(status: str, out) -> str:
    fancy, plain = SYMBOLS[status]
    try:
        fancy.encode(getattr(out.stream, "encoding", None) or "ascii")
        return fancy
    except (UnicodeEncodeError, LookupError):
        return plain


def render(report: dict, out, verbose: bool = False) -> str:
    source = report["source"]
    name = source["arch"] or source["model"] or source["builder"]
    lines = out.join(["autopatch diagnose", name, str(report["step"]), f"patches {report['patches_selected']}",
                      report["strategy"], f"{report['input_sets']} input sets traced"])
    for piece in report["pieces"]:
        lines += _piece_lines(piece, out, verbose)
    failing = report["failing"]
    if "replaced" in report:
        lines += _replaced_lines(report["replaced"], out)
    if "patches_make_export" in report:
        made = ", ".join(report["patches_make_export"]) or "none"
        lines += out.wrap(f"the patches make these pieces export (they fail with no patch): {made}", "    ", "  ")
    if report["ok"]:
        lines.append(out.paint("ok", "green") + f": every piece tried exported, and its program matched eager "
                                                f"within {report['tolerance']:g} on every recorded call")
    else:
        count = f"{len(failing)} smallest failing piece{'s' if len(failing) != 1 else ''}"
        lines.append(out.paint("failed", "red") + f": {count}: {', '.join(failing)}")
    return "\n".join(lines) + "\n"


def _piece_lines(piece: dict, out, verbose: bool) -> list:
    """The piece's line (status and time in fixed columns, then the tree), and below a smallest failing one
    (or any under --verbose) its error, location, dynamic shapes, patches used and what to do."""
    status = piece["status"]
    word = WORDS[status]
    tree = "  " * piece["depth"]
    line = (f"  {_symbol(status, out)} {out.paint(word, COLORS[status])}{' ' * (5 - len(word))}"
            f"{piece['seconds']:>5.1f} s  {tree}{piece['name']} ({piece['class']})")
    if "without_patches" in piece:  # --compare
        line += f"  [no patch: {WORDS[piece['without_patches']['status']]}]"
    if status == OK:
        line += (f"  {piece['compared']} calls compared, {piece['other_sizes']} at other sizes, max abs "
                 f"{piece['max_abs']:.2g}")
        if piece.get("other_layouts"):  # calls the program was not exported for (a None mask, another flag)
            line += f", {piece['other_layouts']} of another layout not run"
    elif status == NOT_CALLED:
        line += "  never called"
    smallest = piece.get("smallest_failing")
    if smallest:
        line += "  <- smallest failing"
    elif status in (FAIL, DISC):
        line += "  " + piece.get("error", "")
    lines = [out.cut(line, out.width) if out.width else line]
    more = " " * 17 + tree + "  "
    detailed = smallest or verbose
    if smallest:
        lines += out.wrap(piece.get("error", ""), more + "  ", more)[:3]  # the start says what; --json has it all
    if detailed and piece.get("location"):
        lines.append(f"{more}at {piece['location']}")
    if detailed and piece.get("dynamic_shapes"):
        lines += out.wrap(f"dynamic_shapes={piece['dynamic_shapes']}", more + "  ", more)
    used = sorted((piece.get("patches") or {}).items())
    if used and (detailed or piece["depth"] == 0):
        lines += out.join([f"{more}patches used  {used[0][0]} {used[0][1]}"] + [f"{k} {v}" for k, v in used[1:]],
                          indent=more + "  ")
    if piece.get("advice"):
        lines += out.wrap(piece["advice"]["text"], more + "  ", f"{more}what to do: ")
    return lines


def _replaced_lines(replaced: dict, out) -> list:
    """--replace-failing: which pieces became custom ops, and whether the whole model then exported and matched."""
    names = ", ".join(replaced["pieces"]) or "none"
    lines = out.wrap(f"replaced by custom ops: {names}", "    ", "  ")
    for name, why in replaced.get("refused", {}).items():
        lines += out.wrap(f"not replaced: {name}: {why}", "    ", "  ")
    status = replaced["status"]
    word = out.paint(WORDS[status], COLORS[status])
    if status == OK:
        text = (f"the whole model exports around them: {replaced['compared']} calls compared, "
                f"{replaced['other_sizes']} at other sizes, max abs {replaced['max_abs']:.2g}")
    elif status == DISC:
        text = f"the whole model exports around them, but differs from eager: {replaced.get('error', '')}"
    else:
        text = f"the whole model still does not export: {replaced.get('error', '')}"
    lines += out.wrap(text, "    ", f"  {_symbol(status, out)} {word} ")
    return lines
