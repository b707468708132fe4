"""Mamba's selective scan under torch.export with a dynamic sequence length.

The torch-only path runs the recurrence ``h_t = dA_t * h_{t-1} + dBu_t, y_t = h_t @ C_t`` as a Python
``for i in range(seq_len)`` loop: export unrolls it and specializes the sequence length to the traced value
("You marked ... as dynamic but your code specialized it to be a constant"). The replacements below run the
same recurrence through ``torch._higher_order_ops.scan`` over the time axis (carry: the state ``[B, D, N]``),
so batch and sequence stay symbolic. They are route replacements: used only inside an export.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...kit import runtime
ssm_scan = runtime.linear_recurrence
from ...kit import calls_original


def mamba_selective_scan(
    hidden_states,
    dt,
    A,
    B,
    C,
    D=None,
    z=None,
    delta_bias=None,
    delta_softplus=False,
    return_last_state=False,
    use_mambapy=False,
    use_associative_scan=False,
    **kwargs,
):
    """transformers 5: ``modeling_mamba.mamba_selective_scan`` (and falcon_mamba's copy), the sequential branch
    as a scan. The mambapy and associative-scan branches are not taken under export either."""
    batch_size, intermediate_size, seq_len = hidden_states.shape
    if return_last_state:
        _refuse_one_token_with_a_cache(seq_len)
    input_dtype = hidden_states.dtype
    if delta_bias is not None:
        dt = dt + delta_bias.to(dt.dtype)[..., None]
    if delta_softplus:
        dt = F.softplus(dt)
    B = B.transpose(1, 2)
    C = C.transpose(1, 2)
    discrete_A = torch.exp(A[None, :, None, :] * dt[:, :, :, None])
    deltaB_u = (dt[:, :, :, None] * B[:, None, :, :].float()) * hidden_states[:, :, :, None].float()
    initial = torch.zeros(batch_size, intermediate_size, A.shape[-1], dtype=input_dtype, device=hidden_states.device)
    scan_output, ssm_state = ssm_scan(discrete_A, deltaB_u, C, initial, input_dtype)
    if D is not None:
        scan_output = scan_output + hidden_states * D[None, :, None]
    if z is not None:
        scan_output = scan_output * F.silu(z)
    if return_last_state:
        return scan_output, ssm_state
    return scan_output


#: What a program traced with several new tokens and a cache says when given one.
ONE_TOKEN_REFUSED = ("this program was traced with several new tokens and a cache; a one-token step takes another "
                     "path in eager. Export the one-token step on its own.")
#: The rewrite of a mixer's one-token test that makes such a program refuse one (``runtime.is_one``).
_LENGTH_IS_ONE_CHECKED = {"seq_len == 1": f"__autopatch_rt.is_one(seq_len, {ONE_TOKEN_REFUSED!r})"}


def _refuse_one_token_with_a_cache(seq_len) -> None:
    """The mixers call this scan for a step of several tokens; with a filled cache they take their own one-token
    path instead (``seq_len == 1``). A dynamic length traced at 2 or more is assumed never to be 1 (torch's
    ranges start at 2), so without a check the program would run a one-token step down the several-token path
    and answer wrong, silently. With a cache here (``return_last_state``), the program refuses a one-token step
    at run time; export the one-token step (its length static, as runtimes feed it) for that."""
    runtime.is_one(seq_len, ONE_TOKEN_REFUSED)


@calls_original
def mamba_slow_forward(original, self, input_states, cache_params=None, cache_position=None, attention_mask=None):
    """transformers 4.x: ``MambaMixer.slow_forward`` with its loop as a scan; the cache branches are kept as
    they are. Training with mambapy (pscan, no loop) goes to the original."""
    if self.use_mambapy and self.training and cache_params is None:
        return original(self, input_states, cache_params, cache_position, attention_mask)
    batch_size, seq_len, _ = input_states.shape
    dtype = input_states.dtype
    projected_states = self.in_proj(input_states).transpose(1, 2)
    hidden_states, gate = projected_states.chunk(2, dim=1)
    if attention_mask is not None:
        hidden_states = hidden_states * attention_mask.unsqueeze(1)
    if cache_params is not None:
        ssm_state = cache_params.ssm_states[self.layer_idx].clone().to(hidden_states.device)
        if cache_position.shape[0] == self.conv_kernel_size:
            conv_state = nn.functional.pad(hidden_states, (self.conv_kernel_size - hidden_states.shape[-1], 0))
            cache_params.update_conv_state(self.layer_idx, conv_state, cache_position)
            hidden_states = self.act(self.conv1d(hidden_states)[..., :seq_len])
        else:
            conv_state = cache_params.update_conv_state(self.layer_idx, hidden_states, cache_position)
            conv_state = conv_state.to(self.conv1d.weight.device)
            hidden_states = torch.sum(conv_state * self.conv1d.weight[:, 0, :], dim=-1)
            if self.use_conv_bias:
                hidden_states += self.conv1d.bias
            hidden_states = self.act(hidden_states).to(dtype).unsqueeze(-1)
    else:
        ssm_state = torch.zeros(
            (batch_size, self.intermediate_size, self.ssm_state_size), device=hidden_states.device, dtype=dtype
        )
        hidden_states = self.act(self.conv1d(hidden_states)[..., :seq_len])
    if attention_mask is not None:
        hidden_states = hidden_states * attention_mask.unsqueeze(1)
    time_step, B, C = torch.split(
        self.x_proj(hidden_states.transpose(1, 2)),
        [self.time_step_rank, self.ssm_state_size, self.ssm_state_size],
        dim=-1,
    )
    discrete_time_step = nn.functional.softplus(self.dt_proj(time_step)).transpose(1, 2)
    A = -torch.exp(self.A_log.float())
    discrete_A = torch.exp(A[None, :, None, :] * discrete_time_step[:, :, :, None])
    deltaB_u = (discrete_time_step[:, :, :, None] * B[:, None, :, :].float()) * hidden_states[:, :, :, None].float()
    scan_output, ssm_state = ssm_scan(discrete_A, deltaB_u, C, ssm_state, dtype)
    scan_output = scan_output + (hidden_states * self.D[None, :, None])
    scan_output = scan_output * self.act(gate)
    if cache_params is not None:
        cache_params.ssm_states[self.layer_idx].copy_(ssm_state)
    return self.out_proj(scan_output.transpose(1, 2))



@calls_original
def linear_attention_mask(original, self, attention_mask, cache_position):
    """``_update_linear_attn_mask`` (4.x and 5.0-5.4 Qwen3-Next), alias ``_update_mamba_mask`` (their Bamba-style
    hybrids and Jamba), without its data-dependent ``if``.

    The original returns None ("no need to zero padded states") in a decode step (``cache_position[0] > 0``) or
    when the mask is all ones, else the mask. Its only consumer multiplies hidden states by the mask when it has
    more than one row and column, and multiplying by ones changes no bit. So under export: the mask's last
    ``seq_len`` columns, replaced by ones in a decode step, decided by ``torch.where`` on the traced position.
    In a decode step the slice has one column, so the consumer skips it exactly as it skips None.
    """
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:  # a custom 4D mask: not the layout reasoned about above
        return original(self, attention_mask, cache_position)
    mask = attention_mask[:, -cache_position.shape[0]:]
    return torch.where(cache_position[0] > 0, torch.ones_like(mask), mask)


def assume_decode_position(torch_forward):
    """A rewriter for the 4.x and 5.0-5.4 Bamba-style mixers' ``torch_forward`` (rewrite mode: it receives the
    original).

    Their decode path is chosen by ``use_precomputed_states = (cache has previous state and seq_len == 1 and the
    state shapes match the batch and ... and cache_position[0] > 0)``. Everything but the last term is structure
    export knows; the last reads a tensor (a data-dependent guard). Once the others hold, the step is a decode
    step whose position is past 0, so the term becomes ``runtime.assume``: true while tracing, and a runtime
    assertion in the program, which refuses a position 0 instead of taking the wrong branch.

    ``seq_len == 1`` becomes ``runtime.is_one``: a step traced with several new tokens and a previous state takes
    the several-token path, and torch assumes a dynamic length is never 1, yet the program would accept one and
    run it down that path where eager takes the one-token one (wrong numbers, measured on Bamba). The program
    refuses it instead."""
    from ...kit import substitute_expressions

    return substitute_expressions(torch_forward, {
        "cache_position[0] > 0":
        "__autopatch_rt.assume(cache_position[0] > 0, 'a decode step (previous state, one token) is past position 0')",
        **_LENGTH_IS_ONE_CHECKED,
    })


def one_token_path_checked(forward):
    """A rewriter for 4.x and 5.0-5.4 Qwen3-Next's gated delta net ``forward``: with a previous state it takes its
    recurrent one-token path when ``seq_len == 1``, and otherwise the chunked path from no initial state (a step
    of several tokens is misread, in eager as in the program). Traced with several new tokens, torch assumes the
    dynamic length is never 1, yet the program accepts one and runs it down the chunked path, where eager takes
    the recurrent one: a wrong answer, silently. ``runtime.is_one`` makes the program refuse it instead."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, _LENGTH_IS_ONE_CHECKED)


