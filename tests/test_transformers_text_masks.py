"""transformers.masks.fsmt_padding, .cpmant_prompt_positions, .longt5_default_mask, .switch_transformers_default_mask,
.pegasus_x_default_mask, .bigbird_pegasus_default_mask: text models whose own mask code decides in Python.

FSMT's forward stops on a branch on the data (a padding mask with no pad becomes None); CPM-Ant's prefill program
takes only the traced length (its mask's positions come from ``range(seq)``); LongT5's decode step without an
attention mask stops (its default mask is skipped while compiling), and so does 4.x Switch Transformers'; 4.x
Pegasus-X's and BigBird-Pegasus' decoders skip it too and size their causal mask one column past the scores. With
the rows they export, and the program matches eager, every output leaf, on other batches and lengths (FSMT: with
pads in the decoder's ids too, the case the original keeps its mask for). The models are the tiny catalogue's."""

import pytest
import torch

import proving
from autopatch.models import tiny
from conftest import requires
from proving import Proof

DATA_DEPENDENT = "Could not guard on data-dependent expression"
CONSTANT = "specialized it to be a constant"


def _sets(model_type, kind, step):
    arch = tiny.architecture(model_type, kind)
    model = tiny.build(arch)
    return model, [tiny.inputs(model, arch, step, k) for k in range(3)]


def fsmt_case():
    def build():
        model, (traced, other, third) = _sets("fsmt", "seq2seq", "forward")
        padded = dict(third, decoder_input_ids=third["decoder_input_ids"].clone())
        padded["decoder_input_ids"][0, -2:] = model.config.pad_token_id  # a shorter target, padded at its end
        return model, traced, other, [other, third, padded]

    return Proof("fsmt/forward", build, rows=("transformers.masks.fsmt_padding",), fails_with=DATA_DEPENDENT,
                 beside=("all",))


def cpmant_case():
    def build():
        model, (traced, other, third) = _sets("cpmant", "causal", "prefill")
        return model, traced, other, [other, third]

    return Proof("cpmant/prefill", build, rows=("transformers.masks.cpmant_prompt_positions",), fails_with=CONSTANT,
                 beside=("all",))


def longt5_case():
    """A decode step (encoder ids, one or more decoder ids, the cache of the earlier ones) with no attention mask,
    as the catalogue builds it: transformers' default is all ones."""
    def build():
        model, (traced, other, third) = _sets("longt5", "seq2seq", "decode")
        return model, traced, other, [other, third]

    return Proof("longt5/decode", build, rows=("transformers.masks.longt5_default_mask",),
                 fails_with="'NoneType' object has no attribute 'shape'", beside=("all",))


def switch_case():
    """4.x Switch Transformers' decode step as the catalogue builds it: encoder ids and no attention mask."""
    def build():
        model, (traced, other, third) = _sets("switch_transformers", "seq2seq", "decode")
        return model, traced, other, [other, third]

    return Proof("switch_transformers/decode", build, rows=("transformers.masks.switch_transformers_default_mask",),
                 fails_with="'NoneType' object is not subscriptable", beside=("all",))


@pytest.mark.parametrize("case", [fsmt_case, cpmant_case, longt5_case,
                                  pytest.param(switch_case, marks=requires("transformers<5"))],
                         ids=["fsmt", "cpmant", "longt5", "switch_transformers"])
def test_export_fails_without_the_row_and_matches_eager_with_it(make_agent, case):
    proving.prove(case(), make_agent)


def _encoded(model, inputs: dict, k: int) -> dict:
    """``inputs`` with the source encoded first, as generate() does (the decoder is what the rows change; these
    encoders take most of a minute to trace), and its mask: all ones in set 0 (the traced one), the rows
    right-padded by amounts that differ from set to set otherwise (encoded with that mask, and passed for the
    cross-attention)."""
    from autopatch.models import builders

    inputs = dict(inputs)
    ids = inputs.pop("input_ids")
    batch, source = ids.shape
    mask = torch.ones(batch, source, dtype=torch.long)
    for row, pads in enumerate(builders.left_pads(batch, source, k) if k else [0] * batch):
        mask[row, source - pads:] = 0
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask)
    return dict(inputs, encoder_outputs=encoded, attention_mask=mask)


