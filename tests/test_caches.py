"""Cache registrations across architectures: each exports with its patch and matches eager on other sizes,
and fails without it. Decode steps are traced at one set of sizes and run at another (batch, past, sequence)."""

import copy
import dataclasses
import inspect

import pytest
import torch
import transformers
from packaging.version import Version

import autopatch
import proving
from autopatch import registry
from autopatch.models import builders, handmade, recurrent
from autopatch.rewrite import runtime
from conftest import requires
from proving import Proof, assert_same_outputs

TRANSFORMERS_5 = Version(transformers.__version__) >= Version("5")


@pytest.fixture
def pytree_patches(make_agent):
    return make_agent(registry.PATCHES, "pytree")


# --- One cache class per case: the decode step fails without its row, exports with it ------------------------

def decoder_case(name):
    def build_case():
        model, config = handmade.build(name)
        # Past lengths 6, 8, 9 all pass gemma3/gpt_oss's sliding window of 4; the run uses a 1-token step.
        traced, other, run = (builders.decode_inputs(model, config, batch=b, past=p, seq=s, seed=seed)
                              for b, p, s, seed in ((2, 6, 3, 1), (3, 8, 2, 2), (1, 9, 1, 3)))
        return model, traced, other, [run]

    return Proof(f"{name}/decode", build_case, rows=("pytree.dynamic_cache",), fails_with="Cache")


def seq2seq_case(name):
    def build_case():
        model, config = handmade.build(name)
        traced, other, run = (builders.seq2seq_decode_inputs(model, config, batch=b, source=src, past=p, seq=s,
                                                             seed=seed)
                              for b, src, p, s, seed in ((2, 5, 3, 2, 1), (3, 7, 4, 3, 2), (1, 9, 6, 1, 3)))
        return model, traced, other, [run]

    return Proof(f"{name}/decode", build_case, rows=("pytree.encoder_decoder_cache",), fails_with="Cache")


def _static_inputs(model, config, batch, past, seq, seed):
    """A decode step after an eager prefill into a StaticCache of 32 positions, at ``cache_position`` (4.x's
    StaticCache takes its batch size too)."""
    g = builders.generator(seed)
    cache_kwargs = {"config": config, "max_cache_len": 32}
    if "max_batch_size" in inspect.signature(transformers.StaticCache.__init__).parameters:
        cache_kwargs["max_batch_size"] = batch
    cache = transformers.StaticCache(**cache_kwargs)
    with torch.no_grad():
        model(input_ids=builders.random_ids(g, 128, batch, past, low=0), past_key_values=cache, use_cache=True,
              cache_position=torch.arange(past))
    inputs = {"input_ids": builders.random_ids(g, 128, batch, seq, low=0), "past_key_values": cache}
    if builders.accepts(model, "cache_position"):
        inputs["cache_position"] = torch.arange(past, past + seq)
    return inputs


def static_case():
    def build_case():
        model, config = handmade.build("llama")
        traced, other, run = (_static_inputs(model, config, batch=b, past=p, seq=s, seed=seed)
                              for b, p, s, seed in ((2, 5, 2, 1), (3, 6, 3, 2), (1, 7, 1, 3)))
        return model, traced, other, [run]

    return Proof("llama/static", build_case, rows=("pytree.static_cache",), fails_with="Cache")


# The hand-sized decoders whose decode step needs only its cache's row: every past beyond the sliding windows
# (tests/test_sliding_windows.py proves steps that cross one). gpt_oss on 4.57 fails in its MoE routing
# (data-dependent expert selection), not in its cache: issue 5. Deselected there by its mark, so the summary lists it.
DECODERS = ["llama", "qwen2", "gemma3", "gpt_oss", "deepseek_v3"]
CACHE_CASES = [
    *(pytest.param(decoder_case(name), id=name, marks=[requires("transformers>=5")] if name == "gpt_oss" else [])
      for name in DECODERS),
    *(pytest.param(seq2seq_case(name), id=name) for name in handmade.SEQ2SEQ),
    pytest.param(static_case(), id="static_llama"),
]