def _assume_decode_by_length(function, length: str):
    """``function`` with ``cache_position[0] > 0`` decided by the step's length (the local named ``length``)."""
    from ...kit import substitute_expressions

    return substitute_expressions(function, {
        "cache_position[0] > 0":
        f"(__autopatch_rt.assume(cache_position[0] > 0, 'a one-token step with a cache is past position 0') "
        f"if {length} == 1 else "
        f"not __autopatch_rt.assume(cache_position[0] == 0, 'a step of several tokens with a cache is a prefill'))",
    })


def assume_decode_by_length(torch_forward):
    """A rewriter for 4.x ``Mamba2Mixer.torch_forward``: it takes its one-token path whenever a cache is given and
    ``cache_position[0] > 0``, a data-dependent guard with no structural term beside it (Bamba's mixer has
    ``seq_len == 1``). That path reads one token only, so the step's length decides instead: one token assumes a
    position past 0, several assume position 0 (the original would misread them), each asserted by the program
    at run time rather than branched on."""
    return _assume_decode_by_length(torch_forward, "seq_len")


def short_conv_decode_by_length(slow_forward):
    """The same for 4.x ``Lfm2ShortConv.slow_forward``, whose one-token path rolls the convolution state."""
    return _assume_decode_by_length(slow_forward, "seqlen")


