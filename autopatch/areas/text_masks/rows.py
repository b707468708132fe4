"""The rows of this area. Text models whose own mask code decides with Python on data or on a size: FSMT drops a
padding mask that has no pad (a data-dependent ``if``), CPM-Ant counts its mask's positions with ``range(seq)``,
LongT5 (and 4.x Switch Transformers, Pegasus-X, BigBird-Pegasus) skips its default mask while compiling and then
needs it, Qwen4-Exp's sparse-attention indexer selects each row's keys in a Python loop, BLT's patcher (whose patches
make its cross-attention masks) picks its patch starts from a view one shorter than the input, and its n-gram hashes
read tied-stride windows (its entropies' Categorical is the distributions area's), and CANINE pools its mask and
attends within chunks of characters sized by the length in Python.
"""

from __future__ import annotations

from ...spec import PatchSpec

ROWS = (
    PatchSpec(
        id="transformers.masks.fsmt_padding",
        family="transformers",
        trigger="transformers.models.fsmt.modeling_fsmt",
        target="make_padding_mask",
        mode="rewrite",
        replacement="autopatch.areas.text_masks.masks:padding_mask_always",
        requires=("transformers>=4.56",),
        fingerprints=("0520bfa27a46",),  # 4.57.6, 5.12.1, 5.23.0
        reason="make_padding_mask returns None when the ids hold no pad (`if not padding_mask.any()`): a branch on "
        "the data (guard Eq(u0, 1)) stops the export of FSMT's forward. Rewritten from the source to return the "
        "mask always: an all-False mask changes nothing where it is applied (masked_fill), so the results are "
        "eager's exactly.",
    ),
    PatchSpec(
        id="transformers.masks.cpmant_prompt_positions",
        family="transformers",
        trigger="transformers.models.cpmant.modeling_cpmant",
        target="CpmAntModel._prepare_attention_mask",
        mode="rewrite",
        replacement="autopatch.areas.text_masks.masks:cpmant_positions_by_arange",
        requires=("transformers>=4.56",),
        fingerprints=("effbbb29d97f",),  # 4.57.6, 5.12.1, 5.23.0
        reason="CPM-Ant's mask numbers the text's positions with `torch.tensor(list(range(seqlen - "
        "prompt_length))[::-1])`: range() of the sequence length makes it a Python int, so the program takes only "
        "the traced length. Rewritten from the source to the same descending positions by torch.arange.",
    ),
    PatchSpec(
        id="transformers.masks.longt5_default_mask",
        family="transformers",
        trigger="transformers.models.longt5.modeling_longt5",
        target="LongT5Stack.forward",
        mode="rewrite",
        replacement="autopatch.areas.text_masks.masks:longt5_default_mask_always",
        requires=("transformers>=4.56",),
        fingerprints=("84b94e9124bf", "8cc7a40a8eee", "0d1e5260076e"),  # 4.57.6, 5.12.1, 5.23.0
        reason="LongT5Stack.forward builds its all-ones default attention mask only when not compiling "
        "(`... and not is_torchdynamo_compiling()`), then hands the missing mask to its local attention's block "
        "split: an export called without attention_mask stops on `'NoneType' object has no attribute 'shape'`. "
        "Rewritten from the source: the default mask is built under export too, as eager builds it.",
    ),
    PatchSpec(
        id="transformers.masks.switch_transformers_default_mask",
        family="transformers",
        trigger="transformers.models.switch_transformers.modeling_switch_transformers",
        target="SwitchTransformersStack.forward",
        mode="rewrite",
        replacement="autopatch.areas.text_masks.masks:longt5_default_mask_always",
        # 5.x builds its masks with masking_utils (an encoder without a mask exports there)
        requires=("transformers>=4.56,<5",),
        fingerprints=("0e85e7e94b66",),  # 4.57.6
        reason="4.x SwitchTransformersStack.forward skips its all-ones default mask while compiling, as LongT5 "
        "did, and its encoder then indexes the missing mask: an export without attention_mask stopped on "
        "\"'NoneType' object is not subscriptable\". The same rewrite: the default mask is built under export.",
    ),
    PatchSpec(
        id="transformers.masks.pegasus_x_default_mask",
        family="transformers",
        trigger="transformers.models.pegasus_x.modeling_pegasus_x",
        target="PegasusXDecoder.forward",
        mode="rewrite",
        replacement="autopatch.areas.text_masks.masks:longt5_default_mask_always",
        # 5.x builds its masks with masking_utils, which sizes a missing mask by the keys
        requires=("transformers>=4.56,<5",),
        fingerprints=("b6bb85e176ee",),  # 4.57.6
        reason="4.x PegasusXDecoder.forward skips its all-ones default mask while compiling; _update_causal_mask "
        "then sizes the causal mask past + seq + 1 (one column more than the keys, which SDPA would cut off), and "
        "Pegasus-X's eager attention adds it to the scores: an export without decoder_attention_mask stopped on "
        "'The size of tensor a (s28) must match the size of tensor b (s28 + 1)'. The same rewrite as LongT5's: "
        "the default mask is built under export, as eager builds it.",
    ),
    PatchSpec(
        id="transformers.masks.bigbird_pegasus_default_mask",
        family="transformers",
        trigger="transformers.models.bigbird_pegasus.modeling_bigbird_pegasus",
        target="BigBirdPegasusDecoder.forward",
        mode="rewrite",
        replacement="autopatch.areas.text_masks.masks:longt5_default_mask_always",
        requires=("transformers>=4.56,<5",),
        fingerprints=("6e0a9debde42",),  # 4.57.6
        reason="4.x BigBirdPegasusDecoder.forward, Pegasus-X's code: the default mask skipped while compiling, a "
        "causal mask one column longer than the keys added to its eager attention's scores (an export without "
        "decoder_attention_mask stopped on 's28 + 1'). The default mask is built under export, as eager builds it.",
    ),
    PatchSpec(
        id="transformers.masks.qwen4_exp_block_selection",
        family="transformers",
        trigger="transformers.models.qwen4_exp.modeling_qwen4_exp",
        target="Qwen4ExpTextQSAIndexer.forward",
        mode="route",
        replacement="autopatch.areas.text_masks.indexers:qwen4_exp_block_selection",
        requires=("transformers>=5.23",),
        fingerprints=("b2fc79207c59",),  # 5.23.0
        reason="Qwen4ExpTextQSAIndexer.forward loops over every (sample, query) row, lists the row's visible keys "
        "with nonzero() and pools them in blocks only `if num_complete_blocks > 0` (guard ((u0//4)) > 0): the "
        "prefill and decode steps of Qwen4-Exp stop. The same selection for every row at once: the blocks of a "
        "causal mask's rows are their sample's last row's (pooled once per sample), each row scores those it "
        "completes and keeps the top ones and its tail; a mask of another structure is refused at run time.",
    ),
    PatchSpec(
        id="transformers.masks.blt_hash_windows",
        family="transformers",
        trigger="transformers.models.blt.modeling_blt",
        target="byte_group_hash_function",  # looked up in the module by compute_hash_embeddings
        mode="route",
        replacement="autopatch.areas.text_masks.byte_patches:blt_byte_group_hash",
        requires=("transformers>=4.57",),
        fingerprints=("4d53cc5e6a27",),  # 4.57.6, 5.23.0
        reason="BLT hashes each byte's n-gram from an unfold(1, n, 1) view, whose last two strides are both 1: "
        "the product with the prime's powers orders them by comparing the length with n, and the prefill fixes "
        "the length (guards length >= 5, length < 6 over its n-grams 3..8). The same windows gathered by index, "
        "hashed by the module's own rolling hash: the same int64 values, which wrap on purpose (primes to the 7th "
        "power). Summed term by term: an ONNX ReduceSum of such values answers wrong in onnxruntime (rounded and "
        "saturated; upstream's torch.sum made BLT's ONNX logits off by up to 5), where Add wraps as torch does.",
    ),
    PatchSpec(
        id="transformers.masks.blt_patch_starts",
        family="transformers",
        trigger="transformers.models.blt.modeling_blt",
        target="BltPatcher.patch_lengths_from_entropies",
        mode="route",
        replacement="autopatch.areas.text_masks.byte_patches:blt_patch_lengths",
        requires=("transformers>=4.57",),
        fingerprints=("2f3a410b2577",),  # 4.57.6, 5.23.0
        reason="BLT cuts its first entropy off (a view of length - 1 columns) and picks each row's patch starts "
        "with a boolean index reshaped back to length - 1 columns: ops on that view and the reshape guard on "
        "length - 1 (not 1, at least 2), and the program refuses one- and two-token decode steps and short "
        "prompts ('Guard failed: input_ids.size()[1] >= 3'). The same lengths with every tensor the full length: "
        "the first position masked out, the starts sorted from torch.where, the count read from the data as "
        "upstream.",
    ),
    PatchSpec(
        id="transformers.masks.canine_molecule_mask",
        family="transformers",
        trigger="transformers.models.canine.modeling_canine",
        target="CanineModel._downsample_attention_mask",
        mode="route",
        replacement="autopatch.areas.text_masks.characters:canine_molecule_mask",
        requires=("transformers>=5",),
        fingerprints=("e6ce79c6e5c0",),  # 5.23.0
        reason="CANINE pools its character mask into molecules with nn.MaxPool1d, whose output length the export "
        "computes from the traced length: the length becomes a constant ('specialized it to be a constant'). The "
        "same maxima of the same groups of characters, gathered by index.",
    ),
    PatchSpec(
        id="transformers.masks.canine_molecule_mask_4x",
        family="transformers",
        trigger="transformers.models.canine.modeling_canine",
        target="CanineModel._downsample_attention_mask",
        mode="route",
        replacement="autopatch.areas.text_masks.characters:canine_molecule_mask_4x",
        requires=("transformers<5",),
        fingerprints=("a233d56057d3",),  # 4.57.6
        reason="4.x CANINE pools its character mask with nn.MaxPool1d, as 5.x does: the same maxima gathered by "
        "index, kept (batch, 1, molecules), the shape 4.x returns for two molecules and more.",
    ),
    PatchSpec(
        id="transformers.masks.canine_local_blocks",
        family="transformers",
        trigger="transformers.models.canine.modeling_canine",
        target="CanineAttention.forward",
        mode="route",
        replacement="autopatch.areas.text_masks.characters:canine_local_blocks",
        requires=("transformers>=4.56",),
        fingerprints=("ee11363d6689", "b47e3777cbfa"),  # 5.23.0, 4.57.6
        reason="CANINE's first character encoder attends within chunks of local_transformer_stride characters, "
        "looping over range(0, length, stride) in Python: the length becomes a constant. Its chunks tile the "
        "sequence, so it is attention within blocks: all blocks at once, picked by index, the last block's padding "
        "keys at -inf (upstream's shorter last chunk, the same softmax). Other chunk settings, attention "
        "probabilities asked for: the original.",
    ),
    PatchSpec(
        id="transformers.masks.canine_repeat_molecules",
        family="transformers",
        trigger="transformers.models.canine.modeling_canine",
        target="CanineModel._repeat_molecules",
        mode="route",
        replacement="autopatch.areas.text_masks.characters:canine_repeat_molecules",
        requires=("transformers>=4.56",),
        fingerprints=("cd5532bde1bb",),  # 4.57.6, 5.23.0
        reason="CANINE upsamples its molecules back to characters by slicing <cls> off, repeating and "
        "concatenating: the slice's contiguity checks guard on the molecule count (two or not, as traced), and "
        "the program refuses texts of 8 to 11 characters ('Guard failed: -1 + input_ids.size()[1] // 4 != 1'). "
        "The same rows gathered by index.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ("transformers.masks.fsmt_padding",),
        "FSMT's `make_padding_mask` returned None for ids without a pad, a branch on the data that stopped the "
        "export of its forward: the mask is returned always (all False without pads: the same results).",
    ),
    (
        ("transformers.masks.cpmant_prompt_positions",),
        "CPM-Ant numbered its mask's positions with `range(seq)` in Python, fixing the sequence length: the same "
        "positions by `torch.arange`.",
    ),
    (
        (
            "transformers.masks.longt5_default_mask", "transformers.masks.switch_transformers_default_mask",
            "transformers.masks.pegasus_x_default_mask", "transformers.masks.bigbird_pegasus_default_mask",
        ),
        "LongT5 skipped building its default all-ones mask while compiling, then its local attention split the "
        "missing mask: an export without attention_mask stopped; so did 4.x Switch Transformers' encoder, and 4.x "
        "Pegasus-X's and BigBird-Pegasus' decoders, whose causal mask then had one column more than their eager "
        "attention's scores. The default mask is built under export too.",
    ),
    (
        ("transformers.masks.qwen4_exp_block_selection",),
        "Qwen4-Exp's sparse-attention indexer chose each query's key blocks in a Python loop with `nonzero()` and an "
        "`if` on the block count: the same blocks chosen for every row at once.",
    ),
    (
        ("transformers.masks.blt_hash_windows", "transformers.masks.blt_patch_starts"),
        "BLT's n-gram hashes read overlapping `unfold` windows (their tied strides fixed the length) and its "
        "patcher picked its patch starts from a view one shorter than the input (refusing one- and two-token "
        "steps): the windows gathered by index, the starts sorted at full length; the number of patches stays the "
        "data's. The same values, in onnxruntime too (the hashes' int64 wrap-around summed by Add, not by a "
        "ReduceSum that rounds it). Its entropies' Categorical: `torch.distributions.*`.",
    ),
    (
        ("transformers.masks.canine_molecule_mask", "transformers.masks.canine_molecule_mask_4x",
         "transformers.masks.canine_local_blocks", "transformers.masks.canine_repeat_molecules"),
        "CANINE pooled its character mask with `nn.MaxPool1d` and looped over its local attention's chunks in "
        "Python, fixing the length; its molecules were repeated back to characters through a slice that guards on "
        "their count: the mask's groups and the molecules' rows gathered by index, the chunks as one attention "
        "over blocks (the last one's padding at -inf). Programs take 2 molecules and more (8 characters).",
    ),
)
