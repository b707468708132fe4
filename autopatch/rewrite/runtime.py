"""What rewritten functions call at run time (they receive this module as ``__autopatch_rt``).

Every helper behaves exactly as Python does when its inputs are Python values; only tensors take the traced
path. So a rewritten ``if`` whose condition turns out to be a bool, or a SymBool from a shape, runs the
original branch as before.
"""

from __future__ import annotations

import functools


def _torch():
    import torch  # a rewritten function only runs inside a torch model: torch is loaded by then

    return torch


def is_tensor(value) -> bool:
    return isinstance(value, _torch().Tensor)


def is_traced_tensor(value) -> bool:
    """A tensor whose value is unknown because it is being traced (a fake tensor, or dynamo is compiling).
    A real tensor has a value: the original ``if`` reads it, as it always did."""
    if not is_tensor(value):
        return False
    torch = _torch()
    return torch.compiler.is_compiling() or torch._guards.detect_fake_mode(value) is not None


def and_(*operands):
    """``a and b and ...`` with each operand a thunk. Python values short-circuit as usual; once a tensor is
    involved the remaining operands are evaluated and combined with ``logical_and`` (what ``and`` would do
    after reading the tensor's value, which export cannot do)."""
    value = operands[0]()
    for operand in operands[1:]:
        if is_tensor(value):
            value = _torch().logical_and(value, _as_tensor(operand(), value))
        elif not value:
            return value
        else:
            value = operand()
    return value


def or_(*operands):
    """``a or b or ...``: as ``and_``, with ``logical_or``."""
    value = operands[0]()
    for operand in operands[1:]:
        if is_tensor(value):
            value = _torch().logical_or(value, _as_tensor(operand(), value))
        elif value:
            return value
        else:
            value = operand()
    return value


def not_(value):
    return _torch().logical_not(value) if is_tensor(value) else not value


def all_true_at_run(valid, why: str) -> bool:
    """``torch._is_all_true(valid)`` as ``if`` reads it. A traced tensor's value cannot be read: the program checks
    it when it runs instead (``torch._check_tensor_all``: a run-time assertion, which raises there where eager
    raises here, with torch's message; ``why`` where torch can decide the check while tracing) and the traced code
    goes on as the check passing would."""
    torch = _torch()
    if not is_traced_tensor(valid):
        return bool(torch._is_all_true(valid)) if is_tensor(valid) else bool(valid)
    torch._check_tensor_all(valid, lambda: why)
    return True


def validating(distribution) -> bool:
    """A torch.distributions object's ``_validate_args``, as its ``if`` reads it. Under ``strict=True`` Dynamo
    cannot trace the checks (torch.distributions' constraint code is on its skip list: the export stopped on
    ``is_dependent``): the object is then left unvalidated, as ``validate_args=False`` leaves it, and a note says so
    (the same values for valid arguments; invalid ones are no longer refused)."""
    if not distribution._validate_args:
        return False
    compiler = _torch().compiler
    # is_dynamo_compiling: is_compiling is also true in a non-strict export, which makes the checks at run time
    if not getattr(compiler, "is_dynamo_compiling", compiler.is_compiling)():
        return True
    distribution._validate_args = False
    from ..scope import note

    note("strict export: torch.distributions' argument checks cannot be traced by Dynamo; the program does not "
         "make them (non-strict export keeps them as run-time checks)")
    return False


def assume(condition, why: str):
    """A condition the surrounding code already implies, traced as a runtime assertion instead of a branch:
    ``True`` under tracing, with the exported program checking ``condition`` on every call (it raises, naming
    ``why``, rather than computing something else); the condition's own value everywhere else."""
    if not is_traced_tensor(condition):
        return condition
    _torch()._check_tensor_all(condition, lambda: f"autopatch assumed {why}")
    return True


def known_as(value, size, why: str):
    """``value``, a one-element tensor that the surrounding code guarantees equals ``size`` (a shape, known to
    export), as that size: under tracing the program asserts the equality at run time and uses ``size``, so no
    data-dependent size is created. ``size`` None (nothing known) or no tracing: ``value`` unchanged."""
    if size is None or not is_traced_tensor(value):
        return value
    _torch()._check_tensor_all(value == size, lambda: f"autopatch assumed {why}")
    return size


def same_first_size(value, like):
    """``value``, whose first size the surrounding code needs to equal ``like``'s (a padding mask and the hidden
    states it masks; an index and the rows it reorders): under tracing the program states it (``torch._check``:
    one size where the trace had two, or an index's length read from the data), so later concatenations, views
    and attention see a single size; another at run time is refused."""
    if is_traced_tensor(value):
        _torch()._check(value.shape[0] == like.shape[0])  # no message: a message callable stops strict export
    return value


def cached_batch(cache, otherwise=-1):
    """The batch of the keys ``cache`` already holds (an encoder-decoder cache: its self-attention part), or
    ``otherwise`` without a cache or before its first keys (a prefill). Read from the cache's own size, a traced
    batch is that input dim itself, where a batch divided out of another input (``ids.reshape(-1, codebooks,
    length)``) is an expression of that input's size, which export guards on being other than 1."""
    cache = getattr(cache, "self_attention_cache", cache)
    for layer in getattr(cache, "layers", None) or ():
        keys = getattr(layer, "keys", None)
        if getattr(layer, "is_initialized", True) and is_tensor(keys) and keys.dim() == 4:
            return keys.shape[0]
    return otherwise


def flat_blocks(rows, count, device=None):
    """``rows`` rows of ``count`` blocks each, numbered flat: (each block's row, its index within the row). Flat
    because a dimension of its own for ``count`` (1 for a text within one block) makes every broadcast of it guard
    on that 1, and the program refuses longer texts; ``rows * count`` is never 1 for torch. The index is ``block -
    row * count``, not ``block % count``: torch.onnx translates a remainder by a symbolic size as a constant."""
    torch = _torch()
    block = torch.arange(rows * count, device=device)
    row = block // count
    return row, block - row * count