#: The selective scan's loop over the sequence (the same statements in every Mamba-style mixer that has one) and
#: the stack of its outputs: the recurrence as a scan instead.
_LOOP_AS_SCAN = {
    """for i in range(seq_len):
    ssm_state = discrete_A[:, :, i, :] * ssm_state + deltaB_u[:, :, i, :]
    scan_output = torch.matmul(ssm_state.to(dtype), C[:, i, :].unsqueeze(-1))
    scan_outputs.append(scan_output[:, :, 0])""":
    "scan_output, ssm_state = __autopatch_rt.linear_recurrence(discrete_A, deltaB_u, C, ssm_state, dtype)",
    "scan_output = torch.stack(scan_outputs, dim=-1)": "pass",
}


def scan_instead_of_loop(slow_forward):
    """A rewriter for 5.3-5.12 ``MambaMixer.slow_forward`` (5.3's updates a model-local cache, 5.12's a
    DynamicCache; the expressions rewritten are the same). Under tracing they take ``associative_scan`` (a
    cache-less prefill), whose program fixes the batch and refuses sequences shorter than traced; otherwise a
    Python loop over the sequence, which fixes its length. Both become the loop's recurrence as a scan
    (``runtime.linear_recurrence``); the cache updates around it stay as written."""
    from ...kit import substitute_expressions

    return substitute_expressions(slow_forward, {
        "self.use_associative_scan and associative_scan is not None and is_tracing(hidden_states) "
        "and cache_params is None": "False",
        **_LOOP_AS_SCAN,
    })


def loop_as_scan(slow_forward):
    """A rewriter for 4.x ``FalconMambaMixer.slow_forward``: no associative_scan branch there, only the loop over
    the sequence (which fixes its length), rewritten as above. The training-only pscan branch stays."""
    from ...kit import substitute_expressions

    return substitute_expressions(slow_forward, _LOOP_AS_SCAN)


#: 4.x Zamba's and Zamba2's mixers zero the padded positions only `if` the mask has a zero (a branch on the data:
#: guard Eq(u1, 1)). Multiplying by an all-ones mask changes no value (x * 1 is x, in every float), so the
#: product is taken whenever there is a mask.
_MASK_ALWAYS = {"attention_mask is not None and not torch.all(attention_mask == 1)": "attention_mask is not None"}

