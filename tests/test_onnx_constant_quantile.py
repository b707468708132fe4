"""transformers.gemma3n.constant_quantile: Gemma 3n's activation sparsity computes the normal quantile of a config
float with ``Normal(0, 1).icdf`` on a tensor, so the program holds ``erfinv``, which ONNX lacks. Both halves on
the MLP of a tiny Gemma 3n's first layer (sparsity 0.95, the class default): without the row torch.onnx.export
stops at conversion; with it onnxruntime matches eager at other sizes, and the replacement computes what eager
computes (eager itself never runs it: the row acts only while the thread exports). Strict export needs it too:
Dynamo stops inside torch.distributions without it."""

import pytest
import torch

import autopatch
import proving
from autopatch.models import tiny
from conftest import needs_onnx, requires

pytestmark = requires("torch>=2.13")  # the torch.onnx rows' range (autopatch.areas.bounds.TORCH_ONNX)

ROW = "transformers.gemma3n.constant_quantile"


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model = tiny.build(tiny.architecture("gemma3n_text", "causal"))
    first = model.model.layers[0].mlp
    assert first.activation_sparsity == 0.95  # the config class's own pattern, kept per layer
    return first


def _export(mlp):
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    hidden = torch.randn(2, 3, mlp.hidden_size)
    return proving.export_onnx(mlp, (hidden,), shapes=({0: batch, 1: seq},))


def test_without_the_row_onnx_conversion_stops_at_erfinv(make_agent, mlp):
    needs_onnx()
    make_agent(selection=f"all,-{ROW}")
    proving.assert_conversion_stops_at(lambda: _export(mlp), "erf_inv")


@pytest.mark.parametrize("sizes", [(3, 7), (1, 1)], ids=["3x7", "1x1"])
def test_with_the_row_onnxruntime_matches_eager(make_agent, mlp, sizes):
    needs_onnx()
    make_agent()
    program = _export(mlp)
    assert autopatch.last_export_report()["patches"][ROW] >= 1
    hidden = torch.randn(*sizes, mlp.hidden_size)
    with torch.no_grad():
        expected = mlp(hidden)
    proving.assert_onnx_matches(program(hidden), [expected], rtol=1e-5, atol=1e-6)


def test_the_replacement_computes_what_eager_computes(mlp):
    from autopatch.areas.onnx.constant_quantiles import gaussian_topk

    gate = torch.randn(4, 5, mlp.intermediate_size)
    kept = gaussian_topk(mlp, gate)
    assert torch.equal(kept, mlp._gaussian_topk(gate))  # 0.95: bit for bit
    assert 0 < (kept > 0).float().mean() < 0.2  # the cut-off at work: about 5 % of the activations kept


def test_strict_export_stops_in_torch_distributions_without_the_row(make_agent, mlp):
    """Dynamo does not trace into torch.distributions ("Attempted to call function marked as skipped"). The
    distributions rows left out too: their rewritten ``Distribution.__init__`` is code Dynamo traces, so with them
    the strict export builds the Normal (its program then holds the erfinv ONNX lacks: the ONNX test's case)."""
    make_agent(selection=f"all,-{ROW},-torch.distributions.*")
    with pytest.raises(Exception, match="marked as skipped"):
        proving.export(mlp, (torch.randn(2, 3, mlp.hidden_size),), strict=True,
                       shapes=({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")},))


def test_strict_export_keeps_the_quantile_as_a_number(make_agent, mlp):
    """Nor can it trace the C function behind statistics.NormalDist: the row tells it the result is a constant,
    so strict=True exports with the row, with no erfinv in the program, and matches eager at another size."""
    make_agent()
    hidden = torch.randn(2, 3, mlp.hidden_size)
    program = proving.export(mlp, (hidden,), shapes=({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")},),
                             strict=True)
    assert autopatch.last_export_report()["patches"][ROW] >= 1
    assert not any("erfinv" in str(node.target) for node in program.graph.nodes)
    other = torch.randn(3, 5, mlp.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(other), mlp(other))