def is_empty(value) -> bool:
    """``len(value) == 0`` without ``len()`` on a tensor, which reads its first size as a plain int and so fixes a
    dynamic batch to the traced one; a tensor's first size compares symbolically instead."""
    return value.shape[0] == 0 if is_tensor(value) else len(value) == 0


def is_one(length, why: str) -> bool:
    """``length == 1`` where it chooses a one-element path. torch.export decides it for a dynamic length traced at 2
    or more by assuming sizes of at least 2, without a guard, yet the program accepts a 1 and would run the other
    path: a wrong answer, silently. For such a length: False, as traced, and the program refuses a 1 at run time,
    its message saying ``why``. A plain or fixed length: ``length == 1``."""
    torch = _torch()
    if isinstance(length, torch.SymInt) and length.node.maybe_as_int() is None:
        torch._assert_async(torch.scalar_tensor(length) != 1, f"autopatch: {why}")
        return False
    return length == 1


def is_size(value) -> bool:
    """A Python int or a symbolic one (a size being traced), not a bool: what a size or a count may be."""
    return isinstance(value, (int, _torch().SymInt)) and not isinstance(value, bool)


def _symbolic(values) -> bool:
    return any(isinstance(value, _torch().SymInt) for value in values) and all(is_size(v) for v in values)


def sym_min(*values):
    """``min(a, b, ...)``: for sizes being traced, ``torch.sym_min`` (a symbolic minimum, no guard on which one is
    smaller); anything else, the builtin."""
    if not _symbolic(values):
        return min(*values)
    return functools.reduce(_torch().sym_min, values)


def sym_max(*values):
    """``max(a, b, ...)``: as ``sym_min``, with ``torch.sym_max``."""
    if not _symbolic(values):
        return max(*values)
    return functools.reduce(_torch().sym_max, values)


def ceil_div(ceil, numerator, denominator):
    """``ceil(numerator / denominator)`` (``ceil`` is the code's own ``math.ceil``): for sizes being traced, the
    integer ``-(-numerator // denominator)``, equal for sizes and symbolic (``/`` would make a float symbol)."""
    if not _symbolic((numerator, denominator)):
        return ceil(numerator / denominator)
    return -(-numerator // denominator)


def take(value, index):
    """``value[index]``. For a tensor being traced and an index made of plain slices whose bounds torch knows are
    not negative (``x[:, :n]`` with ``n = min(x.shape[1], y.shape[1])``), ``narrow_copy`` per sliced dim instead:
    the same values, as a new tensor, where the view ``x[:, :n]`` makes torch guard on whether it is contiguous,
    i.e. on which size is the smaller (``Eq(s0, Min(s0, s1))``), and the program refuses the other case."""
    parts = index if isinstance(index, tuple) else (index,)
    if not (is_traced_tensor(value) and len(parts) <= value.dim()
            and all(isinstance(part, slice) and part.step in (None, 1) for part in parts)):
        return value[index]
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    torch = _torch()
    bounds = [(dim, part.start, part.stop) for dim, part in enumerate(parts)
              if part.start is not None or part.stop is not None]
    if not all(bound is None or statically_known_true(bound >= 0) for _, start, stop in bounds
               for bound in (start, stop)):
        return value[index]  # a negative bound counts from the end: left to torch's own slicing
    for dim, start, stop in bounds:
        size = value.shape[dim]
        start = 0 if start is None else torch.sym_min(start, size)
        stop = size if stop is None else torch.sym_min(stop, size)  # Python clamps slice bounds to the size
        value = value.narrow_copy(dim, start, torch.sym_max(stop - start, 0))
    return value


def _as_tensor(value, like):
    return value if is_tensor(value) else _torch().tensor(bool(value), device=like.device)


def cond(predicate, then_branch, else_branch, carried: tuple, outputs: tuple, where: str):
    """``torch.cond`` for a rewritten ``if``.

    ``carried`` are the values the branches take as arguments (the variables they assign that exist before the
    ``if``); both branches return the variables named in ``outputs``, in that order.
    """
    torch = _torch()

    def checked(values):
        for name, value in zip(outputs, values):
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"autopatch rewrite of the if at {where}: torch.cond returns tensors only, but "
                    f"{name!r} is {type(value).__name__}; this if cannot be rewritten (exclude the patch)"
                )
        return values

    return _traced_cond(predicate, then_branch, else_branch, carried, checked)


def cond_return(predicate, then_branch, else_branch, carried: tuple, where: str):
    """``torch.cond`` for a rewritten ``if`` that returns: each branch is one way the function can end (the
    ``if``'s body, or what follows it), and returns the function's value, a tensor or a tuple, list or dict of
    them, of the same structure on both paths (torch.cond says so when they differ)."""
    torch = _torch()

    def checked(value):
        leaves = torch.utils._pytree.tree_leaves(value)
        odd = next((leaf for leaf in leaves if not isinstance(leaf, torch.Tensor)), None)
        if value is None or odd is not None:
            raise TypeError(
                f"autopatch rewrite of the if at {where}: torch.cond returns tensors only, but a path of the "
                f"function returns {type(odd if value is not None else value).__name__}; this if cannot be "
                "rewritten (exclude the patch)"
            )
        return value

    return _traced_cond(predicate, then_branch, else_branch, carried, checked)


