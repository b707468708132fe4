"""The rows of this area. Models with learned position embeddings (OPT, 4.x BioGPT) count each token's position from
the attention mask (``cumsum``, so that left padding does not shift them) and keep the new tokens' with
``position_ids[:, past:]``; Reformer picks each sample's axial positions in a loop over the batch (and pads to a chunk
length computed by numpy, which strict export cannot follow), 4.x GPTSAN-japanese adds each sample's positions in
such a loop; 4.x TAPAS restarts them in every table cell through segment reductions sized by counts kept in
tensors; 5.x CTRL assigns its cast sinusoidal table back to its buffer in forward; Funnel lists its positions to
size its relative distances, and lines up its pooled scores and tokens through views that guard on the traced length.
"""

from __future__ import annotations

from ...spec import PatchSpec

REASON = (
    "A decode step traced with several new tokens refuses one-token steps ('Guard failed: batch * (mask length - "
    "past) >= 2'): the positions of the new tokens are cut from the mask's, position_ids[:, past:], a length "
    "torch knows only as 'mask length - past', not as the number of new tokens, and its contiguity checks "
    "guard on that difference's traced value. Rewritten from the source to keep the last positions, as many as "
    "there are new tokens: the same ones, since the attention mask covers the past and the new tokens."
)

TAPAS_REASON = (
    "4.x TAPAS restarts its positions in every table cell (reset_position_index_per_cell, the default): the cells "
    "come from an IndexMap whose segment count 4.x wraps in a tensor and its segment reduction reads back "
    "(int(num_segments), .tolist()) to size the reduced tensor: the export stopped on a data-dependent value "
    "('Could not extract specialized integer from data-dependent expression u1'). The count (a config value times "
    "the batch) is kept as an int, and the reduction sizes the same scatter_reduce, flattened the same way, with "
    "it. Both rows or neither: the kept int is what the routed reduction reads."
)