def pegasus_decoder_case(model_type: str, step: str):
    """4.x Pegasus-X's or BigBird-Pegasus' ``step`` as the catalogue builds it, without decoder_attention_mask (the
    default mask the row builds), on a source encoded first and padded in the sets it is run at; the decode step's
    cache compared leaf by leaf too."""
    def build():
        model, sets = _sets(model_type, "seq2seq", step)
        sets = [_encoded(model, inputs, k) for k, inputs in enumerate(sets)]
        return model, sets[0], sets[1], sets[1:]

    return Proof(f"{model_type}/{step}", build, rows=(f"transformers.masks.{model_type}_default_mask",),
                 fails_with=r"The size of tensor a \(.+\) must match the size of tensor b \(.+ \+ 1\)",
                 beside=("all",))


@requires("transformers<5")
@pytest.mark.parametrize("model_type, step", [("pegasus_x", "decode"), ("bigbird_pegasus", "decode"),
                                               ("bigbird_pegasus", "forward")])
def test_pegasus_decoders_default_mask(make_agent, model_type, step):
    proving.prove(pegasus_decoder_case(model_type, step), make_agent)


def test_the_rewrites_give_eager_results_exactly():
    """The rewritten functions themselves, called in eager code: FSMT's mask is the original's wherever the original
    returns one (all False where it returns None); CPM-Ant's mask is the original's at every length."""
    from transformers.models.cpmant import modeling_cpmant
    from transformers.models.fsmt import modeling_fsmt

    from autopatch.areas.text_masks import masks

    padding_mask = masks.padding_mask_always(modeling_fsmt.make_padding_mask)
    ids = torch.tensor([[5, 6, 1, 1], [5, 6, 7, 8]])
    assert torch.equal(padding_mask(ids, 1), modeling_fsmt.make_padding_mask(ids, 1))
    assert modeling_fsmt.make_padding_mask(ids[1:], 1) is None
    assert not padding_mask(ids[1:], 1).any()

    model, _ = _sets("cpmant", "causal", "prefill")
    rewritten = masks.cpmant_positions_by_arange(modeling_cpmant.CpmAntModel._prepare_attention_mask)
    prompt = model.config.prompt_length
    for seq in (prompt + 1, prompt + 5, prompt + 17):
        ids = torch.randint(0, 100, (3, seq))
        span = torch.zeros(3, seq, dtype=torch.long)
        context = torch.ones(3, seq, dtype=torch.bool)
        length = torch.tensor([seq, seq - 2, seq - 4])
        expected = model.cpmant._prepare_attention_mask(ids, span, context, length)
        assert torch.equal(rewritten(model.cpmant, ids, span, context, length), expected)


#: Qwen4-Exp's indexer (the catalogue's: blocks of 4 keys, a budget of 8 keys, so 2 blocks and a tail per row):
#: lengths with fewer keys than one block, with more blocks than the budget (where top-k must choose), left-padded
#: rows. (batch, length) of a prefill; (batch, past, new tokens) of a decode step.
QWEN4_PREFILL = ((2, 14), (3, 21), (1, 3), (4, 33))
QWEN4_DECODE = ((2, 13, 3), (3, 18, 2), (1, 3, 1), (2, 30, 1))


