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


def _dense_top_k(top_k_index, top_k_weights, num_experts: int):
    """``[tokens, experts]`` weights from a router's top-k choice: the weight where a token picked the expert,
    zero elsewhere. One spare column takes an index equal to ``num_experts`` (5.x routers use it as "no expert");
    it is dropped, as the original loops never run that expert."""
    dense = torch.zeros((top_k_index.shape[0], num_experts + 1), dtype=top_k_weights.dtype,
                        device=top_k_weights.device)
    # Added, not set: a router that picked one expert twice gets both weights, as the sparse loops add both.
    return dense.scatter_add(1, top_k_index, top_k_weights)[:, :num_experts]


def _dense_routing(router_logits, top_k: int, normalize: bool, dtype):
    """``[tokens, experts]`` weights: the softmax top-k probabilities (renormalised over the k chosen when
    ``normalize``) at the chosen experts, zero elsewhere. Same arithmetic as the 4.x sparse blocks."""
    probs = F.softmax(router_logits, dim=1, dtype=torch.float)
    top_weights, top_experts = torch.topk(probs, top_k, dim=-1)
    if normalize:
        top_weights = top_weights / top_weights.sum(dim=-1, keepdim=True)
    return _dense_top_k(top_experts, top_weights.to(dtype), router_logits.shape[-1])


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
    weights = _dense_top_k(topk_indices, topk_weights, len(self.experts))
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


def _dbrx_all_experts(mlp, tokens, weights, num_experts: int):
    """DBRX keeps its experts as three stacked matrices (w1, v1, w2: ``[experts * ffn, hidden]``): every expert's
    GLU on every token, weighted by ``weights[:, expert]`` and summed in the tokens' type, as index_add_ does."""
    shape = (num_experts, -1, tokens.shape[-1])
    w1, v1, w2 = (matrix.view(shape) for matrix in (mlp.w1, mlp.v1, mlp.w2))
    total = torch.zeros_like(tokens)
    for expert in range(num_experts):
        total = total + mlp(tokens, w1[expert], v1[expert], w2[expert]) * weights[:, expert, None].to(tokens.dtype)
    return total


def dbrx_experts_forward_v4(self, x, weights, top_weights, top_experts):
    """DbrxExperts.forward (4.x): the loop over every expert skips those no token picked (``if
    token_idx.shape[0] == 0``: a data-dependent guard); every expert on every token instead."""
    batch, length, hidden = x.shape
    tokens = x.view(-1, hidden)
    dense = _dense_top_k(top_experts, top_weights, self.moe_num_experts)
    return _dbrx_all_experts(self.mlp, tokens, dense, self.moe_num_experts).reshape(batch, length, hidden)


def dbrx_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """DbrxExperts.forward (5.x): the loop runs over ``nonzero()`` of the experts hit, a data-dependent number of
    iterations; every expert on every token instead."""
    batch = hidden_states.shape[0]
    tokens = hidden_states.reshape(-1, self.hidden_size)
    dense = _dense_top_k(top_k_index, top_k_weights, self.num_experts)
    return _dbrx_all_experts(self.mlp, tokens, dense, self.num_experts).view(batch, -1, self.hidden_size)


def ernie4_5_moe_sparse_moe_forward(self, hidden_states):
    """Ernie4_5_MoeSparseMoeBlock.forward (4.x): the router exactly as the original computes it (float32, autocast
    off, moe_statics' bias choosing the experts, weights renormalised with norm_min), then every expert on every
    token instead of the nonzero() loop over the experts hit (guard Eq(u0, 0)), then the shared experts."""
    batch, length, hidden = hidden_states.shape
    tokens = hidden_states.view(-1, hidden)
    shared = self.shared_experts(tokens) if self.shared_experts is not None else None
    device_type = tokens.device.type if isinstance(tokens.device.type, str) and tokens.device.type != "mps" else "cpu"
    with torch.autocast(device_type=device_type, enabled=False):
        router_logits = self.gate(tokens.float())
        probs = F.softmax(router_logits, dim=1, dtype=torch.float)
        _, selected = torch.topk(self.moe_statics(probs), self.top_k, dim=-1)
        weights = torch.gather(probs, dim=-1, index=selected)
        weights = (weights / torch.clamp(weights.sum(dim=-1, keepdim=True), min=self.norm_min)).to(tokens.dtype)
    output = _all_experts(self.experts, tokens, _dense_top_k(selected, weights, self.num_experts))
    if shared is not None:
        output = output + shared
    return output.reshape(batch, length, hidden), router_logits


def ernie4_5_vl_modality_experts(self, hidden_states, moe_mm_token_type_ids=None):
    """Ernie4_5_VLMoeMoeBlock.forward (5.x): text tokens go to the text experts, image and video tokens (and their
    start and end tokens) to the vision experts. Upstream chooses that path with ``if moe_mm_token_type_ids.any()``
    (a guard on data) and routes by boolean-mask selections (data-dependent sizes). Instead both expert sets run on
    every token and each token keeps its own modality's output and router logits: the same values per token (the
    text-only case too, where upstream runs the text experts on every token), at the cost of running the second set
    on all tokens."""
    batch, length, hidden = hidden_states.shape
    output, router_logits = self.text_moe(hidden_states)
    output, router_logits = output.view(batch, length, hidden), router_logits.view(-1, self.num_experts)
    if moe_mm_token_type_ids is not None:
        vision, vision_logits = self.vision_moe(hidden_states)
        is_vision = moe_mm_token_type_ids.bool().reshape(batch, length, 1)
        output = torch.where(is_vision, vision.view(batch, length, hidden), output)
        router_logits = torch.where(is_vision.reshape(-1, 1), vision_logits.view(-1, self.num_experts), router_logits)
    if self.shared_experts is not None:
        output = output + self.shared_experts(hidden_states)
    return output, router_logits


