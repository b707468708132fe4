"""A user's builder for `autopatch validate --builder validate_target:build`: a model whose second input is
broadcast against the first, and two input sets that differ in every dynamic size."""

import torch


class Scale(torch.nn.Module):
    def forward(self, x, scale):
        return {"scaled": x * scale, "total": (x * scale).sum(-1)}


def build():
    a = {"x": torch.randn(2, 5), "scale": torch.randn(2, 1)}
    b = {"x": torch.randn(3, 7), "scale": torch.randn(3, 1)}
    return Scale(), a, b


def not_a_triple():
    return Scale()