@pytest.mark.parametrize("case", CACHE_CASES)
def test_decode_step_needs_its_cache_row(make_agent, case):
    """Without its row (the rest of the pytree family on) the export stops on the cache; with it the program
    matches eager on a step of other sizes, every output leaf and every cache state."""
    proving.prove(case, make_agent)


def test_guess_dynamic_shapes_marks_only_what_differs():
    a = {"x": torch.ones(2, 3, 4), "pair": [torch.ones(5), torch.ones(1, 7)], "flag": True}
    b = {"x": torch.ones(2, 6, 4), "pair": [torch.ones(5), torch.ones(2, 7)], "flag": True}
    dyn = torch.export.Dim.DYNAMIC
    assert autopatch.guess_dynamic_shapes(a, b) == {"x": {1: dyn}, "pair": [None, {0: dyn}], "flag": None}
    with pytest.raises(ValueError, match="differ in structure"):
        autopatch.guess_dynamic_shapes(a, {**b, "extra": torch.ones(1)})
    # Keywords pair by name: a second set built in another order is the same structure, shapes keyed as the first.
    shuffled = {"flag": True, "pair": b["pair"], "x": b["x"]}
    assert autopatch.guess_dynamic_shapes(a, shuffled) == autopatch.guess_dynamic_shapes(a, b)
    assert list(autopatch.guess_dynamic_shapes(a, shuffled)) == ["x", "pair", "flag"]
    assert autopatch.guess_dynamic_shapes(((), a), ((), shuffled)) == ((), autopatch.guess_dynamic_shapes(a, b))


# --- State-space models: one token at a time ---------------------------------------------------------------------

#: 4.x and 5.0-5.4 keep state-space states in model-local caches (pytree.model_cache.<model>), stepped with a
#: cache_position; 5.5 on in DynamicCache's linear-attention layers (pytree.dynamic_cache).
LOCAL_CACHES = recurrent.local_caches()
#: FalconMamba (4.57, 5.12) registers Parameters as non-persistent buffers: ep.module() needs this torch row.
SSM_ALSO = "torch.export.parameter_buffers"


def ssm_case(name, cache_row):
    def build_case():
        model, _ = recurrent.build(name)
        traced, other, run = (recurrent.ssm_decode_inputs(model, b, p, s)
                              for b, p, s in ((2, 5, 1), (3, 6, 2), (1, 7, 3)))
        return model, traced, other, [run]

    return Proof(f"{name}/decode", build_case, rows=(cache_row,), fails_with="Cache", beside=("pytree", SSM_ALSO))


# Model-local MambaCache and FalconMambaCache (4.57, 5.3), or DynamicCache (5.12, 5.23). Jamba's model-local cache
# is a hybrid one: test_hybrid_decode_step.
SSM = [*(pytest.param(ssm_case(name, "pytree.dynamic_cache"), id=f"{name}-pytree.dynamic_cache",
                      marks=requires("transformers>=5.5"))
         for name in ("mamba", "falcon_mamba", "jamba_dense")),
       *(pytest.param(ssm_case(name, f"pytree.model_cache.{name}"), id=f"{name}-pytree.model_cache.{name}",
                      marks=requires("transformers<5.5"))
         for name in ("mamba", "falcon_mamba"))]


@pytest.mark.parametrize("case", SSM)
def test_state_space_decode_step_with_and_without_its_patch(make_agent, case):
    proving.prove(case, make_agent)