def _traced_cond(predicate, then_branch, else_branch, carried: tuple, checked):
    """torch.cond over two branches that take ``carried`` and whose results ``checked`` validates.

    torch.cond accepts only tensors as operands: Python values among ``carried`` reach the branches through a
    closure instead. An output that is one of the branch's arguments is cloned, since torch.cond refuses outputs
    aliasing its inputs (a branch that leaves a variable as it was is the common case); the rewriter wraps
    outputs that may be views in ``fresh`` (dynamo cannot ask a tensor whether it is a view).
    """
    torch = _torch()
    positions = [i for i, value in enumerate(carried) if isinstance(value, torch.Tensor)]

    def bind(branch):
        def run(*tensors):
            args = list(carried)
            for position, tensor in zip(positions, tensors):
                args[position] = tensor
            values = checked(branch(*args))
            return torch.utils._pytree.tree_map(
                lambda value: value.clone() if any(value is t for t in tensors) else value, values)

        return run

    if predicate.dtype != torch.bool:  # `if t:` accepts any one-element tensor, torch.cond a bool
        predicate = predicate != 0
    return torch.cond(predicate.reshape(()), bind(then_branch), bind(else_branch),
                      tuple(carried[i] for i in positions))


def fresh(value):
    """``value`` as it is, except inside a traced torch.cond branch, where a copy: the rewriter wraps a branch's
    results that may be views of its inputs (``x[:, 1:]``, a name, ``x.view(...)``), since torch.cond refuses
    outputs that alias an input. The cost, one copy of that result per call of the exported program, shows in
    ``autopatch diff`` as the call itself. Eager code never copies."""
    if not is_traced_tensor(value):
        return value
    return value.clone(memory_format=_torch().contiguous_format)


def linear_recurrence(discrete_A, deltaB_u, C, state, out_dtype):
    """The selective-scan recurrence ``h_t = A_t * h_{t-1} + Bu_t, y_t = h_t @ C_t`` of Mamba-style mixers as
    ``torch._higher_order_ops.scan`` over the time axis, so batch and sequence stay symbolic (a Python loop
    unrolls and fixes the length). ``discrete_A``, ``deltaB_u``: ``[B, D, T, N]``; ``C``: ``[B, T, N]``;
    ``state``: ``[B, D, N]``. Returns ``(y [B, D, T] in out_dtype, last state [B, D, N])``, the loop's
    arithmetic step for step."""
    torch = _torch()

    def step(h, xs):
        a_t, bu_t, c_t = xs  # [B, D, N], [B, D, N], [B, N]
        h = a_t * h + bu_t
        return h, torch.matmul(h.to(out_dtype), c_t.unsqueeze(-1))[..., 0]  # y_t: [B, D]

    time_first = (discrete_A.permute(2, 0, 1, 3), deltaB_u.permute(2, 0, 1, 3), C.permute(1, 0, 2))
    last, ys = _scan(step, state.to(discrete_A.dtype), time_first)  # ys: [T, B, D]
    return ys.permute(1, 2, 0), last


def _scan(step, init, xs):
    """``torch._higher_order_ops.scan(step, init, xs)``, the one call of every scan rewrite here. Under
    ``strict=True`` with grad mode on (an export outside ``torch.no_grad()``), the scan runs inside
    ``torch.no_grad()``: Dynamo then runs the scan's fake step through scan's autograd, which stacks every value the
    step saves for its backward as one more per-step output, the symbolic sizes a broadcast or reshape saves (the
    batch) included, and stops on them ("'SymInt' object has no attribute 'unsqueeze'", torch 2.9.1 and 2.13.0; the
    same scan under ``torch.no_grad()`` or non-strict exports). The values are the same; the program's recurrence
    then carries no gradient (export non-strict to train through it). Without grad mode, or non-strict: scan as is."""
    torch = _torch()
    from torch._higher_order_ops.scan import scan

    compiling = getattr(torch.compiler, "is_dynamo_compiling", None) or torch.compiler.is_compiling
    if torch.is_grad_enabled() and compiling():
        from .. import scope

        scope.note(SCAN_WITHOUT_GRAD)  # a gradient the program will not give: said, never silent
        with torch.no_grad():
            return scan(step, init, xs)
    return scan(step, init, xs)


#: What a strict export with grad mode on is told (``_scan``), in its report and once per process as a warning.
SCAN_WITHOUT_GRAD = (
    "autopatch: strict=True export with grad mode on: the agent's scan rewrites (state-space and linear-attention "
    "recurrences) run without grad in this program, so no gradient flows back through them; the values are "
    "exact. Export under torch.no_grad() to silence this, or non-strict to train through the program"
)


def _scan_along(step, init, inputs: tuple, dim: int):
    """``torch._higher_order_ops.scan`` of ``step`` over axis ``dim`` of every input (scan walks axis 0), the
    stacked outputs' step axis put back at ``dim``: the loops below walk that axis in Python, which unrolls and
    fixes its length. Returns ``(last carried value, outputs)``."""
    last, outputs = _scan(step, init, tuple(x.movedim(dim, 0) for x in inputs))
    return last, outputs.movedim(0, dim)