#: 4.x Zamba's loop over the sequence, per head: states [batch, heads, head_dim, N], its A and Bu
#: [heads, batch, head_dim, T, N], C [heads, batch, T, N]; the same recurrence over heads x batch rows.
_ZAMBA_LOOP_AS_SCAN = {
    """for i in range(seq_len):
    ssm_state = discrete_A[:, :, :, i, :].transpose(0, 1) * ssm_state + deltaB_u[:, :, :, i, :].transpose(0, 1)
    scan_output = torch.matmul(ssm_state.transpose(0, 1).to(dtype), C[:, :, i, :].unsqueeze(-1))
    scan_outputs.append(scan_output[:, :, :, 0])""":
    """scan_output, ssm_state = __autopatch_rt.linear_recurrence(discrete_A.flatten(0, 1), deltaB_u.flatten(0, 1),
    C.flatten(0, 1), ssm_state.transpose(0, 1).flatten(0, 1), dtype)
scan_output = scan_output.unflatten(0, (self.n_mamba_heads, -1))
ssm_state = ssm_state.unflatten(0, (self.n_mamba_heads, -1)).transpose(0, 1)""",
    "scan_output = torch.stack(scan_outputs, dim=-1)": "pass",
}


def zamba_mask_and_loop_as_scan(slow_forward):
    """A rewriter for 4.x ``ZambaMambaMixer.slow_forward``: the padding mask applied whenever there is one
    (``_MASK_ALWAYS``) and its per-head loop over the sequence, which fixes the prefill's length, as the scan
    of ``runtime.linear_recurrence`` over heads x batch rows (``_ZAMBA_LOOP_AS_SCAN``)."""
    from ...kit import substitute_expressions

    return substitute_expressions(slow_forward, {**_MASK_ALWAYS, **_ZAMBA_LOOP_AS_SCAN})


def mask_always(torch_forward):
    """A rewriter for 4.x ``Zamba2MambaMixer.torch_forward``: the padding mask applied whenever there is one
    (``_MASK_ALWAYS``); its chunked scan needs nothing more."""
    from ...kit import substitute_expressions

    return substitute_expressions(torch_forward, _MASK_ALWAYS)


def causal_mask_length_from_mask(update_causal_mask):
    """A rewriter for 4.x Jamba's ``_update_causal_mask``: ``target_length = cache_position[-1] + 1`` is a tensor,
    so the mask's width becomes a data-dependent size the attention cannot match with the keys. With a 2D
    attention mask (generation passes one covering the past and the new tokens) the same length is the mask's
    width: ``runtime.known_as`` uses that size and the program asserts the two agree."""
    from ...kit import substitute_expressions

    return substitute_expressions(update_causal_mask, {
        "cache_position[-1] + 1":
        "__autopatch_rt.known_as(cache_position[-1] + 1, attention_mask.shape[-1] if attention_mask is not None "
        "and attention_mask.dim() == 2 else None, 'the 2D attention mask covers every position up to the last one')",
    })


#: The gated delta rule's sequential pass over the chunks (torch_chunk_gated_delta_rule, 5.23), and its scan.
_CHUNK_LOOP = """
for i in range(num_chunks):
    v_new = new_values[:, :, i] - k_cumdecay[:, :, i] @ last_recurrent_state
    inter_chunk_attn = query[:, :, i] @ last_recurrent_state
    core_attn_out[:, :, i] = inter_chunk_attn + intra_chunk_attn[:, :, i] @ v_new
    last_recurrent_state = last_recurrent_state * chunk_decay[:, :, i] + key[:, :, i].transpose(-1, -2) @ v_new
"""


