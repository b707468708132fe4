"""The rows of this area. Inside ``torch.onnx.export(dynamo=True)``: readable output names and translations for
operators torchlib lacks.
"""

from __future__ import annotations

from ...spec import PatchSpec
from ..bounds import TORCH_ONNX

ROWS = (
    PatchSpec(
        id="torch.onnx.output_names_from_paths",
        family="torch",
        trigger="torch.onnx._internal.exporter._core",
        target="export",
        mode="install",
        replacement="autopatch.areas.onnx.output_names:install_output_names",
        requires=TORCH_ONNX,
        reason="torch.onnx.export(dynamo=True) names inputs by their paths but outputs by FX node (linear_14, "
        "cat_3): a runtime cannot tell which output is which layer's cache. Without output_names given, outputs "
        "are named by their paths too (logits, present_key_cache_0 ...); given names are kept.",
    ),
    PatchSpec(
        id="torch.onnx.sdpa_masked_rows",
        family="torch",
        trigger="torch.onnx._internal.exporter._registration",
        target="ONNXRegistry.from_torchlib",
        mode="install",
        replacement="autopatch.areas.onnx.translations:install_sdpa_masked_rows",
        requires=TORCH_ONNX,
        reason="scaled_dot_product_attention answers zeros for a query row whose boolean mask hides every key; "
        "torch.onnx's translation answers the mean of the values, so the ONNX model of every left-padded batch "
        "disagrees with eager at the padding positions (measured up to 0.5 in the logits). The same translation "
        "with those rows zeroed (a ReduceMax, an Equal and a Where per attention), in the registries built while "
        "the thread exports.",
    ),
    PatchSpec(
        id="torch.onnx.complex_unsqueeze",
        family="torch",
        trigger="torch.onnx._internal.exporter._registration",
        target="ONNXRegistry.from_torchlib",
        mode="install",
        replacement="autopatch.areas.onnx.translations:install_complex_unsqueeze",
        requires=TORCH_ONNX,
        reason="torch.onnx.export holds complex tensors as their real view and dispatches them only to "
        "translations written for complex inputs; torchlib has none for unsqueeze, so DeepSeek-V2 and Llama 4, "
        "whose RoPE multiplies in complex numbers, stopped at conversion. Unsqueeze on the real view, a negative "
        "dim counted past its last dimension.",
    ),
    PatchSpec(
        id="torch.onnx.searchsorted",
        family="torch",
        trigger="torch.onnx._internal.exporter._registration",
        target="ONNXRegistry.from_torchlib",
        mode="install",
        replacement="autopatch.areas.onnx.translations:install_searchsorted",
        requires=TORCH_ONNX,
        reason="torchlib has no translation for searchsorted, which the agent's packed-image rows use to find each "
        "patch's image (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V, Qwen3.5): they exported with torch.export and "
        "stopped at ONNX conversion. The insertion index as the count of entries below each value.",
    ),
    PatchSpec(
        id="torch.onnx.cummax",
        family="torch",
        trigger="torch.onnx._internal.exporter._registration",
        target="ONNXRegistry.from_torchlib",
        mode="install",
        replacement="autopatch.areas.onnx.translations:install_cummax",
        requires=TORCH_ONNX,
        reason="torchlib has no translation for cummax, with which the agent's packed-image rows carry each "
        "token's image and run start forward (Qwen2-VL's family). The running maximum and its index (the latest "
        "on ties, as torch) over a lower-triangular mask.",
    ),
    PatchSpec(
        id="torch.onnx.floordiv_rounds_down",
        family="torch",
        trigger="torch.onnx._internal.exporter._registration",
        target="ONNXRegistry.from_torchlib",
        mode="install",
        replacement="autopatch.areas.onnx.translations:install_floordiv",
        requires=TORCH_ONNX,
        reason="torchlib translates `//` between sizes as ONNX Div, which truncates toward zero where Python rounds "
        "down: -(-n // k), the ceiling idiom, came out one short, silently in a slice or a reshape (4.x Reformer's "
        "axial positions: onnxruntime refused the gather). The truncated quotient, one less where the signs differ "
        "and a remainder is left.",
    ),
    PatchSpec(
        id="torch.onnx.rsub_of_a_number",
        family="torch",
        trigger="torch.onnx._internal.exporter._decomp",
        target="create_onnx_friendly_decomposition_table",
        mode="install",
        replacement="autopatch.areas.onnx.decompositions:install_rsub_of_a_number",
        requires=TORCH_ONNX,
        reason="torch decomposes `1.0 - mask` (rsub) into sub(1.0, mask), a number where sub wants a tensor; for "
        "an integer mask torch.onnx's type-promotion pass then finds no overload of sub ('Cannot find a "
        "compatible OpOverload for aten.sub'): XLNet and Mllama, given the tokenizer's int64 masks, stopped at "
        "ONNX conversion. While the thread exports, that case (a number minus a tensor cast to another dtype) "
        "decomposes as other + (-self), self cast first: the same value bit for bit.",
    ),
    PatchSpec(
        id="torch.onnx.constant_number_outputs",
        family="torch",
        trigger="torch.onnx._internal.exporter._core",
        target="_handle_output_node",  # looked up in the module by _translate_fx_graph
        mode="route",
        replacement="autopatch.areas.onnx.constant_outputs:returned_nodes_only",
        requires=TORCH_ONNX,
        reason="A model that returns plain numbers beside its tensors (4.x Switch Transformers' router losses, "
        "the int 0 without labels) exports them as constants of the program; torch.onnx.export leaves None out "
        "of the ONNX outputs but stopped on a number (\"'int' object has no attribute 'name'\"). While the thread "
        "exports, numbers are left out the same way (a note names them); the program's output spec keeps them.",
    ),
    PatchSpec(
        id="torch.onnx.dropped_check_conditions",
        family="torch",
        trigger="torch.onnx._internal.exporter._fx_passes",
        target="remove_assertion_nodes",
        mode="install",
        replacement="autopatch.areas.onnx.dropped_checks:install_dropped_check_conditions",
        requires=TORCH_ONNX,
        reason="torch.onnx.export erases the program's run-time checks but translates the conditions they "
        "checked: torch._check_tensor_all's _is_all_true, which torchlib lacks (every 5.x vision-language model's "
        "image-token check), and bounds past int64 (Idefics2, Idefics3, SmolVLM on 5.12: 'Python int too large to "
        "convert to C long'). While the thread exports, the pure nodes that only fed a dropped check go with it.",
    ),
    PatchSpec(
        id="transformers.moe.onnx_grouped_mm",
        family="transformers",
        trigger="torch.onnx._internal.exporter._registration",
        target="ONNXRegistry.from_torchlib",
        mode="install",
        replacement="autopatch.areas.onnx.translations:install_onnx_grouped_mm",
        requires=("transformers>=5.0", "torch>=2.9"),
        reason="5.x experts (Mixtral, Qwen3-MoE, DeepSeek-V3...) call transformers' custom operator "
        "grouped_mm_fallback on CPU; torch.onnx.export(dynamo=True) has no translation for it ('No ONNX function "
        "found'). Registers one (a MatMul per expert over the rows offs gives it) in the registries built while "
        "the thread exports; a custom_translation_table still wins.",
    ),
    PatchSpec(
        id="torch.onnx.exact_identity_constants",
        family="torch",
        trigger="onnxscript.rewriter._matcher",
        target="SimplePatternMatcher._match_constant",
        mode="install",
        replacement="autopatch.areas.onnx.exact_identities:install_exact_identities",
        requires=TORCH_ONNX,
        reason="torch.onnx.export(dynamo=True) optimizes with onnxscript's no-op rules (x*1, x/1, x+0, x-0), "
        "whose constants match within a tolerance (relative 1e-5, absolute 1e-8): x * (1 - 1e-6) and x + 1e-12 "
        "are removed as no-ops. Idefics2/3 and SmolVLM scale their patch coordinates so, and their ONNX logits "
        "differed from eager by up to 0.08. While the thread exports, 0 and 1 in a pattern match only exact "
        "zeros and ones.",
    ),
    PatchSpec(
        id="transformers.gemma3n.constant_quantile",
        family="transformers",
        trigger="transformers.models.gemma3n.modeling_gemma3n",
        target="Gemma3nTextMLP._gaussian_topk",
        mode="route",
        replacement="autopatch.areas.onnx.constant_quantiles:gaussian_topk",
        requires=("transformers>=4.53",),
        fingerprints=("d1406a33fe74",),  # 4.57.6 and 5.23.0
        reason="Gemma 3n's activation sparsity computes the normal quantile of a config float with "
        "Normal(0, 1).icdf on a tensor: the program holds erfinv, which ONNX lacks ('No ONNX function found for "
        "prims.erf_inv'), and strict export stops inside torch.distributions ('function marked as skipped'). "
        "Under export the quantile is computed in Python and enters as a constant.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('torch.onnx.constant_number_outputs',),
        "`torch.onnx.export(dynamo=True)` of a model that returns plain numbers beside its tensors (4.x Switch "
        "Transformers' router losses, 0 without labels) stopped on them: they are left out of the ONNX outputs "
        "as torch leaves out `None` (a note names them); the exported program's output spec keeps them.",
    ),
    (
        ('torch.onnx.output_names_from_paths',),
        '`torch.onnx.export(dynamo=True)` names inputs by their paths but outputs by the FX node that '
        "made them (`linear_14`, `cat_3`): a runtime cannot tell which output is which layer's cache. "
        'Unless you pass `output_names`, outputs are named by their paths too, with `present` where the '
        'matching input says `past_key_values` or `cache_params`: a decode step takes '
        '`past_key_values_key_cache_0` ... and returns `logits`, `present_key_cache_0` ..., the same on '
        "4.57 and 5.x (a seq2seq step's unchanged cross-attention cache keeps its input names, where "
        'torch would append `_orig`).',
    ),
    (
        ('torch.onnx.sdpa_masked_rows',),
        "torch's `scaled_dot_product_attention` answers zeros for a query row whose boolean mask hides "
        "every key (each padding token of a left-padded batch); `torch.onnx.export`'s translation answers "
        'the mean of the values, so the ONNX model of a padded prefill disagreed with eager at the '
        "padding positions (up to 0.5 in the logits). torchlib's own translation, with those rows zeroed; "
        'float masks unchanged (torch does not zero them either). Shares one wrapper of '
        '`ONNXRegistry.from_torchlib` with the translations below.',
    ),
    (
        ('torch.onnx.complex_unsqueeze',),
        '`torch.onnx.export` holds a complex tensor as its real view (a last dimension of 2) and sends '
        'complex inputs only to translations written for them; torchlib has none for `unsqueeze`. '
        'DeepSeek-V2 and Llama 4 compute RoPE in complex numbers (`torch.polar`, `view_as_complex`) and '
        'unsqueeze the frequencies, so their conversion stopped. Unsqueeze on the real view, a negative '
        'dimension counted past its last axis. Same wrapper.',
    ),
    (
        ('torch.onnx.searchsorted',),
        'torchlib has no translation for `searchsorted`, with which the agent\'s packed-image rows find each '
        "patch's image (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V, Qwen3.5): those models exported with "
        'torch.export but stopped at ONNX conversion. Translated as the count of entries below each value '
        '(every value against every entry: exact for a sorted sequence). Same wrapper.',
    ),
    (
        ('torch.onnx.cummax',),
        'torchlib has no translation for `cummax` either, with which the same rows carry each token\'s image and '
        'run start forward. The running maximum and its index (the latest on ties, as torch) over a '
        'lower-triangular mask. Same wrapper.',
    ),
    (
        ('torch.onnx.floordiv_rounds_down',),
        'torch.export records arithmetic on sizes as Python operators, and torchlib translates `//` between '
        'them as ONNX `Div`, which truncates toward zero where Python rounds down. They differ when the signs '
        'differ and a remainder is left: the ceiling idiom `-(-n // k)` came out one short, which a slice or '
        "a reshape takes silently (4.x Reformer cuts its axial position table so: its ONNX model's gather then "
        'reached past the cut and onnxruntime refused it). The truncated quotient, one less in exactly those '
        'cases. Same wrapper.',
    ),
    (
        ('torch.onnx.rsub_of_a_number',),
        "torch decomposes `1.0 - mask` (`rsub`) into `sub(1.0, mask)`: a number where `sub`'s schema wants a "
        "tensor. For an integer mask, `torch.onnx.export`'s type-promotion pass casts it and then finds no "
        'overload of `sub` for a number first ("Cannot find a compatible OpOverload for aten.sub"): XLNet and '
        "Mllama, given the tokenizer's int64 masks, exported with torch.export and stopped at ONNX conversion. "
        'While the thread exports, that case (a number minus a tensor that must be cast) decomposes as '
        '`other + (-self)` with `self` cast to the result dtype first: the same value bit for bit; every other '
        "`rsub` keeps torch's decomposition.",
    ),
    (
        ('torch.onnx.dropped_check_conditions',),
        "ONNX has no assertion: `torch.onnx.export` erases the program's run-time checks, but still translates "
        'the conditions they checked. `torch._check_tensor_all` (transformers 5.x states its image-token checks '
        "so, as do the agent's vision rows) checks `aten._is_all_true`, which torchlib cannot translate: every "
        'vision-language model stopped at conversion. And torch.export states an unbacked size\'s range as a '
        'check whose bound is a product of other bounds: 16 patches times the "unbounded" size bound (2**63 - 2) '
        'no longer fits in an int64, and the Idefics2, Idefics3 and SmolVLM prefills stopped on transformers 5.12 '
        '("Python int too large to convert to C long"). While the thread exports, the pure nodes left without a '
        'user by the erased checks (what only fed them) are erased too: nothing an output depends on, so the '
        'same values, in a smaller model. The checks themselves are not in the ONNX model (`autopatch validate` '
        'lists them).',
    ),
    (
        ('transformers.moe.onnx_grouped_mm',),
        "5.x experts (Mixtral, Qwen3-MoE, DeepSeek-V3...) run through transformers' custom operator "
        '`grouped_mm_fallback` on CPU; `torch.onnx.export(dynamo=True)` has no translation for it and '
        'stops with "No ONNX function found". The row registers one (a MatMul per expert over the rows '
        '`offs` gives it, zeros past the last) in every ONNX registry built while the thread exports; a '
        "`custom_translation_table` (transformers' `OnnxExporter` gives one) still wins.",
    ),
    (
        ('torch.onnx.exact_identity_constants',),
        "`torch.onnx.export(dynamo=True)` optimizes the ONNX model with onnxscript's rewriter, whose no-op "
        'rules (`x * 1`, `x / 1`, `x + 0`, `x - 0`) match a constant within a tolerance (relative 1e-5, '
        'absolute 1e-8), so `x * (1 - 1e-6)` and `x + 1e-12` were removed: silently wrong numbers. '
        "Idefics2/3 and SmolVLM scale their patch coordinates by `1 - 1e-6` before `bucketize`; their ONNX "
        'logits differed from eager by up to 0.08 (4.57), and an epsilon before a division turns a zero norm '
        'into NaN. While the thread exports, a pattern constant 0 or 1 matches only an exact 0 or 1; every '
        'other constant keeps its tolerance.',
    ),
    (
        ('transformers.gemma3n.constant_quantile',),
        "Gemma 3n's activation sparsity keeps activations above `mean + std * q`, `q` the normal quantile of "
        'a config float, computed with `Normal(0, 1).icdf` on a tensor: the program holds `erfinv`, for which '
        'ONNX has no operator, so `torch.onnx.export` stopped, and `strict=True` stopped inside '
        '`torch.distributions`. Under export `q` is computed in Python and enters the graph as a constant of '
        "the activations' dtype (eager's float32 value for Gemma 3n's 0.95).",
    ),
)