def qwen4_exp_case(step: str):
    """``step`` of Qwen4-Exp's text model, padded batches (each set's rows padded by other amounts)."""
    from autopatch.models import builders

    def build():
        arch = tiny.architecture("qwen4_exp_text", "causal")
        config = tiny.tiny_config("qwen4_exp_text")
        # Its indexed layer alone (the catalogue's also has three linear-attention layers, which the sweep covers
        # and which take minutes to trace at these lengths); the indexer's own settings as the catalogue's.
        config.num_hidden_layers, config.layer_types = 1, ["indexed_attention"]
        torch.manual_seed(0)
        model = tiny.model_class(arch)(config).eval()
        if step == "prefill":
            sets = [builders.prefill_inputs(model, config, batch, seq, seed=k + 1,
                                            pads=builders.left_pads(batch, seq, k))
                    for k, (batch, seq) in enumerate(QWEN4_PREFILL)]
        else:
            sets = [builders.decode_inputs(model, config, batch, past, seq, seed=k + 1,
                                           pads=builders.left_pads(batch, past, k))
                    for k, (batch, past, seq) in enumerate(QWEN4_DECODE)]
        return model, sets[0], sets[1], sets[1:]

    return Proof(f"qwen4_exp_text/{step}", build, rows=("transformers.masks.qwen4_exp_block_selection",),
                 fails_with=r"\(\(u\d+//4\)\) > 0", beside=("all",))


@requires("transformers>=5.23")
@pytest.mark.parametrize("step", ["prefill", "decode"])
def test_qwen4_exp_indexer_fails_without_the_row_and_matches_eager_with_it(make_agent, step):
    proving.prove(qwen4_exp_case(step), make_agent)


@requires("transformers>=5.23")
def test_qwen4_exp_block_selection_is_the_originals_exactly():
    """The replacement against the original indexer in eager code, bit for bit: batches of 1 to 3, more keys than
    queries (a cache), fewer keys than a block, more blocks than the budget, left padding, a sample with no
    visible key, bool (sdpa) and float (eager) masks. A mask whose rows are not prefixes of their last row's is
    refused."""
    from transformers.models.qwen4_exp import modeling_qwen4_exp

    from autopatch.areas.text_masks.indexers import qwen4_exp_block_selection

    arch = tiny.architecture("qwen4_exp_text", "causal")
    model = tiny.build(arch)
    indexer = next(m for m in model.modules() if isinstance(m, modeling_qwen4_exp.Qwen4ExpTextQSAIndexer))
    assert indexer.block_topk * indexer.compress_ratio < 33  # the longest case has more blocks than the budget
    rotary, hidden = model.model.rotary_emb, model.config.hidden_size
    generator = torch.Generator().manual_seed(0)

    class Keys:  # the cache's part the indexer reads: earlier keys, then this step's
        def __init__(self, earlier):
            self.earlier = earlier

        def update_indexer(self, keys, layer_idx):
            return torch.cat([self.earlier, keys], dim=1)

    def call(forward, states, mask, earlier):
        positions = torch.arange(mask.shape[-1]).view(1, 1, -1).expand(3, states.shape[0], -1)
        with torch.no_grad():
            return forward(indexer, states, rotary(states, positions), mask, Keys(earlier.clone()))

    cases = 0
    for batch in (1, 2, 3):
        for queries, keys in ((1, 1), (1, 3), (5, 5), (3, 11), (2, 14), (1, 17), (13, 13), (2, 33)):
            for padding in ("none", "left", "empty"):
                visible = (torch.arange(keys)[None] <= torch.arange(keys - queries, keys)[:, None]).expand(
                    batch, queries, keys).clone()
                if padding == "left":
                    for row in range(batch):
                        visible[row, :, :int(torch.randint(0, keys, (), generator=generator))] = False
                elif padding == "empty":
                    visible[0] = False
                states = torch.randn(batch, queries, hidden, generator=generator)
                earlier = torch.randn(batch, keys - queries, indexer.index_head_dim, generator=generator)
                for mask in (visible[:, None],
                             torch.zeros(batch, 1, queries, keys).masked_fill(~visible[:, None], -3.4e38)):
                    expected = call(modeling_qwen4_exp.Qwen4ExpTextQSAIndexer.forward, states, mask, earlier)
                    assert torch.equal(call(qwen4_exp_block_selection, states, mask, earlier), expected), (
                        batch, queries, keys, padding, mask.dtype)
                    cases += 1
    assert cases == 3 * 8 * 3 * 2

    scattered = torch.ones(2, 1, 4, 9, dtype=torch.bool)
    scattered[0, 0, 0, 3] = False  # a row that skips a key its last row sees: not a causal mask's structure
    with pytest.raises(RuntimeError, match="prefix of the keys"):
        call(qwen4_exp_block_selection, torch.randn(2, 4, hidden), scattered, torch.randn(2, 5, indexer.index_head_dim))