#: What the chunked linear attentions' rewriters share (torch_chunk_gated_delta_rule and chunk_kimi_delta_attention
#: pad and chunk their inputs with the same statements): the padded length as a chunk count with one all-padding
#: chunk more, the chunked views named by that count, and the output cut back to the sequence.
_PADDED_TO_CHUNK_COUNT = {
    "pad_size = (chunk_size - sequence_length % chunk_size) % chunk_size":
    # ceil(seq / chunk_size) + 1 as one quotient (torch cannot tell that 64 * q + 64 splits into q + 1 rows)
    "num_chunks = (sequence_length + 2 * chunk_size - 1) // chunk_size\n"
    "pad_size = num_chunks * chunk_size - sequence_length",
    "total_sequence_length = sequence_length + pad_size": "total_sequence_length = num_chunks * chunk_size",
    "x.reshape(x.shape[0], x.shape[1], -1, chunk_size, x.shape[-1])":
    "x.reshape(x.shape[0], x.shape[1], num_chunks, chunk_size, x.shape[-1])",
    # The chunked output back to the sequence, each token read at its (chunk, place) by index (with _TOKEN_INDEX in
    # place of the flattening reshape): flattening the chunks guards on Mod(q, 64 * q) and slicing the padding off
    # on the padded length != seq, both true but beyond torch's simplifier.
    "core_attn_out = core_attn_out[:, :, :sequence_length]":
    "core_attn_out = core_attn_out[:, :, token // chunk_size, token % chunk_size]",
}
_TOKEN_INDEX = "token = torch.arange(sequence_length, device=core_attn_out.device)"


def _forward_substitution(name: str) -> dict:
    """The loop both chunked linear attentions invert their chunk's unit lower triangular system with (on ``name``,
    strictly lower), and the same inverse in log2(chunk_size) block steps (``runtime.forward_substitution``): the
    loop is 63 traced steps, most of the export's time and of its ONNX graph."""
    loop = f"""
for i in range(1, chunk_size):
    row = {name}[..., i, :i].clone()
    sub = {name}[..., :i, :i].clone()
    {name}[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
"""
    return {loop: f"{name} = __autopatch_rt.forward_substitution({name})"}


def gated_delta_chunks_as_scan(chunk_gated_delta_rule):
    """A rewriter for ``torch_chunk_gated_delta_rule`` (the torch path of the gated delta net's prefill, 5.23):
    its pass over the chunks is ``for i in range(num_chunks)``, a Python loop over ``ceil(seq / chunk_size)``,
    which fixes the sequence length. Rewritten from the source: the same recurrence as a scan over the chunks,
    and the padded length written as ``num_chunks * chunk_size`` (upstream's ``seq + (64 - seq % 64) % 64``
    is one too, but torch cannot tell, so each ``reshape(..., -1, chunk_size, ...)`` guards on the traced
    length); the chunked shapes name ``num_chunks`` instead of ``-1``. One more all-padding chunk than upstream,
    so that torch knows there are at least two (else the contiguity checks of every chunked view guard
    ``num_chunks == 1``, i.e. seq <= 64): a padded position has zero key, value and beta and zero log-decay, so
    the chunk leaves the state as it is (``S * exp(0) + k^T @ 0``, exactly) and its outputs are cut off. The
    export branch's loop over a chunk's 63 rows (forward substitution) becomes the block inverse of
    ``runtime.forward_substitution``: the same inverse, a fraction of the graph."""
    from ...kit import substitute_expressions

    return substitute_expressions(chunk_gated_delta_rule, {
        **_PADDED_TO_CHUNK_COUNT,
        **_forward_substitution("ut_system"),
        "num_chunks = total_sequence_length // chunk_size": "pass",
        "decay.reshape(decay.shape[0], decay.shape[1], -1, chunk_size)":
        "decay.reshape(decay.shape[0], decay.shape[1], num_chunks, chunk_size)",
        "core_attn_out = core_attn_out.reshape(padded_output_shape)": _TOKEN_INDEX,
        _CHUNK_LOOP: "core_attn_out, last_recurrent_state = __autopatch_rt.gated_delta_chunks(new_values, "
        "k_cumdecay, query, key, intra_chunk_attn, chunk_decay, last_recurrent_state)",
    })