def xlstm_case(strict=False, row="pytree.model_cache.xlstm", sets=None):
    """The catalogue's xLSTM decode step (its own xLSTMCache: matrix memory, normalizer and stabilizer states per
    layer, a position counter, the model's config), traced at a batch of 2 with 3 new tokens, run at 3 (2 tokens)
    and 1 (one)."""
    from autopatch.dynamic_shapes import fit_to_signature
    from autopatch.models import tiny

    sets = {} if sets is None else sets

    def build_case():
        arch = tiny.architecture("xlstm", "causal")
        model = tiny.build(arch)
        sets.update(enumerate(tiny.inputs(model, arch, "decode", k) for k in range(3)))
        return model, sets[0], sets[1], [sets[1], sets[2]]

    def shapes(model):  # xLSTM takes its cache_position through **kwargs
        return fit_to_signature(model, autopatch.guess_dynamic_shapes(sets[0], sets[1]))

    # built once the agent is on: xLSTM binds its recurrent pass (transformers.xlstm.mlstm_scan) when built
    return Proof("xlstm/decode" + "-strict" * strict, build_case, rows=(row,),
                 fails_with="xLSTMCache", beside=("all",), built_after_agent=True, shapes=shapes, strict=strict)


@requires("transformers>=5.23")  # earlier versions count positions in a Python int (the row's requires)
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_xlstm_decode_step_with_and_without_its_cache_row(make_agent, strict):
    """strict=True also needs the cache's config kept as structure Dynamo can hold (it stopped at "xLSTMConfig
    is not a constant"); its context holds the config's class and settings."""
    proving.prove(xlstm_case(strict), make_agent)


@requires("transformers>=4.57,<5")  # the 4.x row's: its cache counts positions in a Python int
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_4x_xlstm_decode_step_with_and_without_its_cache_row(make_agent, strict):
    """4.57's xLSTMCache counts positions in a Python int (seqlen_offset): without the row the decode step stops on
    the cache; with it the counter travels as a one-element tensor, the program matches eager at other batches and
    past lengths, and the cache it returns holds the int eager's holds (the count after the step)."""
    sets = {}
    program, _ = proving.prove(xlstm_case(strict, "pytree.model_cache.xlstm_4x", sets), make_agent)
    for inputs in (sets[1], sets[2]):
        with torch.no_grad():
            got = program.module()(**copy.deepcopy(inputs)).cache_params.seqlen_offset
        assert type(got) is int
        assert got == inputs["cache_params"].seqlen_offset + inputs["input_ids"].shape[1]


def test_a_config_in_a_cache_travels_as_its_class_and_settings():
    """A config kept by a cache (xLSTMCache keeps the model's) is frozen into its class and settings: text for
    torch.export.save, a constant for Dynamo. In the process that flattened it, the very object comes back;
    from the text alone (another process), an equal config."""
    from autopatch.areas.pytree import cache_attributes
    from autopatch.models import tiny

    config = tiny.tiny_config("llama")
    frozen = cache_attributes.freeze(config)
    assert frozen[0] == "config" and frozen[1][0] == f"{type(config).__module__}:{type(config).__qualname__}"
    text = cache_attributes.to_dumpable(frozen)
    assert cache_attributes.thaw(cache_attributes.from_dumpable(text)) is config
    rebuilt = cache_attributes._config_from(*cache_attributes.from_dumpable(text)[1])
    assert type(rebuilt) is type(config) and rebuilt is not config
    assert rebuilt.to_dict() == config.to_dict()
    config.num_hidden_layers += 1  # a config may change between exports: frozen again, not remembered
    assert cache_attributes.freeze(config) != frozen


