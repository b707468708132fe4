"""The rows of this area. torch symbolic-shape fixes (family ``torch``): broadcasting, min/max by range, **kwargs
dynamic shapes, the FakeTensor cache of 2.9-2.12, Dynamo's attribute stores after a higher-order op, and the
debugging aid ``torch.stop_if_static``.
"""

from __future__ import annotations

from ...spec import PatchSpec
from ..bounds import TORCH

#: The refs-path rows help only together, and with torch.backed_size_oblivious.
REFS_COMPANIONS = ("torch.backed_size_oblivious", "torch.broadcast_refs.*")

ROWS = (
    PatchSpec(
        id="torch.broadcast.infer_size",
        family="torch",
        trigger="torch._subclasses.fake_impls",
        target="infer_size",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:infer_size",
        requires=TORCH,
        fingerprints=("7b5dd4cdd595", "a91789a75c4d"),
        needs=("torch.broadcast.fast_binary",),
        reason="x + y with independent dynamic dims traced at equal sizes: the FakeTensor fast path decides "
        "size_a == size_b from the hints and replaces one dim by the other, so the program rejects broadcasting "
        "inputs ((1,3)+(4,3)) and named Dims fail with 'must always be equal'. Keeps both dims: Max(a, b) and a "
        "deferred 'equal or 1' check.",
    ),
    PatchSpec(
        id="torch.broadcast.fast_binary",
        family="torch",
        trigger="torch._subclasses.fake_tensor",
        target="get_fast_op_impls",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:get_fast_op_impls",
        requires=TORCH,
        # 2.9.1 and 2.13.0 differ in annotations; 2.14 adds aten.alias.default to the table; the add/sub/mul/div
        # entries this wraps are the same.
        fingerprints=("bdb846b589cd", "4e4663b18f03", "8b476f7b3971"),
        needs=("torch.broadcast.infer_size",),
        reason="With torch.broadcast.infer_size: the add/sub/mul/div.Tensor fast path then checks 'operand shape == "
        "output shape' on the hints (guard_or_false) and the program again rejects broadcasting inputs. An output "
        "no operand statically matches is built contiguous of the broadcast shape, with no guard.",
    ),
    PatchSpec(
        id="torch.broadcast_refs.broadcast_shapes",
        family="torch",
        trigger="torch._refs",
        target="_broadcast_shapes",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:broadcast_shapes",
        requires=TORCH,
        fingerprints=("7f6c86c08b3e", "fdb146ffee68"),
        needs=REFS_COMPANIONS,
        reason="Refs path of where/maximum/pow/eq/expand_as...: torch._check(common == shape) replaces one "
        "independent dim by the other. Opt-in: helps only with torch.backed_size_oblivious and the other "
        "torch.broadcast_refs.* patches.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.broadcast_shapes_meta_registrations",
        family="torch",
        trigger="torch._meta_registrations",
        target="_broadcast_shapes",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:broadcast_shapes",
        requires=TORCH,
        fingerprints=("7f6c86c08b3e", "fdb146ffee68"),
        needs=REFS_COMPANIONS,
        reason="The alias of torch._refs._broadcast_shapes bound by torch._meta_registrations.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.broadcast_shapes_conversions",
        family="torch",
        trigger="torch._refs._conversions",
        target="_broadcast_shapes",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:broadcast_shapes",
        requires=TORCH,
        fingerprints=("7f6c86c08b3e", "fdb146ffee68"),
        needs=REFS_COMPANIONS,
        reason="The alias of torch._refs._broadcast_shapes bound by torch._refs._conversions.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.maybe_broadcast",
        family="torch",
        trigger="torch._refs",
        target="_maybe_broadcast",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:maybe_broadcast",
        requires=TORCH,
        fingerprints=("b9bb818767f9", "68f8551e77ba"),
        needs=REFS_COMPANIONS,
        reason="Refs path: its should_expand asks torch._check(x == y) for each dim. Expands unless the shape is "
        "statically the common one. Opt-in, with torch.backed_size_oblivious.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.maybe_broadcast_meta_registrations",
        family="torch",
        trigger="torch._meta_registrations",
        target="_maybe_broadcast",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:maybe_broadcast",
        requires=TORCH,
        fingerprints=("b9bb818767f9", "68f8551e77ba"),
        needs=REFS_COMPANIONS,
        reason="The alias of torch._refs._maybe_broadcast bound by torch._meta_registrations.",
        default=False,
    ),
    PatchSpec(
        id="torch.broadcast_refs.broadcast_in_dim",
        family="torch",
        trigger="torch._prims",
        target="broadcast_in_dim.prim_meta_impl",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:broadcast_in_dim_meta",
        requires=TORCH,
        fingerprints=("227b3f26efb3", "3a6441582085"),
        needs=REFS_COMPANIONS,
        reason="The meta of prims.broadcast_in_dim (FakeTensor calls op.prim_meta_impl) checks a.shape[i] == "
        "shape[i], which forces the dims equal; a deferred 'broadcastable' check instead. Opt-in, with "
        "torch.backed_size_oblivious.",
        default=False,
    ),
    PatchSpec(
        id="torch.backed_size_oblivious",
        family="torch",
        trigger="torch.export._trace",
        target="_export_for_training",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:export_backed_size_oblivious",
        requires=TORCH,
        reason="Runs the export with torch.fx.experimental._config backed_size_oblivious=True: size checks stop "
        "reading the hints of backed symbols. With torch.broadcast_refs.* it keeps independent dims in "
        "torch.where/maximum/... Opt-in: it changes which guards every export records.",
        default=False,
    ),
    PatchSpec(
        id="torch.min_max_by_range",
        family="torch",
        trigger="torch.fx.experimental.symbolic_shapes",
        target="ShapeEnv._maybe_evaluate_static",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:maybe_evaluate_static",
        requires=TORCH,
        # The replacement asks the original again on a reduced expression, so it relies on what the original's
        # keywords (compute_hint, unbacked_only, var_to_range) mean: 2.9.1, 2.13.0, 2.14.1 (simplify gets the
        # ranges), 2.15.0 (singleton ints decided first).
        fingerprints=("46bbccaed0ad", "fb311d8f650f", "dcfd46f0b5dc", "00f3ff12404d"),
        reason="Grouped-query attention (repeat_kv's expand + reshape) makes torch guard Eq(Min(16*p + 16, "
        "32*p + 32), 16*p + 16): always true, but undecidable for torch, so a decode step exported with a named "
        "Dim for the past length fails ('Not all values of past ... satisfy the generated guard'). Drops the "
        "Min/Max arguments the Dims' ranges show can never win, and lets torch decide again; a Min/Max neither of whose "
        "arguments always wins is taken as a symbol over its own range (GPT-2's reshape after adding position "
        "embeddings of broadcast dims: 'Max(b1, b2) * Max(s1, s2) != Max(b1, b2)' refused every one-token step).",
    ),
    PatchSpec(
        id="torch.contiguity.static_strides",
        family="torch",
        trigger="torch._prims_common",
        target="is_contiguous",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:contiguous_by_strides",
        requires=TORCH,
        fingerprints=("56dd77480426",),  # 2.13.0 (the only release measured for this row)
        reason="Every traced value's metadata asks is_contiguous, which evaluates 'size == 1' and 'numel() < 2' on "
        "the hints: on a size that is an expression (Mamba-2's state batch after the broadcast rows, Max(b1, b2) "
        "reshaped by b1) the guard stays in the program as a bound, and its one-token decode step refused batch 1 "
        "('Guard failed: ... >= 2'). Strides that are statically the standard contiguous ones mean contiguous for "
        "every size: True with no guard; anything else asks the original.",
    ),
    PatchSpec(
        id="torch.stop_if_static",
        family="torch",
        trigger="torch.fx.experimental.symbolic_shapes",
        target="ShapeEnv._set_replacement",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:set_replacement",
        requires=TORCH,
        fingerprints=("b0b1b38551b6", "78a9265cf80f"),
        reason="Debugging aid: raises StopIfStaticError the moment a dynamic input dim is specialized to a constant "
        "or forced equal to another input dim, naming the guard and the user's file:line (torch reports it only "
        "at the end, without a location, or not at all for x + y).",
        default=False,
    ),
    PatchSpec(
        id="torch.export.range_constraints_varkw",
        family="torch",
        trigger="torch.export._trace",
        target="_get_range_constraints",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:get_range_constraints",
        # 2.14 builds the traced order with _combine_args_for_tracing, which flattens the group itself: the
        # same export passes there without this row (tests/test_torch_shapes.py shows both).
        requires=("torch>=2.9,<2.14",),
        fingerprints=("4839f12dce44",),
        reason="forward(self, input_ids, attention_mask=None, **kwargs) with dynamic shapes for the **kwargs: the "
        "'traced order' rebuild keeps the kwargs group and re-adds its keys, and export fails with 'Must provide a "
        "tree_name when there might be a mismatch'. Flattens the group in inputs and dynamic_shapes alike.",
    ),
    PatchSpec(
        id="torch.export.guards_varkw",
        family="torch",
        trigger="torch.export._unlift",
        target="_convert_guards_code_to_fn",
        mode="install",
        replacement="autopatch.areas.torch_shapes.fixes:install_varkw_guards",
        requires=TORCH,
        # The guard text it rewrites is what this function parses: 2.9.1, 2.13.0 (math in the namespace), and
        # 2.14.1/2.15.0 (a RecursionError fallback added).
        fingerprints=("ad9f32dc2fcb", "4fdda57458c7", "263d048e763b"),
        reason="Then, non-strict: ep.module() fails with \"NameError: name 'L' is not defined\": guards name "
        "L['kwargs']['past'] while the module's inputs are flat. Rewrites them to L['past']. Runs in ep.module(), "
        "after the export, so it is always on; it changes only guards that could not run.",
    ),
    # make_constraints runs inside the export only; the installer is a plain wrapper (not a router) so that a hit
    # is counted when a bound changed, not at every export. _trace binds its own name at import: both are wrapped.
    *(
        PatchSpec(
            id=f"torch.export.derived_size_ranges{suffix}",
            family="torch",
            trigger=trigger,
            target="make_constraints",
            mode="install",
            replacement="autopatch.areas.torch_shapes.fixes:install_derived_ranges",
            requires=TORCH,
            fingerprints=("8bc3c9f22012",),  # 2.13.0
            reason="An input size derived from a dynamic dim (MusicGen's ids, batch * codebooks: 4*s53) gets the "
            "dim's traced lower bound of 2 multiplied out (8), which the program checks though it lets the dim "
            "itself be 0 or 1: a step traced at batch 2 refuses batch 1 ('Guard failed: input_ids.size()[0] >= "
            "8'). The derived bound is recomputed with that assumed 2 lifted, as torch lifts it for a dim; "
            "bounds from anything else stay." + note,
        )
        for suffix, trigger, note in (
            ("", "torch._export.non_strict_utils", ""),
            ("_alias", "torch.export._trace", " The alias torch.export._trace imports."),
        )
    ),
    PatchSpec(
        id="torch.export.parameter_buffers",
        family="torch",
        trigger="torch.export._unlift",
        target="_unlift_exported_program_lifted_states",
        mode="install",
        replacement="autopatch.areas.torch_shapes.fixes:install_parameter_buffers",
        requires=TORCH,
        reason="A non-persistent buffer whose value is an nn.Parameter (5.12 FalconMambaMixer's b_c_rms, dt_rms): "
        "ep.module() fails with \"KeyError: attribute 'b_c_rms' already exists\": the constants loop setattrs it "
        "(so it becomes a parameter), then the fix-up of non-persistent buffers registers it as a buffer. Unlifts "
        "it detached (same storage) instead. Runs in ep.module(), after the export, so it is always on; it changes only "
        "programs that would raise.",
    ),
    PatchSpec(
        id="torch.dynamo.stores_after_hop",
        family="torch",
        trigger="torch._dynamo.variables.dicts",
        target="SideEffectsProxyDict.__init__",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:proxy_dict_on_current_table",
        # Measured: 2.13.0 and 2.14.1 lose the store (same source); 2.9.1 has no such view and keeps it.
        requires=("torch>=2.13",),
        fingerprints=("a8f3f331d884",),
        link="https://github.com/pytorch/pytorch/pull/195954",
        reason="strict=True: once Dynamo has traced a torch.cond, scan or map it holds a copy of its side-effect "
        "table, while the __dict__ views of objects it met before still record 'obj.attr = value' in the old one: "
        "the store is lost and the program returns the old value (a cache updated after the agent's scan or cond "
        "returns the past keys; Kimi-Linear's decode stops in SDPA). The views read the current table.",
    ),
    PatchSpec(
        id="torch.fake_tensor_cache_bypass",
        family="torch",
        trigger="torch._subclasses.fake_tensor",
        target="FakeTensorMode._cached_dispatch_impl",
        mode="route",
        replacement="autopatch.areas.torch_shapes.fixes:dispatch_without_cache",
        # Measured failing on torch 2.9.1 (with transformers 4.57.6) and passing on 2.13.0.
        requires=("torch>=2.9,<2.13",),
        fingerprints=("9dfbaaee428a",),
        reason="torch 2.9's FakeTensor dispatch cache rebuilds a cached output with set_(..., stride) whose "
        "symbolic strides (8*s72) the export tracer never saw: 'is not tracked with proxy', in every transformers "
        "4.x attention mask (padding_mask[batch_idx, kv_idx]). Dispatches without the cache while the thread "
        "exports, as torch does when the cache is off; 2.13 no longer needs it.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('torch.broadcast.infer_size',),
        '`x + y` with independent dynamic dims traced at equal sizes: torch decides "equal" from the '
        'traced sizes and merges the two dims, so the program rejects `(1, 3) + (4, 3)`. Keeps both: '
        '`Max(a, b)` plus a deferred "equal or 1" check. Where a size may be 0 (every dim under '
        "`torch.onnx.export`, which sets `backed_size_oblivious`), a second check refuses an empty dim "
        'against a 1, the one case the max gets wrong: the program refuses it, the ONNX model (no checks) '
        "does not. Data-dependent sizes (which have no traced value) keep torch's own rule.",
    ),
    (
        ('torch.broadcast.fast_binary',),
        'With the previous one: the add/sub/mul/div fast path of FakeTensor compares shapes on the traced '
        'sizes too.',
    ),
    (
        ('torch.broadcast_refs.*',),
        'Opt-in. The same fix on the refs path (`torch.where`, `maximum`, `expand_as`...): '
        "`_broadcast_shapes`, `_maybe_broadcast` and their aliases, `prims.broadcast_in_dim`'s meta. "
        'Needs `torch.backed_size_oblivious`.',
    ),
    (
        ('torch.backed_size_oblivious',),
        'Opt-in. Runs each export (only the export) with `backed_size_oblivious=True`, so size checks '
        'stop reading traced sizes.',
    ),
    (
        ('torch.min_max_by_range',),
        'Grouped-query attention decode steps exported with a named `Dim` for the past length fail with '
        '"Not all values of past ... satisfy the generated guard min(...)": torch cannot tell which side '
        "of a `Min` in `repeat_kv`'s strides wins. Decides it from the Dims' ranges, so no guard is "
        'needed. A `Max` neither side of which always wins (two broadcast dims kept apart) is taken as a '
        "symbol over its own range: GPT-2's reshape after `inputs_embeds + position_embeds` otherwise "
        'becomes a run-time check `Max(b1, b2) * Max(s1, s2) != Max(b1, b2)` that refuses every one-token '
        'step.',
    ),
    (
        ('torch.contiguity.static_strides',),
        "The tracer asks `is_contiguous` of every value, which evaluates `size == 1` and `numel() < 2` on the "
        'traced sizes: on a size that is an expression (`Max(b1, b2)` reshaped by `b1`) the guard stays as a '
        "bound, and Mamba-2's one-token decode refused batch 1. Standard contiguous strides mean contiguous for "
        'every size: answered without a guard.',
    ),
    (
        ('torch.stop_if_static',),
        'Opt-in debugging aid: raises the moment a dynamic dim becomes a constant or is forced equal to '
        'another input dim, with the guard and *your* file and line.',
    ),
    (
        ('torch.export.range_constraints_varkw',),
        'torch 2.9-2.13: `forward(self, input_ids, attention_mask=None, **kwargs)` with dynamic shapes '
        'for the `**kwargs`: export fails with "Must provide a tree_name" (2.14 fixed it).',
    ),
    (
        ('torch.export.guards_varkw',),
        "Then `ep.module()` fails with `NameError: name 'L' is not defined` (guards name "
        "`L['kwargs']['past']`). Always on: it runs after the export, and only rewrites guards that could "
        'not run.',
    ),
    (
        ('torch.export.derived_size_ranges', 'torch.export.derived_size_ranges_alias'),
        "An input size derived from a dynamic dim (MusicGen's ids, batch x codebooks) inherits the dim's traced "
        'lower bound of 2 multiplied out, and the program refused batch 1 (`Guard failed: input_ids.size()[0] '
        '>= 8`) though torch lets the dim itself be 0 or 1. That assumed 2 is lifted from derived bounds too.',
    ),
    (
        ('torch.dynamo.stores_after_hop',),
        'torch 2.13-2.14, `strict=True`: after a `torch.cond`, `scan` or `map` (transformers\' own, or the agent\'s '
        'rewrites) Dynamo drops `obj.attr = value` on objects it met before: the program silently returns the '
        'old value (a cache layer\'s past keys; Kimi-Linear\'s decode stops in SDPA). Makes those stores land '
        'in the table Dynamo reads.',
    ),
    (
        ('torch.fake_tensor_cache_bypass',),
        'torch 2.9-2.12: every transformers 4.x decoder stops in its attention mask with "8*s72 ... is '
        'not tracked with proxy": FakeTensor\'s dispatch cache rebuilds an output with symbolic strides '
        'the export never traced. Dispatches without the cache while the thread exports.',
    ),
    (
        ('torch.export.parameter_buffers',),
        "A non-persistent buffer holding an `nn.Parameter` (5.12 FalconMamba's `b_c_rms`, `dt_rms`): "
        '`ep.module()` fails with `KeyError: "attribute \'b_c_rms\' already exists"`. Unlifts it detached '
        '(same storage). Always on: it runs after the export, and changes only programs that would raise.',
    ),
)
