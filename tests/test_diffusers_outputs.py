"""diffusers' output containers (UNet2DConditionOutput and every other BaseOutput): measured, nothing to patch.

diffusers registers each BaseOutput subclass as a pytree node itself (BaseOutput.__init_subclass__), so a program
returns the container, fields intact. This test keeps that claim honest: a tiny UNet2DConditionModel exports with
no patch, with dynamic batch, and returns its UNet2DConditionOutput matching eager at other batch sizes. If a
diffusers release stops registering, this fails and a pytree row is due."""

import pytest
import torch

diffusers = pytest.importorskip("diffusers", reason="diffusers is an optional dependency (the 'test' extra has it)")


def _unet():
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16, attention_head_dim=4, norm_num_groups=4).eval()


def _inputs(batch, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 4, 8, 8, generator=g), torch.tensor(10), torch.randn(batch, tokens, 16, generator=g))


def test_unet_output_container_needs_no_patch(agent):
    assert not agent.active
    model = _unet()
    dyn = torch.export.Dim.DYNAMIC
    with torch.no_grad():
        program = torch.export.export(model, _inputs(2, 5, 1), dynamic_shapes=({0: dyn}, None, {0: dyn, 1: dyn}))
        for batch, tokens, seed in ((1, 3, 2), (3, 7, 3)):
            got, expected = program.module()(*_inputs(batch, tokens, seed)), model(*_inputs(batch, tokens, seed))
            assert type(got) is type(expected) is diffusers.models.unets.unet_2d_condition.UNet2DConditionOutput
            assert list(got.keys()) == list(expected.keys()) == ["sample"]
            torch.testing.assert_close(got.sample, expected.sample)
