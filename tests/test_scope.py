"""The export scope, with real torch.export calls in both tracing modes and real threads."""

import threading

import pytest
import torch
import transformers

import autopatch
import proving
import scope_target
from autopatch import registry, scope, state
from autopatch.agent import Agent
from autopatch.spec import PatchSpec

ROUTE = PatchSpec(
    id="test.double",
    family="torch",
    trigger="scope_target",
    target="double",
    mode="route",
    replacement="scope_target:triple",
    reason="test patch on a real function",
)


@pytest.fixture
def agent(make_agent):
    """A private agent with the real entry points and one test route patch; the global one stays off."""
    return make_agent([ROUTE])


def _export(model, x, strict):
    return proving.export(model, (x,), shapes={"x": {0: torch.export.Dim.DYNAMIC}}, strict=strict)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_router_calls_the_replacement_only_inside_export(agent, strict):
    model = scope_target.UsesDouble()
    x = torch.arange(4.0)
    assert torch.equal(model(x), x * 2 + 1)
    program = _export(model, x, strict)
    other = torch.arange(7.0)  # another size than traced
    assert torch.equal(program.module()(other), other * 3 + 1)
    assert torch.equal(model(other), other * 2 + 1)  # eager after export: original again
    record = agent.records["test.double"]
    assert record.state == state.APPLIED_LATE and record.hits >= 1
    report = autopatch.last_export_report()
    assert report["entry"] == "torch.export.export" and report["patches"]["test.double"] >= 1
    assert not autopatch.in_export()


def test_flag_is_reset_after_a_failing_export(agent):
    class Fails(torch.nn.Module):
        def forward(self, x):
            seen.append(autopatch.in_export())
            raise ValueError("model bug")

    seen = []
    with pytest.raises(ValueError, match="model bug"):
        torch.export.export(Fails(), (torch.ones(2),), strict=False)
    assert seen == [True] and not autopatch.in_export()
    assert autopatch.last_export_report()["error"] == "ValueError: model bug"


def test_nested_entry_points_keep_one_run_and_restore_the_outer_flag(agent):
    # torch.export.export calls the wrapped _trace._export: two entry points, one run, owned by the outer one.
    x = torch.ones(3)
    torch.export.export(scope_target.UsesDouble(), (x,))
    assert autopatch.last_export_report()["entry"] == "torch.export.export"
    assert agent.records["agent.scope.public_export"].hits == 1
    assert agent.records["agent.scope.export"].hits == 0  # inner: nested, not a new run
    # A direct call of the inner entry point starts its own run.
    from torch.export._trace import _export

    _export(scope_target.UsesDouble(), (x,), {}, None, strict=False, pre_dispatch=True)
    assert autopatch.last_export_report()["entry"] == "torch.export._trace._export"


def test_aliases_bound_before_and_after_activation_both_export_in_scope(agent):
    from torch.export import export as bound_after

    assert bound_after is torch.export.export and bound_after.__autopatch_id__ == "agent.scope.public_export"
    original_public = bound_after.__autopatch_original__  # what a name bound before activation holds
    x = torch.arange(5.0)
    program = original_public(scope_target.UsesDouble(), (x,))
    assert torch.equal(program.module()(x), x * 3 + 1)  # the inner entry point set the scope


def test_draft_export_is_in_scope(agent):
    x = torch.arange(5.0)
    program = torch.export.draft_export(scope_target.UsesDouble(), (x,))
    assert torch.equal(program.module()(x), x * 3 + 1)
    assert autopatch.last_export_report()["entry"] == "torch.export.draft_export"


def test_dynamo_constant_marker_is_what_assume_constant_result_sets():
    import torch._dynamo

    def probe():
        return True

    torch._dynamo.assume_constant_result(probe)
    assert vars(probe) == {"_dynamo_marked_constant": True}
    assert scope.use_patch._dynamo_marked_constant and scope.count_hit._dynamo_marked_constant


def test_other_threads_see_the_original_while_one_thread_exports(agent):
    scope_target.calls_by_thread.clear()
    model = scope_target.UsesDouble()
    x = torch.randn(64)
    reference = model(x)
    exporting = threading.Event()
    done = threading.Event()
    eager_results = {}

    def eager_loop(name):
        # forward(), not model(x): while it traces, torch.export's own fx tracer patches nn.Module.__call__
        # for the whole process, so a module *call* in another thread would hit the tracer (torch's
        # limitation, not ours). forward() reaches the routed function all the same.
        outs = []
        exporting.wait()
        while not done.is_set() or not outs:
            outs.append(model.forward(x))
        eager_results[name] = outs

    workers = [threading.Thread(target=eager_loop, args=(f"eager-{i}",), name=f"eager-{i}") for i in range(2)]
    for w in workers:
        w.start()
    hits_before = agent.records["test.double"].hits
    exporter_name = []

    def export_job():
        exporter_name.append(threading.current_thread().name)
        exporting.set()
        try:
            for strict in (False, True):
                _export(model, x, strict)
        finally:
            done.set()

    job = threading.Thread(target=export_job, name="exporter")
    job.start()
    job.join()
    for w in workers:
        w.join()
    assert all(len(outs) > 0 for outs in eager_results.values())
    for outs in eager_results.values():
        assert all(torch.equal(out, reference) for out in outs)  # bit-identical to the unpatched reference
    assert set(scope_target.calls_by_thread) == {"exporter"}  # the replacement never ran in an eager thread
    assert agent.records["test.double"].hits > hits_before