#: BLT's rows (4.57 and 5.x): the n-gram hash windows, the patcher's entropy (its Categorical's argument check, made
#: by the program: the distributions area's row), its sorted patch starts.
BLT_HASH, BLT_ENTROPY, BLT_STARTS = ("transformers.masks.blt_hash_windows",
                                     "torch.distributions.parameters_checked_at_run",
                                     "transformers.masks.blt_patch_starts")


def blt_case(rows: tuple, fails_with: str, fails_at_run: bool = False):
    """The catalogue's BLT prefill on left-padded batches (2x5 traced, 3x7 and 4x9 run), an unpadded one and a
    two-byte prompt (one candidate patch start per row). Random weights put every entropy above the config's
    threshold (one patch per byte): the threshold is set at the median entropy, so that rows of a batch have
    different numbers of patches, as a trained patcher's do."""
    def build():
        arch = tiny.architecture("blt", "causal")
        model = tiny.build(arch)
        sets = [tiny.inputs(model, arch, "prefill", k, padded=True) for k in range(3)]
        plain = tiny.inputs(model, arch, "prefill", 1)
        plain["position_ids"] = torch.arange(plain["input_ids"].shape[1]).expand_as(plain["input_ids"])
        short = {"input_ids": sets[1]["input_ids"][:, -2:], "attention_mask": torch.ones(3, 2, dtype=torch.long),
                 "position_ids": torch.arange(2).expand(3, 2), "use_cache": False}
        with torch.no_grad():
            entropies = torch.cat([model.model.patcher(s["input_ids"])[0].flatten() for s in sets])
        model.config.patching_threshold = float(entropies.median())
        return model, sets[0], sets[1], [sets[1], sets[2], plain, short]

    return Proof("blt/prefill", build, rows=rows, fails_with=fails_with, beside=("all",), fails_at_run=fails_at_run)


@requires("transformers>=4.57")
def test_blt_prefill_fails_without_its_rows_and_matches_eager_with_them(make_agent):
    """Without the three rows the export stops at the entropy's check (the first one met); with them it matches eager
    on padded and unpadded batches with different numbers of patches per row, and on a two-byte prompt."""
    # Without them the export stops at the first data-dependent step it meets; in a process that exported other
    # models first (pytest -n 2) torch's value ranges of the unbacked patch count refuse it one step earlier.
    fails_with = f"{DATA_DEPENDENT}|tgt_bound=VR\\[.*\\] not a subset of src_bound"
    proving.prove(blt_case((BLT_HASH, BLT_ENTROPY, BLT_STARTS), fails_with), make_agent)


@requires("transformers>=4.57")
@pytest.mark.parametrize("row, fails_with, at_run", [(BLT_HASH, CONSTANT, False), (BLT_STARTS, "Guard failed", True),
                                                    (BLT_ENTROPY, DATA_DEPENDENT, False)],
                         ids=["hash_windows", "patch_starts", "entropy_check"])
