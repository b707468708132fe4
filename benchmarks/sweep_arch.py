"""One architecture of the sweep, in its own process (sweep.py -> _child.py's server, which forks per job).

    python benchmarks/_child.py --arch MODEL_TYPE KIND OUT.json      # what the server runs; EXPORT_PATCHES=1 set

The architecture is built by ``tiny.build`` (its default config shrunk to tiny sizes, random weights) and each
of its steps (``tiny.steps``: prefill or forward, decode with the model's own cache) is exported with plain
``torch.export.export`` -- the agent is switched on by the environment only -- from input set A, with dynamic
shapes guessed from A and B, and compared leaf by leaf with eager on set C.  Then:

* ``loop``: the exported decode program stepped ``LOOP_STEPS`` times as a runtime steps it (its own cache output
  fed back, one new token a step, mask and positions advanced), from set B (another batch and past than traced),
  beside eager stepping from the same start: every step's logits and the final output, cache included, compared.
  One-step checks miss a cache that is wrong only on the next step.
* ``strict``: the main step (decode where there is one) exported again with ``strict=True`` (Dynamo).
* ``onnx``: the main step through ``torch.onnx.export(dynamo=True)`` instead (same model, set A, dynamic shapes),
  the file checked by ``onnx.checker``, onnxruntime (CPU) on set C against eager, every leaf. Its verdict is
  ``agent`` when the conversion, the run or the numbers fail with the agent on; the page shows it in a column of
  its own and the headline ("export every step") counts the torch.export steps only.

Every step gets a verdict:

* ``ok``;
* ``agent``: the export fails, the program fails to run, or its numbers differ from eager, with the agent on:
  ours to fix;
* ``harness``: the sweep could not build the model or its inputs (autopatch.models.tiny's fault or a missing optional package);
* ``upstream``: eager itself fails or is not deterministic, or the output's structure depends on the input sizes
  (a Python list per sample: no single program can return both), or a causal LM's eager prefill attends ahead
  (its first position changes with the last token) where the program does not, so no export could be right.
"""

from __future__ import annotations

import copy
import os
import time

from _child import compare, error_text, export_onnx, first_line, fit_to_signature, guess_dynamic_shapes, leaves_of

LOOP_STEPS = 8

OK, AGENT, HARNESS, UPSTREAM = "ok", "agent", "harness", "upstream"


class Verdict(Exception):
    """Ends a step with a verdict other than ok."""

    def __init__(self, verdict: str, outcome: str, detail: str):
        super().__init__(detail)
        self.verdict, self.outcome, self.detail = verdict, outcome, detail


def run(model_type: str, kind: str, onnx: bool = True, checkpoint=lambda result: None) -> dict:
    """The architecture's row. ``checkpoint(row)`` is called before each step with the steps so far and the one
    about to run (``row["running"]``), so a timeout that kills this process loses that step only."""
    import torch

    from autopatch.models import tiny

    torch.set_num_threads(1)
    started = time.perf_counter()
    arch = tiny.architecture(model_type, kind)
    result = {"model_type": model_type, "kind": kind, "class_name": arch.class_name if arch else None,
              "build": None, "steps": {}}
    try:
        if arch is None:
            raise tiny.BuildError(f"{model_type} is not a {kind} architecture in this transformers")
        model = tiny.build(arch)
        result["params"] = sum(p.numel() for p in model.parameters())
        result["build"] = OK
    except Exception as exc:
        result.update(build=HARNESS, build_error=first_line(exc), seconds=round(time.perf_counter() - started, 2))
        return result
    def step_of(name, work):
        checkpoint({**result, "running": name, "seconds": round(time.perf_counter() - started, 2)})
        if os.environ.get("AUTOPATCH_SWEEP_HANG_AT") == name:  # tests: a step that never ends, deterministically
            time.sleep(10**6)
        result["steps"][name] = _timed(work)

    programs = {}
    for step in tiny.steps(arch):
        step_of(step, lambda: _export_step(model, arch, step, programs))
    decode = programs.get("decode")
    if decode is not None:
        step_of("loop", lambda: _loop(model, arch, *decode))
    main = "decode" if "decode" in result["steps"] else tiny.steps(arch)[0]
    if result["steps"][main]["verdict"] == OK:
        step_of("strict", lambda: _export_step(model, arch, main, {}, strict=True))
        if onnx:
            step_of("onnx", lambda: _onnx_step(model, arch, main))
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def _timed(work) -> dict:
    started = time.perf_counter()
    try:
        entry = {"verdict": OK, "outcome": "ok", "detail": work()}
    except Verdict as verdict:
        entry = {"verdict": verdict.verdict, "outcome": verdict.outcome, "detail": verdict.detail}
    except Exception as exc:  # the sweep's own code: never hidden, never counted against the agent
        entry = {"verdict": HARNESS, "outcome": "harness_error", "detail": first_line(exc)}
    entry["seconds"] = round(time.perf_counter() - started, 2)
    return entry