def test_onnx_dynamo_export_is_in_scope(agent):
    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs the optional onnxscript package")
    x = torch.arange(4.0)
    onnx_program = torch.onnx.export(
        scope_target.UsesDouble(), (x,), dynamo=True, dynamic_shapes=({0: torch.export.Dim.DYNAMIC},), verbose=False
    )
    other = torch.arange(6.0)
    assert torch.equal(onnx_program.exported_program.module()(other), other * 3 + 1)
    report = autopatch.last_export_report()
    assert report["entry"] == "torch.onnx.export" and report["patches"] == {"test.double": 1}


def test_onnx_export_reports_each_try_of_torch_export_as_a_stage(agent):
    """EXPORT_PATCHES_REPORT / last_export_report: torch.onnx.export's tries of torch.export (non-strict, then
    strict) are stages of its one run, each with its time, error and the hits made inside it; the conversion is
    what the run did outside them."""
    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs the optional onnxscript package")
    torch.onnx.export(scope_target.UsesDouble(), (torch.arange(4.0),), dynamo=True, verbose=False,
                      dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    report = autopatch.last_export_report()
    assert [(s["entry"], s["error"], s["patches"]) for s in report["stages"]] == [
        ("torch.export.export", None, {"test.double": 1})]
    assert report["outside_stages"]["seconds"] > 0 and report["outside_stages"]["patches"] == {}

    class BranchesOnData(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else -x

    with pytest.raises(Exception):
        torch.onnx.export(BranchesOnData(), (torch.ones(3),), dynamo=True, verbose=False)
    report = autopatch.last_export_report()
    assert [s["entry"] for s in report["stages"]] == ["torch.export.export", "torch.export.export"]  # two tries
    assert all(s["error"] for s in report["stages"]) and report["error"], report


def test_onnx_torchscript_export_is_not_in_scope(agent, tmp_path):
    """torch.onnx.export(dynamo=False) traces with torch.jit, which the replacements (written for torch.export)
    are not for: the model runs the originals, as without autopatch, and no export run is recorded."""
    pytest.importorskip("onnx", reason="the TorchScript ONNX exporter needs the optional onnx package")
    before = autopatch.last_export_report()
    x = torch.arange(4.0)
    path = tmp_path / "model.onnx"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch's notice that this exporter is the legacy one
        torch.onnx.export(scope_target.UsesDouble(), (x,), str(path), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "n"}})
    import onnx
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    other = torch.arange(6.0)
    (got,) = session.run(None, {"x": other.numpy()})
    assert torch.equal(torch.as_tensor(got), other * 2 + 1)  # the original double, not the test route's triple
    assert onnx.load(str(path)).graph.node  # a real model was written
    assert autopatch.last_export_report() == before and agent.records["test.double"].hits == 0


def test_transformers_exporter_wrapper_is_in_scope(agent):
    """transformers' own exportable wrapper calls torch.export.export inside; the scope and the cache
    registration reach it."""
    from transformers.integrations.executorch import export_with_dynamic_cache

    import train_export

    pytree_agent = Agent(registry.EXPORT_ENTRY_POINTS[:0], registry.PATCHES)
    pytree_agent.enable("pytree")
    try:
        model, config = train_export.tiny_llama()
        ids = torch.randint(0, config.vocab_size, (1, 5))
        program = export_with_dynamic_cache(model, ids, torch.ones_like(ids))
        other = torch.randint(0, config.vocab_size, (1, 5))  # its program is static: the traced sizes
        with torch.no_grad():
            got = program.module()(input_ids=other, attention_mask=torch.ones_like(other),
                                   past_key_values=transformers.DynamicCache(config=config), use_cache=True)
            expected = model(input_ids=other, attention_mask=torch.ones_like(other), use_cache=True)
        torch.testing.assert_close(got.logits, expected.logits)
        torch.testing.assert_close(got.past_key_values.layers[0].keys, expected.past_key_values.layers[0].keys)
        report = autopatch.last_export_report()
        assert report["entry"] == "torch.export.export" and report["patches"]["pytree.dynamic_cache"] > 0
    finally:
        pytree_agent.disable()