def test_blt_each_row_is_needed(make_agent, monkeypatch, row, fails_with, at_run):
    """The other rows on, one left out: without the hash windows the export fixes the length; without the sorted
    starts the program refuses the two-byte prompt (its guard: length >= 3); without the distributions' row the
    Categorical's argument check stops the export. Validation on, as torch starts a process: torch.compile and
    Dynamo turn it off process-wide the first time they run (TorchPatcher), as an earlier test may have."""
    monkeypatch.setattr(torch.distributions.Distribution, "_validate_args", True)
    proving.fails_without(blt_case((row,), fails_with, fails_at_run=at_run), make_agent)


class _BltHashEmbeddings(torch.nn.Module):
    """BLT's hash embeddings of a batch of bytes: every n-gram size, every hash function, summed (its encoder's
    input beside the byte embeddings)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        from transformers.models.blt import modeling_blt

        blt, config = self.model.model, self.model.config
        return modeling_blt.compute_hash_embeddings(
            input_ids, blt.local_encoder, blt.encoder_hash_tok_embedding, config.encoder_hash_byte_group_nb_functions,
            config.encoder_hash_byte_group_size, config.encoder_hash_byte_group_vocab)


class _WrappedSum(torch.nn.Module):
    """Upstream's form of the hash: int64 products past 2**53, wrapping, summed by torch.sum."""

    def forward(self, windows):
        from autopatch.areas.text_masks.byte_patches import _int64

        powers = torch.tensor([_int64(1000000007 ** j) for j in range(5)], dtype=torch.int64)
        return torch.sum(windows * powers, dim=-1)


@requires("transformers>=4.57")
@requires("torch>=2.13")  # autopatch.areas.bounds.TORCH_ONNX: the torch.onnx exporter the rows are measured on
def test_blt_hashes_reach_onnxruntime_exactly(make_agent):
    """The hash row's sums are upstream's in onnxruntime too: BLT's hash embeddings, exported with the row and
    converted to ONNX, equal eager at other batches and lengths. Upstream's torch.sum of the same wrapped int64
    products does not survive: onnxruntime's ReduceSum rounds and saturates them (with it BLT's ONNX logits were
    off by up to 5), so the row adds the terms one by one."""
    import autopatch
    from autopatch import onnx_inputs
    from conftest import needs_onnx

    needs_onnx()
    generator = torch.Generator().manual_seed(0)
    windows = torch.randint(0, 260, (3, 9, 5), generator=generator)
    summed = proving.export_onnx(_WrappedSum(), (windows,), shapes=({0: torch.export.Dim.DYNAMIC},))
    assert not torch.equal(torch.as_tensor(onnx_inputs.run(summed, windows)), _WrappedSum()(windows))

    model = tiny.build(tiny.architecture("blt", "causal"))
    hashes = _BltHashEmbeddings(model).eval()
    ids = [torch.randint(0, model.config.vocab_size, size, generator=generator)
           for size in ((2, 5), (3, 7), (4, 12), (1, 2))]
    make_agent()  # every default row, the hash row among them
    program = proving.export_onnx(hashes, (ids[0],), (ids[1],))
    assert autopatch.last_export_report()["patches"][BLT_HASH] > 0
    for inputs in ids[1:]:
        with torch.no_grad():
            torch.testing.assert_close(torch.as_tensor(onnx_inputs.run(program, inputs)), hashes(inputs))


@requires("transformers>=4.57")
def test_blt_replacements_are_upstreams_exactly():
    """In eager code, bit for bit: the hashes over every n-gram size 1..8, lengths 1..13 and three of the primes;
    the patch starts against the originals over random entropies and thresholds, lengths 1 to 12 (the same lengths,
    the same number of patches)."""
    from transformers.models.blt import modeling_blt

    from autopatch.areas.text_masks import byte_patches

    generator = torch.Generator().manual_seed(0)
    for group in range(1, 9):
        for length in (1, 2, 5, 13):
            ids = torch.randint(0, 260, (3, length), generator=generator)
            for prime in (1000000007, 5915587277, 3367900313):
                assert torch.equal(byte_patches.blt_byte_group_hash(ids, group, prime, 128),
                                   modeling_blt.byte_group_hash_function(ids, group, prime, 128)), (group, length)

    original = modeling_blt.BltPatcher.patch_lengths_from_entropies
    sorted_starts = byte_patches.blt_patch_lengths
    for length in (1, 2, 3, 7, 12):
        entropies = torch.rand(4, length, generator=generator) * 3
        for threshold in (-1.0, 0.5, 1.5, 2.5, 4.0):
            assert torch.equal(sorted_starts(entropies, length, 4, threshold),
                               original(entropies, length, 4, threshold)), (length, threshold)


