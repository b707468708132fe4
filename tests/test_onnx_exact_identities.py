"""torch.onnx.exact_identity_constants: torch.onnx.export(dynamo=True) optimizes the ONNX model with onnxscript's
no-op rules, whose constants match within a tolerance, so ``x * (1 - 1e-6)`` and ``x + 1e-12`` were removed as
if they were ``x * 1`` and ``x + 0``. Both halves: without the row the ONNX model answers wrong at other sizes (a
bucket one over, NaN where eager divides by an epsilon); with it onnxruntime matches eager. Then the model where
it was found: the 4.x Idefics3 vision embeddings (the agent's loop-free positions keep transformers' own scale)."""

import pytest
import torch

import autopatch
import proving
from autopatch import onnx_inputs
from conftest import ONNX_ROWS, requires

pytestmark = ONNX_ROWS

ROW = "torch.onnx.exact_identity_constants"


class NearIdentities(torch.nn.Module):
    """What models write on purpose: coordinates scaled just under 1 so that the last one stays in the last
    bucket (Idefics, SmolVLM), and an epsilon that keeps a division by a zero norm finite."""

    def forward(self, x):
        n = x.shape[0]
        coords = torch.arange(n, dtype=torch.float32) / n * (1 - 1e-6)
        buckets = torch.bucketize(coords, torch.tensor([0.25, 0.5, 0.75]), right=True)
        return buckets, x / (x.norm() + 1e-12)


def _export():
    return proving.export_onnx(NearIdentities(), (torch.zeros(4),), shapes=({0: torch.export.Dim("n")},))


@pytest.mark.parametrize("n", [8, 12])  # other sizes than traced; n/4 lands on every boundary
def test_without_the_row_the_onnx_model_drops_them_and_answers_wrong(make_agent, n):
    make_agent(selection=f"all,-{ROW}")
    x = torch.zeros(n)
    buckets, normalized = _export()(x)
    expected_buckets, expected = NearIdentities()(x)
    assert not torch.equal(torch.as_tensor(buckets), expected_buckets)  # the coordinate n/4 in the next bucket
    assert torch.isnan(torch.as_tensor(normalized)).all() and not torch.isnan(expected).any()


@pytest.mark.parametrize("n", [8, 12])
def test_with_the_row_onnxruntime_matches_eager(make_agent, n):
    make_agent()
    program = _export()
    assert autopatch.last_export_report()["patches"][ROW] >= 2  # one Mul and one Add kept
    for x in (torch.zeros(n), torch.randn(n)):
        (buckets, normalized), (expected_buckets, expected) = program(x), NearIdentities()(x)
        assert torch.equal(torch.as_tensor(buckets), expected_buckets)
        proving.assert_onnx_matches([normalized], [expected])


class TrueIdentities(torch.nn.Module):
    def forward(self, x):
        return (x * 1.0 + 0.0) / 1.0 - 0.0


def test_true_identities_are_still_removed(make_agent):
    """The rules keep their purpose: an exact 1 or 0 is still optimized away, and the row counts nothing."""
    make_agent()
    program = proving.export_onnx(TrueIdentities(), (torch.randn(3),), shapes=({0: torch.export.Dim("n")},))
    assert ROW not in autopatch.last_export_report()["patches"]
    assert {node.op_type for node in program.model.graph} <= {"Identity"}, [n.op_type for n in program.model.graph]
    x = torch.randn(5)
    proving.assert_onnx_matches(program(x), [x], rtol=0, atol=0)


@requires("transformers<5")
@pytest.mark.parametrize("with_row", [False, True], ids=["without", "with"])
def test_idefics3_prefill_through_onnx(make_agent, with_row):
    """4.x Idefics3: 4x4 patches per image, coordinates h / 4 * (1 - 1e-6) bucketed at 0.25, 0.5, 0.75. Without
    the row every patch on a boundary takes the next position embedding (logits off by about 0.08); with it every
    output leaf matches eager at another batch, text length and image count than traced."""
    from autopatch.models import vlms

    make_agent(selection="all" if with_row else f"all,-{ROW}")
    torch.manual_seed(0)
    model = vlms.build_idefics("idefics3")
    traced, other = ({**vlms.idefics_prefill(b, t, i, seed=s), "use_cache": False}
                     for s, (b, t, i) in enumerate([(2, 5, 2), (3, 7, 3)]))
    program = proving.export_onnx(model, traced, other)
    got = onnx_inputs.run(program, **other)
    with torch.no_grad():
        expected = model(**other)
    if with_row:
        assert autopatch.last_export_report()["patches"][ROW] >= 1
        proving.assert_same_outputs(got, expected, rtol=1e-4, atol=1e-4)
    else:
        assert (got["logits"] - expected["logits"]).abs().max() > 1e-2