#: Kimi delta attention's sequential pass over the chunks (chunk_kimi_delta_attention, 5.23), and its scan.
_KDA_CHUNK_LOOP = """
for i in range(total_sequence_length // chunk_size):
    q_i = query[:, :, i]
    k_i = key[:, :, i]
    v_i = value[:, :, i]
    g_i = g[:, :, i]
    attn_inter = (q_i * g_i.exp()) @ last_recurrent_state
    attn_intra = (q_i.unsqueeze(-2) * k_i.unsqueeze(-3) * decay_mask[:, :, i]).sum(dim=-1).masked_fill(mask, 0)
    v_prime = k_cumdecay[:, :, i] @ last_recurrent_state
    v_new = v_i - v_prime
    core_attn_out[:, :, i] = attn_inter + attn_intra @ v_new
    last_recurrent_state = (
        last_recurrent_state * g_i[:, :, -1].exp().unsqueeze(-1)
        + (k_i * (g_i[:, :, -1:] - g_i).exp()).transpose(-1, -2) @ v_new
    )
"""


def kda_chunks_as_scan(chunk_kimi_delta_attention):
    """A rewriter for ``chunk_kimi_delta_attention`` (the torch path of Kimi delta attention's prefill, 5.23: a gated
    delta net whose decay is per channel): ``for i in range(total_sequence_length // chunk_size)`` fixes the
    sequence length, as in ``gated_delta_chunks_as_scan`` above, and is rewritten the same way: the recurrence as
    a scan over the chunks, the padded length as ``num_chunks * chunk_size`` with one more all-padding chunk (zero
    key, value, beta and log-decay: ``S * exp(0) + (0 * exp(0))^T @ v``, the state exactly as it was), each
    token's output read at its (chunk, place), and the loop over a chunk's rows as a block inverse, as there."""
    from ...kit import substitute_expressions

    return substitute_expressions(chunk_kimi_delta_attention, {
        **_PADDED_TO_CHUNK_COUNT,
        **_forward_substitution("attn"),
        "beta = beta.reshape(beta.shape[0], beta.shape[1], -1, chunk_size)":
        "beta = beta.reshape(beta.shape[0], beta.shape[1], num_chunks, chunk_size)",
        _KDA_CHUNK_LOOP:
        "core_attn_out, last_recurrent_state = __autopatch_rt.kda_chunks(query, key, value, g, k_cumdecay, "
        "decay_mask, mask, last_recurrent_state)",
        "core_attn_out = core_attn_out.reshape(core_attn_out.shape[0], core_attn_out.shape[1], -1, "
        "core_attn_out.shape[-1])": _TOKEN_INDEX,
    })


#: MiniMax's lightning attention with a cache: one token at a time over the step (5.23 and 4.57 alike).
_LIGHTNING_DECODE_LOOP = """
for i in range(seq_len):
    current_query_states = query_states[:, :, i : i + 1]
    current_key_states = key_states[:, :, i : i + 1]
    current_value_states = value_states[:, :, i : i + 1]

    current_attn_weights_inter = torch.matmul(current_key_states.transpose(-1, -2), current_value_states)
    attn_weights_inter = ratio * attn_weights_inter + current_attn_weights_inter
    current_attn_output = torch.matmul(current_query_states, attn_weights_inter)

    attn_output.append(current_attn_output)
"""


def lightning_decode_as_scan(forward):
    """A rewriter for ``MiniMaxLightningAttention.forward``: with a cache it walks the step's tokens in a Python
    loop, which fixes the step's length (a decode step of several tokens, as speculative decoding or a chunked
    prompt feeds it, stops with "specialized it to be a constant"). Rewritten from the source: the same
    recurrence as a scan over the tokens (``runtime.decayed_linear_attention``). The prefill's loop over
    256-token blocks is untouched."""
    from ...kit import substitute_expressions

    return substitute_expressions(forward, {
        _LIGHTNING_DECODE_LOOP:
        "attn_output, attn_weights_inter = __autopatch_rt.decayed_linear_attention(query_states, key_states, "
        "value_states, attn_weights_inter, ratio)",
    })


#: RWKV's CPU path's loop over the tokens (transformers' rwkv_linear_attention_cpu; comments dropped).
_WKV_LOOP = """
for current_index in range(seq_length):
    current_key = key[:, current_index].float()
    current_value = value[:, current_index]
    max_for_output = torch.maximum(max_state, current_key + time_first)
    e1 = torch.exp(max_state - max_for_output)
    e2 = torch.exp(current_key + time_first - max_for_output)
    numerator = e1 * num_state + e2 * current_value
    denominator = e1 * den_state + e2
    output[:, current_index] = (numerator / denominator).to(output.dtype)
    max_for_state = torch.maximum(max_state + time_decay, current_key)
    e1 = torch.exp(max_state + time_decay - max_for_state)
    e2 = torch.exp(current_key - max_for_state)
    num_state = e1 * num_state + e2 * current_value
    den_state = e1 * den_state + e2
    max_state = max_for_state
"""