@requires("transformers>=4.57")
def test_blt_decode_inputs_carry_its_own_cache():
    """The catalogue's BLT decode step: its prefill is handed the empty cache it cannot build itself (5.x: an
    EncoderDecoderCache of two DynamicCaches, which its config cannot size; 4.x: a DynamicCache, which it never
    creates) and returns it filled; eager steps on it."""
    from autopatch.models import builders

    arch = tiny.architecture("blt", "causal")
    model = tiny.build(arch)
    inputs = tiny.inputs(model, arch, "decode", 0)
    cache = inputs["past_key_values"]
    assert type(cache).__name__ == ("EncoderDecoderCache" if builders.transformers_major() >= 5 else "DynamicCache")
    assert cache.get_seq_length() == builders.DECODE[0][1]
    with torch.no_grad():
        assert model(**inputs).logits.shape[1] == builders.DECODE[0][2]


def _canine_mask_row() -> str:
    """The molecule mask's row of this transformers (4.x keeps the pooled mask's channel dimension)."""
    import transformers

    return "transformers.masks.canine_molecule_mask" + ("_4x" if transformers.__version__.startswith("4.") else "")


CANINE_BLOCKS, CANINE_REPEAT = "transformers.masks.canine_local_blocks", "transformers.masks.canine_repeat_molecules"