def _input_sets(model, arch, step) -> list:
    from autopatch.models import tiny

    from autopatch.models.builders import StatefulModel

    try:
        return [tiny.inputs(model, arch, step, k) for k in range(3)]
    except StatefulModel as exc:
        raise Verdict(UPSTREAM, "stateful_model", first_line(exc)) from None
    except Exception as exc:
        raise Verdict(HARNESS, "inputs_error", first_line(exc)) from None


def _eager(model, inputs):
    import torch

    with torch.no_grad():
        try:
            return model(**copy.deepcopy(inputs))
        except Exception as exc:
            raise Verdict(UPSTREAM, "eager_error", "eager fails: " + first_line(exc)) from None


def _export_step(model, arch, step: str, programs: dict, strict: bool = False) -> str:
    """Exports ``step`` from set A (shapes from A and B), runs it on C, compares with eager; the program is kept in
    ``programs`` with the sets, for the loop."""
    import torch

    a, b, c = _input_sets(model, arch, step)
    expected = _eager(model, c)
    same, detail = compare(_eager(model, c), expected)
    if not same:
        raise Verdict(UPSTREAM, "nondeterministic", "eager differs from itself on the same inputs: " + detail)
    at_b = _eager(model, b)
    if len(leaves_of(at_b)) != len(leaves_of(expected)):
        raise Verdict(UPSTREAM, "size_dependent_structure",
                      f"eager returns {len(leaves_of(at_b))} tensors for set B and {len(leaves_of(expected))} for "
                      "set C: the output's structure follows the input sizes, no single program can")
    with torch.no_grad():
        try:
            shapes = fit_to_signature(model, guess_dynamic_shapes(a, b))
            program = torch.export.export(model, (), kwargs=copy.deepcopy(a), dynamic_shapes=shapes, strict=strict)
        except Exception as exc:
            masked = _eager_masked_path_error(model, arch, step)
            if masked:
                raise Verdict(UPSTREAM, "eager_masked_path_fails",
                              f"eager fails on a left-padded batch, the masked path every traced program takes "
                              f"(eager skips an all-ones mask): {masked}; the export: {first_line(exc)}") from None
            raise Verdict(AGENT, "export_error", first_line(exc)) from None
        try:
            got = program.module()(**copy.deepcopy(c))
        except Exception as exc:
            raise Verdict(AGENT, "run_error", first_line(exc)) from None
    same, detail = compare(got, expected)
    if not same:
        if arch.kind in ("causal", "vlm") and step == "prefill" and _attends_ahead(model, c) and not _attends_ahead(
                program.module(), c):
            raise Verdict(UPSTREAM, "eager_not_causal",
                          "eager's first position changes with the last token (it attends ahead), the program's "
                          f"does not: no causal program can match ({detail})")
        raise Verdict(AGENT, "wrong_result", detail)
    programs[step] = (program, b)
    return detail


def _eager_masked_path_error(model, arch, step: str) -> str:
    """Eager's first error line on set A left-padded, or "" when it runs (or the step has no padded form). Eager
    skips an all-ones attention mask and takes a mask-free path (sdpa's grouped-query path, for one, runs only
    without a mask); a traced program cannot know the mask is all ones, so it always takes the masked path. When
    eager fails there too, no program can match it."""
    import torch

    from autopatch.models import tiny

    try:
        padded = tiny.inputs(model, arch, step, 0, padded=True)
    except Exception:  # noqa: BLE001 - no padded form: nothing to tell
        return ""
    mask = padded.get("attention_mask")
    if mask is None or bool(mask.all()):
        return ""
    with torch.no_grad():
        try:
            model(**padded)
        except Exception as exc:  # noqa: BLE001 - eager's own failure is the finding
            return first_line(exc)
    return ""


def _onnx_step(model, arch, step: str) -> str:
    """``step`` (which torch.export passed) through torch.onnx.export(dynamo=True) from set A, shapes from A and B;
    onnxruntime on set C against eager."""
    import importlib.util

    import torch

    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        raise Verdict(HARNESS, "onnx_unavailable", f"{', '.join(missing)} not installed (pip install autopatch[onnx])")
    a, b, c = _input_sets(model, arch, step)
    expected = _eager(model, c)
    with torch.no_grad():
        try:
            run_onnx = export_onnx(model, a, fit_to_signature(model, guess_dynamic_shapes(a, b)))
        except Exception as exc:
            raise Verdict(AGENT, "onnx_error", error_text(exc)) from None
        try:
            got = run_onnx(copy.deepcopy(c))
        except Exception as exc:
            raise Verdict(AGENT, "onnx_run_error", first_line(exc)) from None
    same, detail = compare(got, expected)
    if not same:
        raise Verdict(AGENT, "onnx_wrong_result", detail)
    return detail


