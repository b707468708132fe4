"""Mixture-of-experts blocks without data-dependent control flow (transformers 4.x).

transformers 4.57 dispatches tokens to experts with a Python loop over ``nonzero()`` of the experts that were
hit: the number of iterations depends on the data, so torch.export stops with "Could not guard on
data-dependent expression Eq(u0, 0)".  The replacements below run every expert on every token and weight each
output with a dense ``[tokens, experts]`` routing matrix that is zero for the experts a token was not routed
to.  The result is the same sum as the sparse dispatch (up to float summation order); the cost is
``num_experts / top_k`` times the expert compute, which is the price of a static graph.

Only used while torch.export traces (route patches): eager code keeps the sparse loop.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _dense_routing(router_logits, top_k: int, normalize: bool, dtype):
    """``[tokens, experts]`` weights: the softmax top-k probabilities (renormalised over the k chosen when
    ``normalize``) at the chosen experts, zero elsewhere. Same arithmetic as the 4.x sparse blocks."""
    probs = F.softmax(router_logits, dim=1, dtype=torch.float)
    top_weights, top_experts = torch.topk(probs, top_k, dim=-1)
    if normalize:
        top_weights = top_weights / top_weights.sum(dim=-1, keepdim=True)
    top_weights = top_weights.to(dtype)
    dense = torch.zeros(router_logits.shape, dtype=dtype, device=router_logits.device)
    return dense.scatter(1, top_experts, top_weights)


def _all_experts(experts, tokens, weights, dtype=None):
    """Sum over every expert of ``expert(tokens) * weight``: a fixed number of calls, whatever the routing.
    ``dtype``: the accumulation type (the 4.x DeepSeek blocks sum in the routing weights' type)."""
    dtype = dtype or tokens.dtype
    total = torch.zeros(tokens.shape, dtype=dtype, device=tokens.device)
    for index, expert in enumerate(experts):
        total = total + (expert(tokens) * weights[:, index, None]).to(dtype)
    return total


def _routed_experts(self, hidden_states, normalize: bool, gate=None):
    """What the 4.x sparse blocks share: the gate (``self.gate`` unless given), dense top-k weights, every expert
    on every token. Returns ``(tokens [T, H], routed output [T, H], router_logits)``."""
    tokens = hidden_states.view(-1, hidden_states.shape[-1])
    router_logits = (gate or self.gate)(tokens)
    weights = _dense_routing(router_logits, self.top_k, normalize=normalize, dtype=tokens.dtype)
    return tokens, _all_experts(self.experts, tokens, weights), router_logits


def mixtral_sparse_moe_forward(self, hidden_states: torch.Tensor):
    """MixtralSparseMoeBlock.forward (4.x) with every expert applied to every token."""
    if self.training and self.jitter_noise > 0:
        hidden_states *= torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
    _, output, router_logits = _routed_experts(self, hidden_states, normalize=True)
    return output.reshape(hidden_states.shape), router_logits


def jamba_sparse_moe_forward(self, hidden_states: torch.Tensor):
    """JambaSparseMoeBlock.forward (4.x): Mixtral's loop with its gate named ``router`` and the top-k weights not
    renormalised; every expert on every token instead."""
    _, output, router_logits = _routed_experts(self, hidden_states, normalize=False, gate=self.router)
    return output.reshape(hidden_states.shape), router_logits


def qwen3_moe_sparse_moe_forward(self, hidden_states: torch.Tensor):
    """Qwen3MoeSparseMoeBlock.forward (4.x) with every expert applied to every token."""
    _, output, router_logits = _routed_experts(self, hidden_states, normalize=self.norm_topk_prob)
    return output.reshape(hidden_states.shape), router_logits


def qwen2_moe_sparse_moe_forward(self, hidden_states: torch.Tensor):
    """Qwen2MoeSparseMoeBlock.forward (4.x; Qwen3NextSparseMoeBlock has the same source): every expert on every
    token, then the shared expert behind its sigmoid gate, as the original adds it."""
    tokens, output, router_logits = _routed_experts(self, hidden_states, normalize=self.norm_topk_prob)
    shared = F.sigmoid(self.shared_expert_gate(tokens)) * self.shared_expert(tokens)
    return (output + shared).reshape(hidden_states.shape), router_logits


def deepseek_moe(self, hidden_states: torch.Tensor, topk_indices: torch.Tensor, topk_weights: torch.Tensor):
    """DeepseekV3MoE.moe (4.x; Dots1MoE, Glm4MoeMoE... have the same source). The original loops over every
    expert but skips those no token picked (``if token_indices.numel() > 0``: a data-dependent guard); here
    every expert runs on every token, weighted by the router's top-k weights scattered densely."""
    weights = torch.zeros(
        (hidden_states.shape[0], len(self.experts)), dtype=topk_weights.dtype, device=hidden_states.device
    ).scatter(1, topk_indices, topk_weights)
    return _all_experts(self.experts, hidden_states, weights, dtype=topk_weights.dtype).type(hidden_states.dtype)


def gpt_oss_experts_forward(self, hidden_states: torch.Tensor, router_indices=None, routing_weights=None):
    """GptOssExperts.forward (4.x): the batched all-experts computation for every device.

    ``routing_weights`` from GptOssTopKRouter is already dense (``[tokens, experts]``, zero where a token is not
    routed), so ``router_indices`` is not needed. The 4.x code takes this path on accelerators but a
    ``nonzero()`` loop on CPU and in training."""
    batch_size = hidden_states.shape[0]
    tokens = hidden_states.reshape(-1, self.hidden_size)  # [T, H]
    # [E, T, 2I]: every expert on every token.
    gate_up = torch.matmul(tokens.unsqueeze(0), self.gate_up_proj) + self.gate_up_proj_bias.unsqueeze(1)
    gate, up = gate_up[..., ::2], gate_up[..., 1::2]
    gate = gate.clamp(min=None, max=self.limit)
    up = up.clamp(min=-self.limit, max=self.limit)
    glu = gate * torch.sigmoid(gate * self.alpha)
    out = torch.matmul((up + 1) * glu, self.down_proj) + self.down_proj_bias.unsqueeze(1)  # [E, T, H]
    weighted = out * routing_weights.transpose(0, 1).unsqueeze(-1)
    next_states = weighted.sum(dim=0).to(tokens.dtype)
    return next_states.view(batch_size, -1, self.hidden_size)