def _characters(model, batch: int, length: int, real: list, seed: int) -> dict:
    """Right-padded characters, as CANINE's tokenizer pads: row i holds ``real[i]`` characters (the catalogue's
    keys)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 5000, (batch, length), generator=generator)
    mask = torch.zeros(batch, length, dtype=torch.long)
    for row, count in enumerate(real):
        mask[row, :count] = 1
        ids[row, count:] = model.config.pad_token_id
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def canine_case(stride: int | None, rows: tuple, fails_with: str, fails_at_run: bool = False):
    """The catalogue's CANINE classifier. ``stride`` None: the catalogue's local attention chunk (8 characters),
    traced at 20 characters (3 chunks, the last partial) and run at 28 and 36 (its sets), at 8 (two molecules, one
    chunk: the shortest text a program takes), 32 (whole chunks) and 36 with a row whose last chunk is all padding
    (upstream's softmax over masked keys only: uniform over them). ``stride`` 128 (the config class's): traced at
    20 characters, a window larger than the text, and run at 136 and 300, across two and three windows."""
    def build():
        arch = tiny.architecture("canine", "encoder")
        config = tiny.tiny_config("canine")
        if stride is not None:
            config.local_transformer_stride = stride
        model = tiny.model_class(arch)(config).eval()
        sets = [tiny.inputs(model, arch, "forward", k) for k in range(3)]
        if stride is None:
            runs = [sets[1], sets[2], _characters(model, 3, 8, [8, 5, 8], 1),
                    _characters(model, 2, 32, [32, 17], 2), _characters(model, 3, 36, [36, 30, 12], 3)]
        else:
            runs = [_characters(model, 3, 136, [136, 129, 40], 4), _characters(model, 2, 300, [300, 250], 5)]
        return model, sets[0], sets[1], runs

    name = f"canine/forward (stride {stride or 'of the catalogue'})"
    return Proof(name, build, rows=rows, fails_with=fails_with, beside=("all",), fails_at_run=fails_at_run)


@requires("transformers>=4.57")
@pytest.mark.parametrize("stride", [None, 128], ids=["catalogue_chunks", "config_chunks"])
def test_canine_fails_without_its_rows_and_matches_eager_with_them(make_agent, stride):
    """Without its rows the export of CANINE stops (the mask's pooling and the chunk loop make the length a
    constant); with them the program matches eager at other batches and lengths, across chunks and within one."""
    proving.prove(canine_case(stride, (_canine_mask_row(), CANINE_BLOCKS, CANINE_REPEAT), CONSTANT), make_agent)


@requires("transformers>=4.57")
@pytest.mark.parametrize("row, fails_with, at_run", [
    ("mask", CONSTANT, False), (CANINE_BLOCKS, "Guard failed", True), (CANINE_REPEAT, "Guard failed", True)],
    ids=["molecule_mask", "local_blocks", "repeat_molecules"])
def test_canine_each_row_is_needed(make_agent, row, fails_with, at_run):
    """The other rows on, one left out: without the mask's row the export fixes the length; without the chunks'
    the program takes the traced length only (its guard: the length == 20); without the molecules' it refuses
    texts of two molecules (it was traced at five)."""
    row = _canine_mask_row() if row == "mask" else row
    proving.fails_without(canine_case(None, (row,), fails_with, fails_at_run=at_run), make_agent)


@requires("transformers>=4.57")
def test_canine_replacements_are_upstreams():
    """In eager code: the pooled mask and the repeated molecules bit for bit (lengths 4 to 23, random masks); the
    blocks' attention within float tolerance of upstream's chunk loop, chunks of 8 and 128, a last chunk whose keys
    are all masked among them; with attention probabilities asked for, upstream's own path."""
    from transformers.models.canine import modeling_canine

    from autopatch.areas.text_masks import characters

    generator = torch.Generator().manual_seed(0)
    config = tiny.tiny_config("canine")
    model = modeling_canine.CanineModel(config).eval()
    pooled = characters.canine_molecule_mask_4x if _canine_mask_row().endswith("_4x") else characters.canine_molecule_mask
    for length in range(4, 24):
        mask = torch.randint(0, 2, (3, length), generator=generator)
        if length // 4 > 1:  # 4.x's squeeze(-1) drops the molecule dimension at one molecule (see the row)
            assert torch.equal(pooled(model, mask, 4), model._downsample_attention_mask(mask, 4)), length
        molecules = torch.randn(3, max(1, length // 4), 8, generator=generator)
        assert torch.equal(characters.canine_repeat_molecules(model, molecules, length),
                           model._repeat_molecules(molecules, length)), length

    original = modeling_canine.CanineAttention.forward
    for stride, length, real in ((8, 36, [36, 30, 12]), (8, 5, [5, 3, 1]), (128, 300, [300, 250, 100])):
        config.local_transformer_stride = stride
        attention = modeling_canine.CanineModel(config).eval().initial_char_encoder.layer[0].attention
        hidden = torch.randn(3, length, config.hidden_size, generator=generator)
        mask = _characters(model, 3, length, real, 0)["attention_mask"]
        mask3d = torch.ones(3, length, 1) * mask[:, None, :].float()
        with torch.no_grad():
            expected = original(attention, hidden, mask3d)
            got = characters.canine_local_blocks(original, attention, hidden, mask3d)
            assert len(got) == len(expected) == 1
            torch.testing.assert_close(got[0], expected[0])
            asked = characters.canine_local_blocks(original, attention, hidden, mask3d, output_attentions=True)
            upstream = original(attention, hidden, mask3d, output_attentions=True)
            assert len(asked) == len(upstream) > 1  # one probability tensor per chunk: upstream's path
            for left, right in zip(asked, upstream):
                assert torch.equal(left, right)