ROWS = (
    PatchSpec(
        id="transformers.positions.opt",
        family="transformers",
        trigger="transformers.models.opt.modeling_opt",
        target="OPTDecoder.forward",
        mode="rewrite",
        replacement="autopatch.areas.positions.learned:opt_new_positions",
        requires=("transformers>=4.56",),
        fingerprints=("5b185ed40720", "367fbf0c8272", "ebbdaeecb8bc"),  # 4.57.6, 5.12.1, 5.23.0
        reason=REASON,
    ),
    PatchSpec(
        id="transformers.positions.biogpt",
        family="transformers",
        trigger="transformers.models.biogpt.modeling_biogpt",
        target="BioGptModel.forward",
        mode="rewrite",
        replacement="autopatch.areas.positions.learned:biogpt_new_positions",
        # 5.x BioGPT counts positions with arange (no cut): only 4.x needs this
        requires=("transformers>=4.56,<5",),
        fingerprints=("0a66c2359821",),  # 4.57.6
        reason=REASON,
    ),
    PatchSpec(
        id="transformers.positions.reformer_axial",
        family="transformers",
        trigger="transformers.models.reformer.modeling_reformer",
        target="AxialPositionEmbeddings.forward",
        mode="rewrite",
        replacement="autopatch.areas.positions.learned:reformer_axial_gather",
        requires=("transformers>=4.56",),
        fingerprints=("82f8af9a07e5", "4dcd27b136f1"),  # 4.57.6 and 5.12.1; 5.23.0
        reason="Reformer's axial position embeddings (inference) pick each sample's positions in a Python loop over "
        "the batch (`index_select` per sample, `torch.cat`): the program takes only the traced batch. Rewritten "
        "from the source: one torch.gather along the positions, the same rows.",
    ),
    PatchSpec(
        id="transformers.positions.gptsan_batch_loop",
        family="transformers",
        trigger="transformers.models.deprecated.gptsan_japanese.modeling_gptsan_japanese",
        target="GPTSanJapaneseModel.forward",
        mode="rewrite",
        replacement="autopatch.areas.positions.learned:gptsan_positions_gathered",
        requires=("transformers<5",),  # the model is gone in 5.0
        fingerprints=("945b6211abdd",),  # 4.57.6
        reason="GPTSAN-japanese adds each sample's position embeddings in a Python loop over the batch "
        "(`hidden_states[i] += gather(...)`): the export specialized the batch to the traced one ('You marked "
        "input_ids.size()[0] as dynamic but your code specialized it to be a constant (2)'). Rewritten from the "
        "source: one gather over the batch, the same rows and additions.",
    ),
    PatchSpec(
        id="transformers.positions.tapas_counts_int",
        family="transformers",
        trigger="transformers.models.tapas.modeling_tapas",
        target="IndexMap.__init__",
        mode="route",
        replacement="autopatch.areas.positions.cells:index_map_count_kept",
        requires=("transformers<5",),  # 5.0 keeps the counts as ints itself
        fingerprints=("e6f992a36951",),  # 4.57.6
        needs=("transformers.positions.tapas_segment_reduce",),
        reason=TAPAS_REASON,
    ),
    PatchSpec(
        id="transformers.positions.tapas_segment_reduce",
        family="transformers",
        trigger="transformers.models.tapas.modeling_tapas",
        target="_segment_reduce",  # looked up in the module by reduce_min, reduce_mean...
        mode="route",
        replacement="autopatch.areas.positions.cells:segment_reduce_counted",
        requires=("transformers<5",),
        fingerprints=("709685d086a6",),  # 4.57.6
        needs=("transformers.positions.tapas_counts_int",),
        reason=TAPAS_REASON,
    ),
    PatchSpec(
        id="transformers.positions.reformer_chunk_int",
        family="transformers",
        trigger="transformers.models.reformer.modeling_reformer",
        target="_get_least_common_mult_chunk_len",  # looked up in the module by ReformerModel.forward
        mode="route",
        replacement="autopatch.areas.positions.learned:reformer_chunk_length_int",
        requires=("transformers>=4.56",),
        fingerprints=("e9f304357694",),  # 4.57.6, 5.12.1, 5.23.0
        reason="strict=True: Reformer pads its input to a whole number of chunks, testing the length against the "
        "least common multiple of its chunk lengths, np.lcm's numpy integer: Dynamo follows it as an array and "
        "stops there ('Data-dependent branching'). The same value as a Python int.",
    ),
    PatchSpec(
        id="transformers.positions.ctrl_table",
        family="transformers",
        trigger="transformers.models.ctrl.modeling_ctrl",
        target="CTRLModel.forward",
        mode="rewrite",
        replacement="autopatch.areas.positions.tables:ctrl_table_local",
        # 5.12 and older keep the table in a plain attribute, which Dynamo follows
        requires=("transformers>=5.13",),
        fingerprints=("23b5a113b145",),  # 5.23.0
        reason="strict=True: CTRL's forward casts its sinusoidal position table (a buffer) and assigns it back to "
        "self.pos_encoding, which re-registers the buffer: Dynamo stops ('Unsupported python_type() call'). "
        "Rewritten from the source: the cast table kept in a local and indexed from there, the same rows.",
    ),
    PatchSpec(
        id="transformers.positions.funnel_relative",
        family="transformers",
        trigger="transformers.models.funnel.modeling_funnel",
        target="FunnelAttentionStructure.get_position_embeds",
        mode="route",
        replacement="autopatch.areas.positions.pooled:funnel_relative_position_embeds",
        requires=("transformers>=4.56",),
        fingerprints=("d360c73962a2", "9ff34fab794d"),  # 4.57.6 (positions as tensors), 5.23.0 (as lists)
        reason="Funnel's relative-shift attention lists its positions (5.x: list(range(seq_len)); 4.x: tensors "
        "whose items bound an arange) and pools them block by block to size its relative distances: the export "
        "fixes the length ('Constraints violated (input_ids.size()[1])'). The positions are arithmetic "
        "progressions at every block: the same distances from their first item, stride and count, the length "
        "kept symbolic.",
    ),
    PatchSpec(
        id="transformers.positions.funnel_shift",
        family="transformers",
        trigger="transformers.models.funnel.modeling_funnel",
        target="_relative_shift_gather",  # looked up in the module by the attention
        mode="route",
        replacement="autopatch.areas.positions.pooled:funnel_relative_shift",
        requires=("transformers>=4.56",),
        fingerprints=("364b4c81dce3",),  # 4.57.6, 5.23.0
        reason="Funnel lines the relative-shift scores up with their keys by two reshapes of the last two sizes: "
        "torch's symbolic reshape guards on whether the distances divide by the pooled queries, true at some "
        "traced lengths only, and the program refuses the next length ('Guard failed: ... % ... == 0'). The same "
        "elements picked by index from the flattened scores.",
    ),
    PatchSpec(
        id="transformers.positions.funnel_upsample",
        family="transformers",
        trigger="transformers.models.funnel.modeling_funnel",
        target="upsample",
        mode="route",
        replacement="autopatch.areas.positions.pooled:funnel_upsample",
        requires=("transformers>=4.56",),
        fingerprints=("dfb7cf311ec6",),  # 4.57.6, 5.23.0
        reason="Funnel's decoder slices <cls> off the pooled tokens and repeats the rest: the strided slice's "
        "contiguity check guards on the pooled length being 1 where it is 1 at the traced length, and the program "
        "refuses other lengths ('Guard failed: (-1 + seq) // 4 == 1'). The same rows gathered by index.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('transformers.positions.opt', 'transformers.positions.biogpt'),
        "OPT (and 4.x BioGPT) decode steps traced with several new tokens refused one-token steps "
        "(`batch * (mask length - past) >= 2`): the new tokens' positions were cut from the mask's as "
        "`position_ids[:, past:]`, a length torch did not know to be the token count. The last positions, "
        "as many as the new tokens, instead: the same values.",
    ),
    (
        ('transformers.positions.reformer_axial',),
        "Reformer's axial position embeddings picked each sample's positions in a Python loop over the batch, "
        "fixing it: one `torch.gather` of the same rows.",
    ),
    (
        ('transformers.positions.gptsan_batch_loop',),
        "GPTSAN-japanese added each sample's position embeddings in a Python loop over the batch, which fixed "
        "the batch: one `torch.gather` over the batch, the same rows and additions.",
    ),
    (
        ('transformers.positions.tapas_counts_int', 'transformers.positions.tapas_segment_reduce'),
        "4.x TAPAS restarts its positions in every table cell through a segment reduction whose segment count "
        "4.x keeps in a tensor and reads back to size its result: a data-dependent value the export stopped on. "
        "The count (a config value times the batch) is kept as an int; the same reduction, sized with it.",
    ),
    (
        ('transformers.positions.reformer_chunk_int',),
        "`strict=True` on Reformer with LSH and local layers: the padding test reads `np.lcm` of the chunk lengths, "
        "a numpy integer Dynamo follows as an array ('Data-dependent branching'): the same value by `math.lcm`.",
    ),
    (
        ('transformers.positions.ctrl_table',),
        "`strict=True` on 5.x CTRL: forward assigned its cast sinusoidal table back to its buffer, which Dynamo "
        "cannot follow: the cast table is kept in a local, the same rows indexed.",
    ),
    (
        ('transformers.positions.funnel_relative', 'transformers.positions.funnel_shift',
         'transformers.positions.funnel_upsample'),
        "Funnel's relative-shift attention listed its positions (`list(range(seq_len))`, 4.x: tensors that sized "
        "an `arange`) and pooled them block by block, fixing the length: the same distances from each block's "
        "first position, stride and count. Its scores were lined up, and its decoder's tokens repeated, through "
        "views that guard on sizes of the traced length (a divisibility, a pooled length of 1): the same elements "
        "gathered by index.",
    ),
)