def forward_substitution(strict):
    """What the chunked linear attentions' loop ``for i in range(1, chunk_size): row = a[..., i, :i]; a[..., i, :i]
    = row + (row.unsqueeze(-1) * a[..., :i, :i]).sum(-2)`` leaves in ``a`` (strictly lower ``[..., n, n]``):
    ``(I - a)^-1 - I``, the unit lower triangular system's inverse without its diagonal. Traced, that loop is 63
    steps of slicing and in-place writes with symbolic batch sizes: more than half of a tiny Qwen3.5 prefill's
    export time and of its VLM's ONNX graph (12,000 of 21,500 nodes, minutes of onnxscript's optimizer). Here the
    inverse is built by doubling: the inverses of the diagonal blocks of size s give those of size 2s, the block
    below the diagonal being ``-B^-1 C A^-1`` (log2(n) steps of two batched matmuls: the recursive triangular
    inversion; against float64, as close as LAPACK's solve that eager calls, within 1.4x the loop's error, closer
    than both on chunks of correlated keys). ``n`` need not be a power of two (zeros pad it: a padded row is its
    own block)."""
    torch = _torch()
    n = strict.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()  # the power of two at or above n
    if width != n:
        strict = torch.nn.functional.pad(strict, (0, width - n, 0, width - n))
    batch = strict.shape[:-2]
    inverse = torch.ones(*batch, width, 1, 1, dtype=strict.dtype, device=strict.device)  # blocks of one: 1
    size = 1
    while size < width:
        count = width // (2 * size)
        # The diagonal blocks of size 2s: [..., count, 2s, 2s]; below their diagonal, -C of (I - strict) is strict's.
        blocks = strict.reshape(*batch, count, 2 * size, count, 2 * size).diagonal(dim1=-4, dim2=-2).movedim(-1, -3)
        upper, lower = inverse[..., 0::2, :, :], inverse[..., 1::2, :, :]
        below = lower @ blocks[..., size:, :size] @ upper
        inverse = torch.cat([torch.cat([upper, torch.zeros_like(upper)], -1), torch.cat([below, lower], -1)], -2)
        size *= 2
    inverse = inverse.reshape(*batch, width, width)[..., :n, :n]
    return inverse - torch.eye(n, dtype=inverse.dtype, device=inverse.device)


def gated_delta_chunks(new_values, k_cumdecay, query, key, intra_chunk_attn, chunk_decay, state):
    """The loop over chunks of ``torch_chunk_gated_delta_rule`` (Qwen3-Next, Qwen3.5 and kin: gated delta net
    prefill) as ``torch._higher_order_ops.scan`` over the chunk axis (dim 2 of every input), so the number of
    chunks, hence the sequence length, stays symbolic (``range(num_chunks)`` fixes it). Per chunk i, with the
    recurrent state S: ``v = new_values_i - k_cumdecay_i @ S``, output ``query_i @ S + intra_chunk_attn_i @ v``,
    ``S = S * chunk_decay_i + key_i^T @ v``: the loop's arithmetic in its order. Returns ``(outputs shaped as
    new_values, last state)``."""

    def step(s, xs):
        values_i, k_cumdecay_i, query_i, key_i, attn_i, decay_i = xs
        v_new = values_i - k_cumdecay_i @ s
        out = query_i @ s + attn_i @ v_new
        return s * decay_i + key_i.transpose(-1, -2) @ v_new, out

    last, outputs = _scan_along(step, state, (new_values, k_cumdecay, query, key, intra_chunk_attn, chunk_decay), 2)
    return outputs.contiguous(), last


def kda_chunks(query, key, value, g, k_cumdecay, decay_mask, mask, state):
    """The loop over chunks of ``chunk_kimi_delta_attention`` (Kimi-Linear, Bailing-hybrid: Kimi delta attention's
    prefill) as ``torch._higher_order_ops.scan`` over the chunk axis (dim 2 of every input but
    ``mask``), so the number of chunks, hence the sequence length, stays symbolic. Per chunk i, with the state S
    and the log-decays g_i cumulated over the chunk per channel: output ``(q_i * exp(g_i)) @ S`` plus the chunk's
    masked intra-attention times ``v = v_i - k_cumdecay_i @ S``, then ``S = S * exp(g_i[last]) + (k_i * exp(g_i[last]
    - g_i))^T @ v``: the loop's arithmetic in its order. Returns ``(outputs shaped as value, last state)``."""

    def step(s, xs):
        q_i, k_i, v_i, g_i, k_cumdecay_i, decay_i = xs
        attn_inter = (q_i * g_i.exp()) @ s
        attn_intra = (q_i.unsqueeze(-2) * k_i.unsqueeze(-3) * decay_i).sum(dim=-1).masked_fill(mask, 0)
        v_new = v_i - k_cumdecay_i @ s
        out = attn_inter + attn_intra @ v_new
        s = s * g_i[:, :, -1].exp().unsqueeze(-1) + (k_i * (g_i[:, :, -1:] - g_i).exp()).transpose(-1, -2) @ v_new
        return s, out

    last, outputs = _scan_along(step, state, (query, key, value, g, k_cumdecay, decay_mask), 2)
    return outputs.contiguous(), last


def decayed_linear_attention(query, key, value, state, ratio):
    """The one-token-at-a-time pass of MiniMax's lightning attention with a cache, ``for i in range(seq_len)``
    (which fixes the step's length), as ``torch._higher_order_ops.scan`` over the tokens: per token, ``S = ratio
    * S + k_i^T v_i`` and output ``q_i @ S``, the loop's arithmetic in its order. ``query``, ``key``, ``value``:
    ``[B, H, T, D]``; ``state``: ``[B, H, D, D]``; ``ratio``: ``[H, 1, 1]``. Returns ``([outputs [B, H, T, D]],
    last state)``: the outputs in a one-element list, as the loop leaves them for its ``torch.cat``."""
    torch = _torch()

    def step(s, xs):
        q_i, k_i, v_i = (x.unsqueeze(2) for x in xs)  # [B, H, 1, D]
        s = ratio * s + torch.matmul(k_i.transpose(-1, -2), v_i)
        return s, torch.matmul(q_i, s)[:, :, 0]

    last, outputs = _scan_along(step, state, (query, key, value), 2)
    return [outputs], last


