"""Gemma 3n's activation sparsity with its normal quantile as a number, not as graph operators.

``Gemma3nTextMLP._gaussian_topk`` keeps the activations above ``mean + std * q``, where ``q`` is the standard
normal quantile of the layer's ``activation_sparsity`` (a config float, 0.95 in Gemma 3n's first layers). It
computes ``q`` with ``torch.distributions.Normal(0, 1).icdf`` on a tensor made from that float, so the exported
program holds ``erfinv`` on a constant, and ONNX has no such operator: ``torch.onnx.export`` stops with "No ONNX
function found for prims.erf_inv". Under export, ``q`` is computed in Python instead (``statistics.NormalDist``,
double precision) and enters the graph as a constant of the activations' dtype, as eager casts it: in float32,
for 0.95, eager's value bit for bit; for other sparsities within one unit in the last place.
"""

from __future__ import annotations

import statistics

import torch


def normal_quantile(probability: float) -> float:
    """The standard normal quantile. Under strict export Dynamo calls it once and keeps the number (it cannot
    trace the C function statistics uses)."""
    return statistics.NormalDist().inv_cdf(probability)


# What torch._dynamo.assume_constant_result sets, set here so that loading this module (when Gemma 3n's modeling
# module is imported) does not import torch._dynamo: autopatch.scope says why, tests/test_scope.py keeps the two
# in step.
normal_quantile._dynamo_marked_constant = True


def gaussian_topk(self, inputs):
    """Gemma3nTextMLP._gaussian_topk (same signature), the quantile computed in Python."""
    quantile = normal_quantile(float(self.activation_sparsity))
    std_multiplier = torch.tensor(quantile, dtype=inputs.dtype, device=inputs.device)
    inputs_mean = torch.mean(inputs, dim=-1, keepdim=True)
    inputs_std = torch.std(inputs, dim=-1, keepdim=True, unbiased=False)
    cutoff_x = inputs_mean + inputs_std * std_multiplier
    return torch.nn.functional.relu(inputs - cutoff_x)