def test_a_dynamic_cache_subclass_defined_after_activation_exports_with_its_own_state(pytree_patches):
    """Pytree registration is per exact class: a subclass (a model's own, like 5.x MiniMaxCache, or a user's) is
    registered when it is defined, and its own attributes travel: tensors as inputs, the rest as structure."""
    class ScaledCache(transformers.DynamicCache):
        def __init__(self, scale):
            super().__init__()
            self.scale = torch.full((1,), float(scale))  # a tensor of its own: an export input
            self.label = "scaled"  # structure: kept in the context

    assert ScaledCache in torch.utils._pytree.SUPPORTED_NODES
    model, config = handmade.build("llama")

    def inputs(batch, past, seq, seed, scale):
        plain = builders.decode_inputs(model, config, batch, past, seq, seed)
        cache = ScaledCache(scale)
        for index, layer in enumerate(plain["past_key_values"].layers):
            cache.update(layer.keys, layer.values, index)
        return {**plain, "past_key_values": cache}

    class ScaledLogits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, past_key_values):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=past_key_values)
            return out.logits * past_key_values.scale, out.past_key_values

    traced, other, run = inputs(2, 5, 3, 1, 2.0), inputs(3, 7, 2, 2, 3.0), inputs(1, 9, 1, 3, 0.5)
    leaves, spec = torch.utils._pytree.tree_flatten(traced["past_key_values"])
    assert len(leaves) == 2 * config.num_hidden_layers + 1
    rebuilt = torch.utils._pytree.tree_unflatten(leaves, spec)
    assert type(rebuilt) is ScaledCache and rebuilt.label == "scaled" and rebuilt.scale is leaves[-1]
    wrapper = ScaledLogits()
    program = proving.export(wrapper, traced, other)
    with torch.no_grad():
        got = program.module()(**copy.deepcopy(run))
        expected = wrapper(**copy.deepcopy(run))
    assert_same_outputs(got, expected)  # the logits, every key and value, the scale; the label in the structure
    assert type(got[1]) is ScaledCache and got[1].get_seq_length() == 10
    pytree_patches.disable()
    assert ScaledCache not in torch.utils._pytree.SUPPORTED_NODES  # undone with the rest
    assert "__init_subclass__" not in vars(transformers.DynamicCache)