def wkv_recurrence(time_decay, time_first, key, value, state: tuple, out_dtype):
    """RWKV's (v4) time-mixing loop on the CPU, ``for current_index in range(seq_length)`` (which fixes the
    sequence length), as ``torch._higher_order_ops.scan`` over the tokens: the loop's max-stabilised numerator and
    denominator updates, in its order. ``key``, ``value``: ``[B, T, C]``; ``state``: ``(num, den, max)``, each
    ``[B, C]`` float32; ``time_decay`` already ``-exp(w)``. Returns ``(output [B, T, C] in out_dtype, (num, den,
    max))``."""
    torch = _torch()

    def step(carry, xs):
        num_state, den_state, max_state = carry
        current_key, current_value = xs[0].float(), xs[1]
        max_for_output = torch.maximum(max_state, current_key + time_first)
        e1 = torch.exp(max_state - max_for_output)
        e2 = torch.exp(current_key + time_first - max_for_output)
        out = ((e1 * num_state + e2 * current_value) / (e1 * den_state + e2)).to(out_dtype)
        max_for_state = torch.maximum(max_state + time_decay, current_key)
        e1 = torch.exp(max_state + time_decay - max_for_state)
        e2 = torch.exp(current_key - max_for_state)
        return (e1 * num_state + e2 * current_value, e1 * den_state + e2, max_for_state), out

    for carried in (*state, value):
        # One batch: the loop's arithmetic would broadcast a carried state of another batch (and torch keeps each
        # input's batch a symbol of its own), but scan's carry must keep its init's shape: said, and checked.
        torch._check(carried.size(0) == key.size(0))
    init = tuple(carried.contiguous() for carried in state)  # a cached state is a strided slice of the cache
    last, outputs = _scan_along(step, init, (key, value), 1)
    return outputs, last


def mlstm_recurrence(step, query, key, value, igate, fgate, states: tuple, **options):
    """xLSTM's mLSTM recurrent pass, ``for t in range(sequence_length)`` (which fixes the sequence length), as
    ``torch._higher_order_ops.scan`` over the tokens: each token through the model's own ``step`` function
    (``mlstm_recurrent_step_native``), with the loop's slices and ``options`` (eps, state dtype). ``query``,
    ``key``, ``value``: ``[B, H, T, D]``; gates ``[B, H, T]``; ``states``: ``(C, n, m)``. Returns ``(H [B, H, T,
    Dv], (C, n, m))``, what the loop's ``torch.stack`` and last states are."""

    def one_token(carried, xs):
        q_t, k_t, v_t, i_t, f_t = xs
        h_t, carried = step(cstate=carried[0], nstate=carried[1], mstate=carried[2], query=q_t, key=k_t,
                            value=v_t, igate=i_t[..., None], fgate=f_t[..., None], **options)
        return tuple(carried), h_t

    init = tuple(state.contiguous() for state in states)
    last, outputs = _scan_along(one_token, init, (query, key, value, igate, fgate), 2)
    return outputs, last


def gated_recurrence(gate, inputs, state, acc_dtype):
    """RecurrentGemma's RG-LRU linear mode, ``for t in range(hidden_states.shape[1])`` (which fixes the sequence
    length), as ``torch._higher_order_ops.scan`` over the tokens: ``h = gate_t * h + x_t`` in ``acc_dtype``, each
    output cast back to the inputs' dtype, the loop's arithmetic in its order. ``gate``, ``inputs``: ``[B, T, W]``;
    ``state``: ``[B, W]``. Returns ``(outputs [B, T, W], last state)``."""

    def step(h, xs):
        gate_t, x_t = xs
        h = gate_t.type(acc_dtype) * h
        h = h + x_t.type(acc_dtype)
        return h.clone(), h.type(inputs.dtype)

    last, outputs = _scan_along(step, state.contiguous(), (gate, inputs), 1)
    return outputs, last


def block_diagonal_mask(cu_seqlens, like):
    """The additive attention mask ``[1, 1, n, n]`` (dtype of ``like``, ``n`` its second-to-last size) that lets
    position i attend to j only when both fall in the same segment of ``cu_seqlens`` (cumulative segment ends,
    starting at 0): attending once with it equals attending segment by segment, without a Python list of
    segments whose length is data."""
    torch = _torch()
    position = torch.arange(like.shape[-2], device=like.device)
    segment = torch.searchsorted(cu_seqlens[1:].to(device=like.device, dtype=position.dtype), position, right=True)
    same = segment[:, None] == segment[None, :]
    blocked = torch.zeros(same.shape, dtype=like.dtype, device=like.device)
    return blocked.masked_fill(~same, torch.finfo(like.dtype).min)[None, None]


# --- LLaVA-NeXT's "anyres" images -------------------------------------------------------------------------------
# Each image is resized to one of the config's grid pinpoints (the one that keeps most of its pixels, then wastes
# least), cut into tiles of the tower's size, plus one thumbnail tile. transformers computes each image's choice
# in Python from ``image_sizes.tolist()`` and loops over the images: a program would fix both the image sizes and
# the number of images. The helpers below compute the same choice, the same tiles and the same packed features
# with tensor operations over all images at once (sizes read from ``image_sizes`` are data, not constants).


def _best_pinpoints(image_sizes, pinpoints):
    """``select_best_resolution`` for every image: ``[images, 2]`` (height, width) of the chosen pinpoint. In
    float64, the operations in the order transformers' Python does them (the same doubles), ties to the first."""
    torch = _torch()
    sizes = image_sizes.to(torch.float64)
    height, width = sizes[:, 0:1], sizes[:, 1:2]
    pins = torch.tensor(pinpoints, dtype=torch.float64, device=image_sizes.device)
    pin_height, pin_width = pins[:, 0], pins[:, 1]
    scale = torch.minimum(pin_width / width, pin_height / height)
    effective = torch.minimum(torch.floor(width * scale) * torch.floor(height * scale), width * height)
    wasted = pin_width * pin_height - effective
    best = effective == effective.max(dim=1, keepdim=True).values
    wasted = torch.where(best, wasted, torch.full_like(wasted, float("inf")))
    best &= wasted == wasted.min(dim=1, keepdim=True).values
    return pins.to(torch.int64)[best.to(torch.int8).argmax(dim=1)]  # argmax: the first of equal maxima