def rwkv_wkv_as_scan(rwkv_linear_attention_cpu):
    """A rewriter for RWKV's ``rwkv_linear_attention_cpu`` (the path every CPU and every one-token step takes): its
    Python loop over the tokens fixes the sequence length. Rewritten from the source: the same recurrence as a scan
    over the tokens (``runtime.wkv_recurrence``), the output and the three states as the loop leaves them."""
    from ...kit import substitute_expressions

    return substitute_expressions(rwkv_linear_attention_cpu, {
        _WKV_LOOP: "output, (num_state, den_state, max_state) = __autopatch_rt.wkv_recurrence(time_decay, time_first, "
        "key, value, (num_state, den_state, max_state), output.dtype)",
    })


#: xLSTM's mLSTM recurrent pass over the tokens (transformers' mlstm_recurrent_sequence_native; comments dropped).
_MLSTM_LOOP = """
for t in range(sequence_length):
    vecF_t, vecI_t = fgate[:, :, t, None], igate[:, :, t, None]
    vecQ_t, vecK_t, vecV_t = query[:, :, t, :], key[:, :, t, :], value[:, :, t, :]
    vecH, (matC_state, vecN_state, vecM_state) = mlstm_recurrent_step_native(
        cstate=matC_state,
        nstate=vecN_state,
        mstate=vecM_state,
        query=vecQ_t,
        key=vecK_t,
        value=vecV_t,
        igate=vecI_t,
        fgate=vecF_t,
        eps=eps,
        dtype_state=dtype_state,
        **kwargs,
    )
    vecH_list.append(vecH)
"""


def mlstm_sequence_as_scan(mlstm_recurrent_sequence_native):
    """A rewriter for xLSTM's ``mlstm_recurrent_sequence_native`` (the pass a prompt shorter than a chunk takes, and
    the tail of a longer one): its Python loop over the tokens fixes the sequence length. Rewritten from the
    source: the same steps (the model's own step function) as a scan over the tokens (``runtime.mlstm_recurrence``);
    the loop's ``torch.stack`` of the per-token outputs is the scan's stacked output."""
    from ...kit import substitute_expressions

    return substitute_expressions(mlstm_recurrent_sequence_native, {
        _MLSTM_LOOP: "matH, (matC_state, vecN_state, vecM_state) = __autopatch_rt.mlstm_recurrence("
        "mlstm_recurrent_step_native, query, key, value, igate, fgate, (matC_state, vecN_state, vecM_state), "
        "eps=eps, dtype_state=dtype_state, **kwargs)",
        "matH = torch.stack(vecH_list, dim=-2)": "pass",
    })


#: RecurrentGemma's RG-LRU loop over the tokens in linear mode (transformers' RecurrentGemmaRglru._rnn_scan).
_RGLRU_LOOP = """
for t in range(hidden_states.shape[1]):
    recurrent_states = recurrent_gate[:, t].type(acc_dtype) * recurrent_states.to(recurrent_gate.device)
    recurrent_states = recurrent_states + hidden_states[:, t].type(acc_dtype)
    contextualized_states[:, t] = recurrent_states.type(hidden_states.dtype)
"""


def rglru_as_scan(rnn_scan):
    """A rewriter for ``RecurrentGemmaRglru._rnn_scan``: its linear mode (a prompt of several tokens) walks the
    tokens in a Python loop, which fixes the prompt's length. Rewritten from the source: the same recurrence as a
    scan over the tokens (``runtime.gated_recurrence``). The one-token branch is left as it is (a program traced on
    a longer prompt refuses one token: a guard, not a wrong answer)."""
    from ...kit import substitute_expressions

    return substitute_expressions(rnn_scan, {
        _RGLRU_LOOP: "contextualized_states, recurrent_states = __autopatch_rt.gated_recurrence(recurrent_gate, "
        "hidden_states, recurrent_states.to(recurrent_gate.device), acc_dtype)",
    })