def test_output_containers_need_no_patch(agent):
    """transformers registers ModelOutput subclasses itself on the versions we support: with no patch at all, an
    encoder returns its output container from the program, fields and values intact, at other sizes."""
    # An encoder (no cache at all), hidden 32: the output container is what is proven.
    model, _ = builders.make_model("BertConfig", "BertModel", vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    assert not agent.active
    traced, other = {"input_ids": torch.randint(0, 128, (2, 7))}, {"input_ids": torch.randint(0, 128, (3, 11))}
    program = proving.export(model, traced, other)
    with torch.no_grad():
        got, expected = program.module()(**other), model(**other)
    assert type(got) is type(expected) and list(got.keys()) == list(expected.keys())
    for key in expected.keys():
        torch.testing.assert_close(got[key], expected[key])


# --- Hybrids: recurrent or linear-attention layers next to full attention -----------------------------------------

# What each hybrid with a model-local cache needs besides the pytree family (its cache row is
# pytree.model_cache.<model>): on 4.57 and 5.3 the same rows, but 5.3's Jamba has neither the 4.x causal mask nor
# the MoE loop.
HYBRID_PATCHES_LOCAL = {
    "qwen3_next": ["transformers.qwen3_next.linear_attention_mask"],  # (its one_token_path: one-token steps pass)
    "bamba": ["transformers.bamba.mamba_mask", "transformers.bamba.decode_position"],
    "granitemoehybrid": ["transformers.granitemoehybrid.mamba_mask", "transformers.granitemoehybrid.decode_position"],
    "jamba": ["transformers.jamba.mamba_mask",
              *(["transformers.jamba.causal_mask_length", "transformers.moe.jamba"] if not TRANSFORMERS_5 else [])],
    "falcon_h1": ["transformers.falcon_h1.mamba_mask", "transformers.falcon_h1.decode_position",
                  "transformers.falcon_h1.cache_update"],
}
#: The export's error without one row (the others on): the cache row stops it at its inputs; without a rewrite of
#: FalconH1's cache update, len() fixes the batch (a constraint violation); the other rows: a data-dependent guard.
MISSING_ROW_ERRORS = {"transformers.falcon_h1.cache_update": "Constraints violated"}


def hybrid_case(name, cache_row):
    def build_case():
        model, _ = recurrent.build(name)
        traced, other = recurrent.hybrid_decode_inputs(model, 2, 5, 1), recurrent.hybrid_decode_inputs(model, 3, 6, 2)
        runs = [recurrent.hybrid_decode_inputs(model, 1, 7, 3), recurrent.hybrid_decode_inputs(model, 4, 9, 4, True)]
        return model, traced, other, runs

    needed = (cache_row, *(HYBRID_PATCHES_LOCAL[name] if LOCAL_CACHES else ()))
    return Proof(f"{name}/decode", build_case, rows=needed, fails_with="Cache")


def without_one_row(case, missing):
    """The same case with ``missing`` off and every other row of it on."""
    others = tuple(row for row in case.rows if row != missing)
    error = "Cache" if missing.startswith("pytree.") else MISSING_ROW_ERRORS.get(missing, "data-dependent")
    return dataclasses.replace(case, rows=(missing,), beside=(*case.beside, *others), fails_with=error)


@pytest.mark.parametrize("case", [
    *(pytest.param(hybrid_case(name, "pytree.dynamic_cache"), id=f"{name}-pytree.dynamic_cache",
                   marks=requires("transformers>=5.5")) for name in HYBRID_PATCHES_LOCAL),
    *(pytest.param(hybrid_case(name, f"pytree.model_cache.{name}"), id=f"{name}-pytree.model_cache.{name}",
                   marks=requires("transformers<5.5")) for name in HYBRID_PATCHES_LOCAL)])
def test_hybrid_decode_step(make_agent, case):
    """Linear-attention or mamba2 layers next to full attention. 5.5 on keep them in DynamicCache; 4.57 and 5.3 in
    the model's own cache class, and need the model's transformers rows too (its mask and, for Bamba-style mixers,
    the decode test). Each row is needed: without any one of them the same export fails. The program matches eager
    at other sizes, a left-padded batch too."""
    built = case.build()
    program, own = proving.exports_with(case, make_agent, built)
    if any(row.endswith("decode_position") for row in case.rows):  # a decode step at position 0 contradicts its
        wrong = {**copy.deepcopy(built[1]), "cache_position": torch.tensor([0])}  # cache: refused, not miscomputed
        with pytest.raises(Exception, match="Runtime assertion failed"):
            program.module()(**wrong)
    own.disable()
    for missing in case.rows:
        proving.fails_without(without_one_row(case, missing), make_agent, built)


@pytest.mark.parametrize("name, row", [
    pytest.param(name, f"transformers.{name}.{kind}", marks=requires("transformers<5.5"))
    for name, kind in (("bamba", "decode_position"), ("granitemoehybrid", "decode_position"),
                       ("falcon_h1", "decode_position"), ("qwen3_next", "one_token_path"))])
def test_a_hybrid_step_of_several_tokens_refuses_one_token_instead_of_answering_wrong(make_agent, monkeypatch,
                                                                                      name, row):
    """Traced with several new tokens and a previous state, the mixer takes its several-token path; torch decides
    `seq_len == 1` by assuming a dynamic length is never 1, yet the program accepts one. Before the rows rewrote
    that test, a one-token step ran down the several-token path and answered wrong without a word (measured on
    4.57: Bamba's logits off by 0.235, Qwen3-Next's by 0.04); now the program refuses it, and still matches eager
    on steps of several tokens."""
    model, _ = recurrent.build(name)
    traced = recurrent.hybrid_decode_inputs(model, 2, 5, 1, seq=3)
    other = recurrent.hybrid_decode_inputs(model, 3, 7, 2, seq=2)  # every size differs, the mask's length too
    make_agent()
    program = proving.export(model, traced, other)
    assert autopatch.last_export_report()["patches"][row] > 0
    several = recurrent.hybrid_decode_inputs(model, 4, 7, 3, seq=4)
    one = recurrent.hybrid_decode_inputs(model, 1, 7, 4)
    with torch.no_grad():
        assert_same_outputs(program.module()(**copy.deepcopy(several)), model(**copy.deepcopy(several)))
        with pytest.raises(RuntimeError, match="traced with several new tokens and a cache"):
            program.module()(**copy.deepcopy(one))
    # The same rewrite with the length compared as written: the program takes the one-token step and answers wrong.
    monkeypatch.setattr(runtime, "is_one", lambda length, why: length == 1)
    unchecked = proving.export(model, traced, other)
    with torch.no_grad():
        got, expected = unchecked.module()(**copy.deepcopy(one)), model(**copy.deepcopy(one))
    with pytest.raises(AssertionError):  # logits (Bamba: by 0.2) or the states it returns (FalconH1's conv states)
        assert_same_outputs(got, expected)


def test_attribute_codec_keeps_the_attribute_order_when_a_list_fills_later():
    """A model-local cache whose key list is empty when flattened (a prefill's input) and filled by the model: the
    rebuilt object must flatten in the eager object's order, or the program's output cache would not match the
    spec of the next step's input (seen with 4.57 FalconH1's cache, prefill program -> decode program)."""
    from autopatch.areas.pytree.cache_attributes import make_attribute_codec

    class LocalCache:
        def __init__(self):
            self.states = torch.zeros(2, 3)
            self.key_cache = []
            self.seen = 0

    flatten, unflatten, _ = make_attribute_codec(LocalCache, "test.local_cache")
    eager = LocalCache()
    rebuilt = unflatten(*flatten(eager))
    for cache in (eager, rebuilt):
        cache.key_cache.append(torch.ones(2, 1))
    assert list(vars(rebuilt)) == list(vars(eager)) == ["states", "key_cache", "seen"]
    assert flatten(rebuilt)[1].tensors == flatten(eager)[1].tensors == ("states", "key_cache")


@requires("transformers>=5.23")  # the layout it starts from: a dict per state
def test_a_linear_attention_layer_with_one_tensor_per_state_round_trips(pytree_patches):
    """transformers 5.3-5.12 keep one tensor per kind of state in a linear-attention layer (5.23: a dict per state
    index). Flattening such a layer as "no states" gave wrong logits with no error (measured on 5.12.1). Both
    layouts travel now; CI runs Mamba's and Jamba's decode steps on 5.12.1 itself. Here the older layout is put
    back on one layer of a real 5.23 Mamba cache: its states are leaves, and come back in the same layout."""
    model, _ = recurrent.build("mamba")
    with torch.no_grad():
        cache = model(input_ids=torch.randint(0, 64, (2, 5)), use_cache=True).cache_params
    layer = cache.layers[0]
    assert isinstance(layer.conv_states, dict)
    conv, recurrent_state = layer.conv_states[0], layer.recurrent_states[0]
    layer.conv_states, layer.recurrent_states = conv, recurrent_state  # the 5.12 layout: one tensor per kind
    layer.is_conv_states_initialized = layer.is_recurrent_states_initialized = layer.has_previous_state = True
    layer.conv_kernel_size = conv.shape[-1]
    leaves, spec = torch.utils._pytree.tree_flatten(cache)
    assert any(leaf is conv for leaf in leaves) and any(leaf is recurrent_state for leaf in leaves)
    rebuilt = torch.utils._pytree.tree_unflatten(leaves, spec).layers[0]
    assert rebuilt.conv_states is conv and rebuilt.recurrent_states is recurrent_state
    assert rebuilt.has_previous_state is True and rebuilt.conv_kernel_size == conv.shape[-1]
    assert rebuilt.max_batch_size == 2


# --- Mamba2 and LFM2 with model-local caches (4.57, 5.3): the one-token path is chosen by cache_position[0] > 0 ----

def one_token_case(name):
    def build_case():
        model, _ = recurrent.build(name)
        traced, other = recurrent.ssm_decode_inputs(model, 2, 5, 1), recurrent.ssm_decode_inputs(model, 3, 6, 2)
        runs = [recurrent.ssm_decode_inputs(model, b, p, s) for b, p, s in ((1, 7, 3), (4, 9, 4))]
        return model, traced, other, runs

    return Proof(f"{name}/decode", build_case, rows=(f"transformers.{name}.decode_by_length",),
                 fails_with="data-dependent")


@requires("transformers<5.5")
@pytest.mark.parametrize("name", ["mamba2", "lfm2"])
def test_one_token_decode_step_needs_its_decode_by_length_row(make_agent, name):
    case = one_token_case(name)
    built = case.build()
    proving.fails_without(case, make_agent, built)
    program, own = proving.exports_with(case, make_agent, built)
    # One token at position 0 would take the prefill path in eager: the program refuses it, it does not miscompute.
    with pytest.raises(Exception, match="Runtime assertion failed"):
        program.module()(**recurrent.ssm_decode_inputs(built[0], 2, 5, 5, position=0))
    own.disable()
    # The cache row is needed too: without it (the mixer's row on) the cache is no input torch takes.
    cache_row = dataclasses.replace(case, rows=(f"pytree.model_cache.{name}",), beside=("pytree", *case.rows),
                                    fails_with="Unsupported input type")
    proving.fails_without(cache_row, make_agent, built)


@requires("transformers<5")
@pytest.mark.parametrize("name", list(handmade.SEQ2SEQ))
def test_decoder_step_given_encoder_outputs(make_agent, name):
    """A seq2seq decode step fed as runtimes feed it: the encoder's output as a BaseModelOutput, with the cache.
    On 4.x that output type has no key paths: the export stops without the row and matches eager with it, at
    other batch, source, past and step lengths; every output leaf (logits, every cache state) compared."""

    def build_case():
        model, config = handmade.build(name)

        def step(batch, source, past, seq, seed):
            inputs = builders.seq2seq_decode_inputs(model, config, batch=batch, source=source, past=past, seq=seq,
                                                    seed=seed)
            encoder_inputs = {k: inputs.pop(k) for k in ("input_ids", "input_features") if k in inputs}
            with torch.no_grad():
                hidden = model.get_encoder()(**encoder_inputs).last_hidden_state
            inputs["encoder_outputs"] = transformers.modeling_outputs.BaseModelOutput(last_hidden_state=hidden)
            return inputs

        return model, step(2, 5, 3, 2, 1), step(3, 7, 4, 3, 2), [step(1, 9, 6, 1, 3)]

    proving.prove(Proof(f"{name}/encoder_outputs", build_case, rows=("pytree.model_output_keys",),
                        fails_with="flatten_with_keys_fn", raises=ValueError), make_agent)


@requires("transformers>=5.23")
def test_static_cache_with_sliding_layers_is_exact_or_refused(pytree_patches, monkeypatch):
    """Gemma 3's own 5:1 pattern in a StaticCache: 5.x's static sliding layer branches on a Python int count
    (`cumulative_length_int`: is its window full?), a constant of any program. It travels in the context, so the
    program runs exactly at the traced count (other batches, the same step length) and refuses any other count
    with torch's input-spec check: never the traced count's branch applied to another."""
    # A window of 8 that a past of 5 stays inside and a past of 9 leaves.
    model, config = handmade.build("gemma3_own_pattern")
    traced, other = _static_inputs(model, config, 2, 5, 2, 1), _static_inputs(model, config, 3, 5, 2, 2)
    program = proving.export(model, traced, other)
    with torch.no_grad():
        for batch in (1, 4):
            run = _static_inputs(model, config, batch, 5, 2, batch)
            assert_same_outputs(program.module()(**copy.deepcopy(run)), model(**copy.deepcopy(run)))
        elsewhere = _static_inputs(model, config, 2, 9, 2, 3)  # past the window: the other branch
        with pytest.raises(ValueError, match="Trying to flatten user inputs with exported input tree spec"):
            program.module()(**copy.deepcopy(elsewhere))
    # Without the count in the context, the rebuilt layers start from 0 and take the wrong branch: wrong numbers
    # at the traced count already, silently.
    from autopatch.areas.pytree import caches as pytree_caches

    monkeypatch.setattr(pytree_caches, "INT_COUNTERS", ())
    program = proving.export(model, traced, other)
    with torch.no_grad():
        run = _static_inputs(model, config, 2, 5, 2, 3)
        wrong = (program.module()(**copy.deepcopy(run)).logits - model(**copy.deepcopy(run)).logits).abs().max()
    assert wrong > 1e-2


def _deepseek_v4_prefill(batch, past, seed):
    """A 2-layer DeepSeek-V4 (its heavily compressed then its compressed sparse layer, the config class's ratios
    and window) after an eager prefill of ``past`` tokens: the model and its cache."""
    from autopatch.models import tiny

    config = tiny.tiny_config("deepseek_v4")
    config.num_hidden_layers = 2
    config.layer_types = ["heavily_compressed_attention", "compressed_sparse_attention"]
    config.mlp_layer_types = ["hash_moe", "moe"]
    torch.manual_seed(0)
    model = tiny.model_class(tiny.architecture("deepseek_v4", "causal"))(config).eval()
    return model, builders.decode_inputs(model, config, batch, past, 1, seed=seed)["past_key_values"]


@requires("transformers>=5.23")
def test_a_layer_whose_constructor_takes_the_config_travels_with_its_own_state(pytree_patches):
    """5.23's DeepSeek-V4 cache layers are built from the model's config (DeepseekV4HCACache(config)), which they do
    not keep: the decode export stopped on "__init__() missing 1 required positional argument: 'config'". Such a
    layer is rebuilt as its nearest base class that needs no more than a layer keeps (DynamicSlidingWindowLayer
    here), then its own state is set: tensors (the compressor's buffers, compressed entries, overlap) as leaves,
    the rest as structure; the count of compressed entries from their tensor's size, never a constant."""
    _, cache = _deepseek_v4_prefill(2, 10, seed=1)
    leaves, spec = torch.utils._pytree.tree_flatten(cache)
    rebuilt = torch.utils._pytree.tree_unflatten(leaves, spec)
    assert [type(layer) for layer in rebuilt.layers] == [type(layer) for layer in cache.layers]
    for layer, original in zip(rebuilt.layers, cache.layers):
        # the mark of a count taken from the keys (sliding_windows.layers: a cache of sliding layers only) aside
        assert {n for n in vars(layer) if not n.startswith("_autopatch")} == set(vars(original))
        for name, value in vars(original).items():
            assert torch.utils._pytree.tree_structure(vars(layer)[name]) == torch.utils._pytree.tree_structure(value)
            for got, expected in zip(torch.utils._pytree.tree_leaves(vars(layer)[name]),
                                     torch.utils._pytree.tree_leaves(value)):
                assert torch.equal(got, expected) if isinstance(expected, torch.Tensor) else got == expected, name
    assert rebuilt.layers[1].entry_count == {"compressor": 2, "indexer": 2}  # 10 tokens, windows of 4
    assert all(isinstance(t, torch.Tensor) for t in leaves)
    assert 2 not in [c for c in torch.utils._pytree.tree_leaves(spec.context)  # no count in the structure
                     if type(c) is int and c != 128 and c != 4]

    class Reads(torch.nn.Module):  # what a step reads of the layers: keys, buffers, overlap, positions of windows
        def forward(self, past_key_values):
            layer = past_key_values.layers[1]
            first = layer.entry_count["compressor"] * layer.compress_rate
            return (layer.keys.sum() + layer.buffer_kv["indexer"].sum() + layer.overlap_gate["compressor"].sum()
                    + past_key_values.layers[0].buffer_kv["compressor"].sum(), torch.arange(first, first + 3))

    traced, other, run = ({"past_key_values": _deepseek_v4_prefill(b, p, seed)[1]}
                          for b, p, seed in ((2, 10, 1), (3, 13, 2), (4, 23, 3)))
    program = proving.export(Reads(), traced, other)
    with torch.no_grad():
        assert_same_outputs(program.module()(**copy.deepcopy(run)), Reads()(**copy.deepcopy(run)))