def _attends_ahead(model, inputs: dict) -> bool:
    """Whether the logits at the first position change when only the last token changes. Eager of some versions
    drops the causal mask of an unpadded batch: Doge on 4.57, and PaliGemma on 5.x, whose text config is
    bidirectional and whose unpadded prefill skips the all-ones mask (padded, it is causal). No causal program
    reproduces that. The last tokens are rotated across the batch, so each is still a text token (a VLM's image
    placeholders stay where they are)."""
    import torch

    changed = copy.deepcopy(inputs)
    ids = changed["input_ids"]
    if ids.shape[0] > 1 and not torch.equal(ids[:, -1], ids[:, -1].roll(1)):
        ids[:, -1] = ids[:, -1].roll(1)
    else:
        ids[:, -1] = (ids[:, -1] + 1) % max(int(ids.max()) + 1, 2)
    with torch.no_grad():
        try:
            first = _field(model(**copy.deepcopy(inputs)), "logits")[:, 0]
            second = _field(model(**changed), "logits")[:, 0]
        except Exception:  # noqa: BLE001 - a model that refuses the changed inputs tells nothing
            return False
    return not torch.allclose(first, second, rtol=1e-5, atol=1e-6)


def _loop(model, arch, program, start: dict) -> str:
    """``LOOP_STEPS`` decode steps, program beside eager, both fed eager's next token."""
    import torch

    ours, theirs = copy.deepcopy(start), copy.deepcopy(start)
    runner = program.module()
    worst = 0.0
    with torch.no_grad():
        for step in range(LOOP_STEPS):
            try:
                got = runner(**ours)
            except Exception as exc:
                raise Verdict(AGENT, "run_error", f"step {step + 1}: {first_line(exc)}") from None
            try:
                expected = model(**theirs)
            except Exception as exc:
                raise Verdict(UPSTREAM, "eager_error", f"eager step {step + 1}: {first_line(exc)}") from None
            logits = _field(expected, "logits")
            same, detail = compare(_field(got, "logits"), logits)
            if not same:
                raise Verdict(AGENT, "wrong_result", f"step {step + 1} logits: {detail}")
            worst = max(worst, (_field(got, "logits") - logits).abs().max().item())
            if step == LOOP_STEPS - 1:
                same, detail = compare(got, expected)
                if not same:
                    raise Verdict(AGENT, "wrong_result", f"after step {step + 1}: {detail}")
                return f"{LOOP_STEPS} steps, logits max abs diff {worst:.3g}; final output: {detail}"
            token = logits[:, -1].argmax(-1, keepdim=True)
            ours, theirs = advance(ours, got, token), advance(theirs, expected, token)
    raise AssertionError("unreachable")


def _field(output, name: str):
    value = getattr(output, name, None)
    if value is None and isinstance(output, dict):
        value = output.get(name)
    if value is None:
        raise Verdict(HARNESS, "no_field", f"no {name} in the output ({type(output).__name__})")
    return value


CACHE_FIELDS = ("past_key_values", "cache_params")


def advance(inputs: dict, output, token) -> dict:
    """The next decode step's inputs as a runtime builds them: the new token, the cache the step returned, the
    attention mask one column longer, positions one further."""
    import torch

    decoder = "decoder_input_ids" in inputs
    following = dict(inputs)
    ids = inputs["decoder_input_ids" if decoder else "input_ids"]
    if ids.dim() == 3 and token.shape[0] != ids.shape[0]:
        # one code per codebook at each position (Dia): its logits' rows are (sample, codebook)
        token = token.view(ids.shape[0], -1, 1).transpose(1, 2).contiguous()
    elif ids.dim() == 3:
        # a text token beside each audio codebook's code (Kyutai's speech-to-text): the model predicts the text; a
        # runtime reads the next frame's codes from its codec, here the last frame's again
        token = torch.cat([token[..., None], ids[:, -1:, 1:]], dim=-1)
    following["decoder_input_ids" if decoder else "input_ids"] = token
    for name in CACHE_FIELDS:
        if name in inputs:
            following[name] = _field(output, name)
    mask = "decoder_attention_mask" if decoder else "attention_mask"
    if inputs.get(mask) is not None:
        ones = torch.ones(token.shape[0], 1, dtype=inputs[mask].dtype)
        following[mask] = torch.cat([inputs[mask], ones], dim=1)
    if inputs.get("position_ids") is not None:
        following["position_ids"] = inputs["position_ids"][..., -1:] + 1
    if inputs.get("cache_position") is not None:
        following["cache_position"] = inputs["cache_position"][-1:] + 1
    return following