def anyres_tile_counts(image_sizes, pinpoints, tile: int):
    """``image_size_to_num_patches`` of every image: the tiles of its pinpoint (a partial tile counts) plus the
    thumbnail, as a tensor."""
    chosen = _best_pinpoints(image_sizes, pinpoints)
    return (-(-chosen[:, 0] // tile)) * (-(-chosen[:, 1] // tile)) + 1


def anyres_tiles(pixel_values, counts):
    """``[images, max tiles, C, H, W]`` padded tiles -> the first ``counts[i]`` tiles of each image, in order."""
    torch = _torch()
    kept = torch.arange(pixel_values.shape[1], device=pixel_values.device)[None, :] < counts[:, None]
    return pixel_values[kept]


def _round7_floor(value):
    """``int(round(value, 7))`` for positive float64 values: equal except for a value within about 1e-13 of a
    rounding tie at the 7th decimal (Python rounds the exact decimal, this the scaled double)."""
    torch = _torch()
    return torch.floor(torch.round(value * 1e7) / 1e7).to(torch.int64)


def _anyres_grid(features, image_sizes, counts, config):
    """What LLaVA-NeXT's and LLaVA-OneVision's packings share, per image: the chosen pinpoint's grid of tokens
    with the resize padding cut away (``unpad_image``): ``(rows, cols, token)``, the kept rows and columns, and
    ``token(y, x)``: the index, in ``features`` flattened to ``[tiles * tokens, dim]``, of the token at row ``y``,
    column ``x`` of each image's kept grid (``y``, ``x`` broadcast against ``[images, 1, 1]``)."""
    torch = _torch()
    side = config.vision_config.image_size // config.vision_config.patch_size  # tokens per tile side
    tile = config.vision_config.image_size
    torch._check(features.shape[1] == side * side, lambda: "anyres packing needs side*side tokens per tile "
                 "(vision_feature_select_strategy 'default' on a tower with a CLS token)")
    chosen = _best_pinpoints(image_sizes, config.image_grid_pinpoints)
    rows_of_tiles, cols_of_tiles = chosen[:, 0] // tile, chosen[:, 1] // tile
    height, width = rows_of_tiles * side, cols_of_tiles * side  # the grid of tokens, padding included
    first = torch.cumsum(counts, 0) - counts  # each image's thumbnail tile

    # unpad_image: the axis the resize padded, and how much of it to cut on each side
    original = image_sizes.to(torch.float64)
    original_height, original_width = original[:, 0], original[:, 1]
    wider = original_width / original_height > width.to(torch.float64) / height.to(torch.float64)
    new_height = _round7_floor(original_height * (width.to(torch.float64) / original_width))
    new_width = _round7_floor(original_width * (height.to(torch.float64) / original_height))
    row_pad = torch.where(wider, torch.div(height - new_height, 2, rounding_mode="floor"), 0)
    col_pad = torch.where(wider, 0, torch.div(width - new_width, 2, rounding_mode="floor"))
    per_image = (lambda t: t[:, None, None])

    def token(y, x):
        y, x = y + per_image(row_pad), x + per_image(col_pad)
        tile_of = per_image(first) + 1 + (y // side) * per_image(cols_of_tiles) + x // side
        return tile_of * side * side + (y % side) * side + x % side

    return height - 2 * row_pad, width - 2 * col_pad, token


def _anyres_canvas(config):
    """Row and column numbers ``[1, H, 1]``, ``[1, 1, W + 1]`` of a canvas as large as any pinpoint's grid of
    tokens, one more column for the newline (the last)."""
    torch = _torch()
    side = config.vision_config.image_size // config.vision_config.patch_size
    tile = config.vision_config.image_size
    max_height = max(h // tile for h, _ in config.image_grid_pinpoints) * side
    max_width = max(w // tile for _, w in config.image_grid_pinpoints) * side
    return torch.arange(max_height)[None, :, None], torch.arange(max_width + 1)[None, None, :], max_width


def _thumbnails(counts, side, device):
    """Each image's thumbnail tokens (its first tile's), ``[images, side * side]`` indices."""
    torch = _torch()
    first = torch.cumsum(counts, 0) - counts
    return first[:, None] * side * side + torch.arange(side * side, device=device)[None, :]


def _token_table(features, newline):
    """Every tile's tokens, ``[tiles * tokens, dim]``, then the ``newline`` embedding (if any) as the last row:
    what the packings index (``newline_index`` is ``tiles * tokens``)."""
    table = features.reshape(-1, features.shape[-1])
    if newline is None:
        return table
    return _torch().cat([table, newline[None].to(table.device, table.dtype)], dim=0)


def anyres_pack(features, image_sizes, counts, config, newline):
    """LLaVA-NeXT's ``pack_image_features`` over all images at once. ``features``: ``[tiles, tokens, dim]`` of
    every image's tiles in order (thumbnail first), ``counts``: tiles per image. Per image, the thumbnail's tokens,
    then the tiles' tokens laid out on the pinpoint's grid with the resize padding cut away (``unpad_image``),
    a ``newline`` after each row; all images concatenated. Returns ``([features], lengths)``: one list element,
    which the caller concatenates to the same tensor."""
    torch = _torch()
    side = config.vision_config.image_size // config.vision_config.patch_size
    rows, cols, token = _anyres_grid(features, image_sizes, counts, config)
    y, x, max_width = _anyres_canvas(config)
    y, x = y.to(features.device), x.to(features.device)
    per_image = (lambda t: t[:, None, None])
    has_newline = newline is not None
    grid_valid = (y < per_image(rows)) & ((x < per_image(cols)) | ((x == max_width) & has_newline))
    newline_index = features.shape[0] * side * side
    grid_source = torch.where(x == max_width, newline_index, token(y, torch.clamp(x, max=max_width - 1)))

    thumbnail = _thumbnails(counts, side, features.device)
    valid = torch.cat([torch.ones_like(thumbnail, dtype=torch.bool), grid_valid.flatten(1)], dim=1)
    source = torch.cat([thumbnail, grid_source.flatten(1)], dim=1)
    table = _token_table(features, newline)
    packed = table[source[valid]]
    return [packed], valid.sum(dim=1)


# --- LLaVA-OneVision's images: LLaVA-NeXT's tiles, large grids resampled -----------------------------------------
# OneVision packs as LLaVA-NeXT does, then shrinks an image's kept grid bilinearly when it holds more than about
# ``anyres_max_N`` tiles' worth of tokens (``ratio > 1.1``), to a size computed from the data; and an image of a
# multi-image sample (``batch_num_images``) is not tiled at all: its thumbnail and one newline. The helpers compute
# the resampling as F.interpolate's bilinear taps and weights (align_corners=False, no antialias) over all images.


def onevision_alone(image_sizes, batch_num_images):
    """``need_patching`` as a tensor: which images are their sample's only one (None: every image, as upstream
    assumes without ``batch_num_images``)."""
    torch = _torch()
    if batch_num_images is None:
        return None
    counts = batch_num_images.reshape(-1)
    torch._check_tensor_all(counts.sum() == image_sizes.shape[0],
                            lambda: "batch_num_images must add up to the number of images")
    return torch.repeat_interleave(counts == 1, counts, output_size=image_sizes.shape[0])


def onevision_tile_counts(image_sizes, pinpoints, tile: int, alone):
    """``image_num_patches``: the anyres tile counts, one tile (the thumbnail) for an image not tiled."""
    counts = anyres_tile_counts(image_sizes, pinpoints, tile)
    return counts if alone is None else _torch().where(alone, counts, 1)


def _linear_taps(out_index, in_size, out_size):
    """F.interpolate's bilinear source taps along one axis (align_corners=False, sizes given): for each output
    index, the two input indices and their weights, an axis of unchanged size exactly the identity (the kernel
    special-cases it). In float32 as torch's CPU kernel computes them for float32 input; its build fuses
    ``scale * (i + 0.5) - 0.5`` into one multiply-add (measured: the weights then equal the kernel's bit for bit;
    the product of two float32 values is exact in float64, so one rounding to float32 is that multiply-add's). A
    kernel that rounds twice differs in the last bits of a weight, never in a tap by more than that."""
    torch = _torch()
    scale = in_size.to(torch.float32) / torch.clamp(out_size, min=1).to(torch.float32)
    real = scale.to(torch.float64) * (out_index.to(torch.float64) + 0.5) - 0.5
    real = torch.clamp(real.to(torch.float32), min=0)
    first = torch.minimum(torch.floor(real).to(torch.int64), in_size - 1)
    weight1 = torch.clamp(real - first.to(torch.float32), 0, 1)
    second = first + (first < in_size - 1).to(torch.int64)
    same = out_size == in_size
    first, second = torch.where(same, out_index, first), torch.where(same, out_index, second)
    weight1 = torch.where(same, 0.0, weight1)
    return first, second, 1 - weight1, weight1


def onevision_pack(features, image_sizes, counts, config, newline, vision_aspect_ratio):
    """LLaVA-OneVision's ``pack_image_features`` over all images at once (see ``anyres_pack``): the kept grid of
    an image whose ``ratio = sqrt(rows * cols / (N * side**2))`` exceeds 1.1 (``N`` from ``anyres_max_N``)
    resampled bilinearly to ``(rows // ratio, cols // ratio)``, in float64 as Python computes them; an image of
    one tile keeps its thumbnail and one newline. Returns ``([features], lengths)``."""
    torch = _torch()
    device = features.device
    side = config.vision_config.image_size // config.vision_config.patch_size
    rows, cols, token = _anyres_grid(features, image_sizes, counts, config)
    max_tiles = int(vision_aspect_ratio.strip("anyres_max_"))  # upstream's parse ("anyres_max_9" -> 9)
    ratio = torch.sqrt((rows * cols).to(torch.float64) / (max_tiles * side ** 2))
    shrink = ratio > 1.1

    def shrunk(size):
        return torch.where(shrink, torch.div(size.to(torch.float64), ratio, rounding_mode="floor").to(torch.int64),
                           size)

    out_rows, out_cols = shrunk(rows), shrunk(cols)
    tiled = counts > 1
    y, x, max_width = _anyres_canvas(config)
    y, x = y.to(device), x.to(device)
    per_image = (lambda t: t[:, None, None])
    has_newline = newline is not None
    in_grid = per_image(tiled) & (y < per_image(out_rows)) & (x < per_image(out_cols))
    at_newline = per_image(tiled) & (y < per_image(out_rows)) & (x == max_width) & has_newline
    y0, y1, wy0, wy1 = _linear_taps(y, per_image(rows), per_image(out_rows))
    x_in = torch.clamp(x, max=max_width - 1)
    x0, x1, wx0, wx1 = _linear_taps(x_in, per_image(cols), per_image(out_cols))
    newline_index = features.shape[0] * side * side
    shape = in_grid.shape

    def corner(yy, xx):
        return torch.where(at_newline, newline_index, token(yy, xx)).expand(shape)

    # the four taps of every canvas cell, [images, H, W + 1, 4], and their weights (a newline: all on one); cells
    # outside an image's grid are dropped before anything is read
    taps = torch.stack([corner(y0, x0), corner(y0, x1), corner(y1, x0), corner(y1, x1)], dim=-1)
    one, zero = torch.ones((), device=device), torch.zeros((), device=device)
    wy0, wy1 = torch.where(at_newline, one, wy0), torch.where(at_newline, zero, wy1)
    wx0, wx1 = torch.where(at_newline, one, wx0), torch.where(at_newline, zero, wx1)
    weights = torch.stack([w.expand(shape).to(torch.float32) for w in (wy0, wy1, wx0, wx1)], dim=-1)

    thumbnail = _thumbnails(counts, side, device)
    lone_newline = (~tiled & has_newline)[:, None]  # an image of one tile: its thumbnail, then one newline
    head = torch.cat([thumbnail, torch.full_like(thumbnail[:, :1], newline_index)], dim=1)
    head_valid = torch.cat([torch.ones_like(thumbnail, dtype=torch.bool), lone_newline], dim=1)
    head_taps = head[..., None].expand(*head.shape, 4)
    head_weights = torch.tensor([1.0, 0.0, 1.0, 0.0], device=device).expand(*head.shape, 4)
    valid = torch.cat([head_valid, (in_grid | at_newline).flatten(1)], dim=1)
    taps = torch.cat([head_taps, taps.flatten(1, 2)], dim=1)[valid]
    weights = torch.cat([head_weights, weights.flatten(1, 2)], dim=1)[valid]

    table = _token_table(features, newline)
    value = table[taps].to(torch.float32)  # [tokens, 4, dim], in float32 as the kernel computes
    w = weights[..., None]
    # The kernel's order of operations depends on its vectorized path (the CPU it dispatches to, the sizes):
    # resampled tokens agree with it to float32 rounding, not bit for bit. A token not resampled (every image
    # at most anyres_max_N tiles' worth, thumbnails, newlines) has weights 1 and 0: exactly its feature.
    packed = (w[:, 0] * (w[:, 2] * value[:, 0] + w[:, 3] * value[:, 1])
              + w[:, 1] * (w[:, 2] * value[:, 2] + w[:, 3] * value[:, 3]))
    return [packed.to(features.dtype)], valid.sum(dim=1)


# --- Pixtral's images of any size (Mistral 3, LightOnOCR, Mistral Large 4) ---------------------------------------
# Pixtral's tower takes a batch of images padded to the largest and ``image_sizes``; it cuts each image's patches
# out in a Python loop and builds a block mask from the per-image lengths, and Mistral 3's patch merger splits and
# reshapes image by image: a program would fix the images' sizes and count. The helpers keep the padded batch and
# a mask of each image's own patches, and select with it: the same patches, positions and blocks, in the same order.


def pixtral_patches(patch_embeds, image_sizes, patch_size):
    """``(patch_embeds, kept)``: the convolved batch ``[images, dim, rows, cols]`` and which of its patches belong
    to each image (the top-left ``height // patch_size`` by ``width // patch_size``, what the loop slices)."""
    torch = _torch()
    rows = torch.arange(patch_embeds.shape[-2], device=patch_embeds.device)[None, :, None]
    cols = torch.arange(patch_embeds.shape[-1], device=patch_embeds.device)[None, None, :]
    if not is_tensor(image_sizes):  # the tower's own default, every image its full padded size
        return patch_embeds, (rows >= 0) & (cols >= 0) & torch.ones(patch_embeds.shape[0], 1, 1, dtype=torch.bool,
                                                                     device=patch_embeds.device)
    sizes = image_sizes.to(patch_embeds.device)
    kept = (rows < (sizes[:, 0] // patch_size)[:, None, None]) & (cols < (sizes[:, 1] // patch_size)[:, None, None])
    return patch_embeds, kept


def pixtral_sequence(patches):
    """Every image's patches, row by row, one image after the other: ``[1, patches, dim]``."""
    torch = _torch()
    patch_embeds, kept = patches
    sequence = patch_embeds.permute(0, 2, 3, 1)[kept].unsqueeze(0)
    # transformers' sdpa attention tests ``patches > 1`` before it looks at the (given) mask, which a count known
    # only from data cannot answer: stated here, a run-time check that refuses one image of a single patch. No
    # message: under strict=True Dynamo keeps a message function as a graph attribute, which export then fails on.
    torch._check(sequence.shape[1] >= 2)
    return sequence


def _pixtral_grid(patches):
    torch = _torch()
    patch_embeds, kept = patches
    shape = kept.shape
    row = torch.arange(shape[1], device=kept.device)[None, :, None].expand(shape)
    col = torch.arange(shape[2], device=kept.device)[None, None, :].expand(shape)
    image = torch.arange(shape[0], device=kept.device)[:, None, None].expand(shape)
    return row[kept], col[kept], image[kept]


def pixtral_positions(patches):
    """5.x: each patch's (row, column) within its own image, ``[patches, 2]``."""
    row, col, _ = _pixtral_grid(patches)
    return _torch().stack([row, col], dim=-1)


def pixtral_positions_flat(patches, max_width):
    """4.x ``position_ids_in_meshgrid``: ``row * max_width + column`` of each patch within its own image."""
    row, col, _ = _pixtral_grid(patches)
    return row * max_width + col


def pixtral_block_mask(patches, tensor):
    """``generate_block_attention_mask``: a patch attends only to the patches of its own image,
    ``[batch, 1, patches, patches]`` (0 or the dtype's minimum)."""
    torch = _torch()
    _, _, image = _pixtral_grid(patches)
    same = image[:, None] == image[None, :]
    blocked = torch.zeros(same.shape, dtype=tensor.dtype, device=tensor.device)
    mask = blocked.masked_fill(~same.to(tensor.device), torch.finfo(tensor.dtype).min)
    return mask[None, None].expand(tensor.shape[0], 1, -1, -1)

