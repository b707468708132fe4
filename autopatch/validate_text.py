"""`autopatch validate` for a person: one line per stage, the verdict last.

    autopatch validate · llama · decode · patches 1
      build        ok      0.4 s  LlamaForCausalLM (causal, decode) · 98,624 parameters
      export       ok      2.1 s  torch.export (non-strict), 12 dynamic dims still symbolic
      run          ok      0.1 s  2 input sets of other sizes, 5 leaves: max abs 1.2e-07 (logits)
      patches used  pytree.dynamic_cache 3 · torch.broadcast.fast_binary 402
    ok: every stage passed, every output leaf within 0.0001 of eager
"""

from __future__ import annotations


def render(report: dict, out, every_leaf: bool = False) -> str:
    source = report["source"]
    name = source["arch"] or source["model"] or source["builder"]
    lines = out.join(["autopatch validate", name, str(report["step"]), f"patches {report['patches_selected']}"])
    for stage in report["stages"]:
        word = "ok" if stage["ok"] else "FAILED"
        verdict = out.paint(word, "green" if stage["ok"] else "red") + " " * (7 - len(word))
        text = stage.get("detail", "") if stage["ok"] else stage.get("error", "")
        if "params" in stage:
            text += f" {out.dot} {stage['params']:,} parameters"
        lines.append(f"  {stage['stage']:<12} {verdict}{stage['seconds']:>5.1f} s  {text}")
        if not stage["ok"] and stage.get("location"):
            lines.append(f"  {'':<12} at {stage['location']}")
        if every_leaf and stage["ok"] and "leaves" in stage:
            for path, leaf in stage["leaves"].items():
                lines.append(f"  {'':<12}   {path}: max abs {leaf['max_abs']:.3g}, max rel {leaf['max_rel']:.3g}")
    used = report.get("patches_used") or {}
    if used:
        parts = [f"{patch} {count}" for patch, count in sorted(used.items())]
        lines += out.join([f"  patches used  {parts[0]}"] + parts[1:], indent=" " * 16)
    elif report["stages"] and len(report["stages"]) > 1:
        lines.append("  patches used  none")
    if report["ok"]:
        lines.append(out.paint("ok", "green") + f": every stage passed, every output leaf within "
                                                f"{report['tolerance']:g} of eager")
    else:
        failed = next((s for s in report["stages"] if not s["ok"]), None)
        lines.append(out.paint("failed", "red") + (f" at {failed['stage']}" if failed else ""))
    return "\n".join(lines) + "\n"