def aria_sequential_experts_gemm(token_states, expert_weights, tokens_per_expert):
    """sequential_experts_gemm (Aria, 4.x): rows sorted by expert, ``tokens_per_expert`` rows each, sliced with
    tensor bounds (``token_states[start:end]``: data-dependent sizes). Every expert's matrix on every row instead,
    each row keeping the product with its own expert's, found by where it falls in the running counts."""
    bounds = torch.cumsum(tokens_per_expert, dim=0)
    rows = torch.arange(token_states.shape[0], device=token_states.device, dtype=bounds.dtype)
    expert_of_row = torch.searchsorted(bounds, rows, right=True)  # the first expert whose range ends past the row
    output = torch.zeros(token_states.shape[0], expert_weights.shape[-1], dtype=token_states.dtype,
                         device=token_states.device)
    for expert in range(expert_weights.shape[0]):
        mine = (expert_of_row == expert).unsqueeze(-1)
        output = torch.where(mine, torch.matmul(token_states, expert_weights[expert]), output)
    return output


def hunyuan_v1_moe_forward(self, hidden_states):
    """HunYuanMoEV1Moe.forward (4.x): Mixtral's routing and nonzero() loop (guard Eq(u0, 0)) beside an always-on
    shared MLP; every expert on every token instead, the shared MLP added as the original adds it."""
    batch, length, hidden = hidden_states.shape
    shared = self.shared_mlp(hidden_states)
    router_logits = self.gate(hidden_states)
    tokens = hidden_states.view(-1, hidden)
    weights = _dense_routing(router_logits, self.top_k, normalize=True, dtype=tokens.dtype)
    return _all_experts(self.experts, tokens, weights).reshape(batch, length, hidden) + shared


def phimoe_sparse_moe_forward(self, hidden_states):
    """PhimoeSparseMoeBlock.forward (4.x): its own router (``sparsemixer``, from the block's module) as it is, then
    every expert on every token instead of the loop that skips experts no token picked (``if top_x.shape[0] ==
    0``: guard Eq(u1, 0))."""
    import sys

    batch, length, hidden = hidden_states.shape
    if self.training and self.input_jitter_noise > 0:
        hidden_states *= torch.empty_like(hidden_states).uniform_(
            1.0 - self.input_jitter_noise, 1.0 + self.input_jitter_noise)
    tokens = hidden_states.view(-1, hidden)
    router_logits = self.gate(tokens)
    sparsemixer = sys.modules[type(self).__module__].sparsemixer
    weights, selected = sparsemixer(router_logits, jitter_eps=self.router_jitter_noise, training=self.training)
    output = _all_experts(self.experts, tokens, _dense_top_k(selected, weights, self.num_experts))
    return output.reshape(batch, length, hidden), router_logits


def longcat_flash_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """LongcatFlashExperts.forward (5.x): a loop over ``nonzero()`` of the experts hit, each read with ``.item()``
    (a data-dependent number of iterations). Every routed expert on every token instead, and the "zero" experts
    (identities, past ``num_routed_experts``) as the tokens themselves, each weighted densely by its top-k
    weight, as the original adds them."""
    dense = _dense_top_k(top_k_index, top_k_weights, self.total_experts)
    total = torch.zeros_like(hidden_states)
    for expert in range(self.total_experts):
        if expert >= self.num_routed_experts or self.gate_up_proj is None:
            out = self.identity_expert(hidden_states)
        else:
            gate, up = F.linear(hidden_states, self.gate_up_proj[expert]).chunk(2, dim=-1)
            out = F.linear(self.act_fn(gate) * up, self.down_proj[expert])
        total = total + (out * dense[:, expert, None]).to(hidden_states.dtype)
    return total


def xmod_lang_adapter(self, lang_ids: torch.Tensor, hidden_states: torch.Tensor):
    """XmodOutput.lang_adapter (4.x) with every language's adapter applied to every sample, each sample keeping
    its own language's output. 4.x splits the batch into runs of one language (``unique_consecutive``,
    ``split(counts.tolist())``) and indexes the adapters with ``int(lang_id.item())``: data-dependent sizes and
    a Python int per run. The same outputs in the same order; the cost is one adapter call per language."""
    if not self.ln_before_adapter:
        residual = hidden_states
    if self.adapter_layer_norm is not None:
        hidden_states = self.adapter_layer_norm(hidden_states)
    elif self.adapter_reuse_layer_norm:
        hidden_states = self.LayerNorm(hidden_states)
    if self.ln_before_adapter:
        residual = hidden_states

    count = len(self.adapter_modules)
    # int() truncates (the 4.x default ids are floats) and a list index wraps negative ones; others raise there.
    ids = lang_ids.long()
    torch._assert_async(((ids >= -count) & (ids < count)).all(), "xmod: a lang_id names no adapter")
    ids = torch.where(ids < 0, ids + count, ids).view(-1, *[1] * (hidden_states.dim() - 1))
    adapted = torch.zeros_like(hidden_states)
    for index, adapter in enumerate(self.adapter_modules.values()):
        adapted = torch.where(ids == index, adapter(hidden_states), adapted)

    hidden_states = self.dropout(adapted)
    hidden_states += residual
    return hidden_states
