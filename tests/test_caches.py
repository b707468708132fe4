"""Cache registrations across architectures: each exports with its patch and matches eager on other sizes,
and fails without it. Decode steps are traced at one set of sizes and run at another (batch, past, sequence)."""

import copy
import inspect

import pytest
import torch
import transformers
from packaging.version import Version

import autopatch
import proving
import zoo
from autopatch import registry
from autopatch.rewrite import runtime
from conftest import requires
from proving import assert_same_outputs

TRANSFORMERS_5 = Version(transformers.__version__) >= Version("5")
# gpt_oss on 4.57 fails in its MoE routing (data-dependent expert selection), not in its cache: issue 5. Deselected
# there by its mark, so the summary lists it.
DECODERS = [pytest.param(name, marks=requires("transformers>=5")) if name == "gpt_oss" else name
            for name in zoo.DECODERS]


@pytest.fixture
def pytree_patches(make_agent):
    return make_agent(registry.PATCHES, "pytree")


def _export_and_compare(model, traced, other_a, other_b, run):
    program = proving.export(model, traced, other_a)
    with torch.no_grad():
        expected = model(**copy.deepcopy(other_b))
        got = program.module()(**copy.deepcopy(other_b))
    assert_same_outputs(got, expected)
    return program


@pytest.mark.parametrize("name", DECODERS)
def test_decoder_decode_step(pytree_patches, name):
    model, config = zoo.build(name)
    # Past lengths 6, 8, 9 all pass gemma3/gpt_oss's sliding window of 4; the run uses a 1-token step.
    traced = zoo.decode_inputs(model, config, batch=2, past=6, seq=3, seed=1)
    other = zoo.decode_inputs(model, config, batch=3, past=8, seq=2, seed=2)
    run = zoo.decode_inputs(model, config, batch=1, past=9, seq=1, seed=3)
    _export_and_compare(model, traced, other, run, run)
    assert pytree_patches.records["pytree.dynamic_cache"].hits > 0


@pytest.mark.parametrize("name", list(zoo.SEQ2SEQ))
def test_encoder_decoder_decode_step(pytree_patches, name):
    model, config = zoo.build_seq2seq(name)
    traced = zoo.seq2seq_decode_inputs(model, config, batch=2, source=5, past=3, seq=2, seed=1)
    other = zoo.seq2seq_decode_inputs(model, config, batch=3, source=7, past=4, seq=3, seed=2)
    run = zoo.seq2seq_decode_inputs(model, config, batch=1, source=9, past=6, seq=1, seed=3)
    _export_and_compare(model, traced, other, run, run)
    assert pytree_patches.records["pytree.encoder_decoder_cache"].hits > 0


def _static_inputs(model, config, batch, past, seq, seed):
    g = torch.Generator().manual_seed(seed)
    cache_kwargs = {"config": config, "max_cache_len": 32}
    if "max_batch_size" in inspect.signature(transformers.StaticCache.__init__).parameters:
        cache_kwargs["max_batch_size"] = batch
    cache = transformers.StaticCache(**cache_kwargs)
    with torch.no_grad():
        model(input_ids=torch.randint(0, 128, (batch, past), generator=g), past_key_values=cache, use_cache=True,
              cache_position=torch.arange(past))
    inputs = {"input_ids": torch.randint(0, 128, (batch, seq), generator=g), "past_key_values": cache}
    if "cache_position" in inspect.signature(model.forward).parameters:
        inputs["cache_position"] = torch.arange(past, past + seq)
    return inputs


def test_static_cache_decode_step(pytree_patches):
    model, config = zoo.build("llama")
    traced = _static_inputs(model, config, batch=2, past=5, seq=2, seed=1)
    other = _static_inputs(model, config, batch=3, past=6, seq=3, seed=2)
    run = _static_inputs(model, config, batch=1, past=7, seq=1, seed=3)
    shapes = autopatch.guess_dynamic_shapes(traced, other)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)
        torch.testing.assert_close(program.module()(**copy.deepcopy(run)).logits, model(**copy.deepcopy(run)).logits)
    assert pytree_patches.records["pytree.static_cache"].hits > 0


@pytest.mark.parametrize("missing", ["pytree.dynamic_cache", "pytree.encoder_decoder_cache", "pytree.static_cache"])
def test_each_cache_fails_without_its_patch(pytree_patches, missing):
    if missing == "pytree.static_cache":
        model, config = zoo.build("llama")
        traced = _static_inputs(model, config, batch=2, past=5, seq=2, seed=1)
    elif missing == "pytree.encoder_decoder_cache":
        model, config = zoo.build_seq2seq("bart")
        traced = zoo.seq2seq_decode_inputs(model, config, batch=2, source=5, past=3, seq=2, seed=1)
    else:
        model, config = zoo.build("gemma3")
        traced = zoo.decode_inputs(model, config, batch=2, past=6, seq=3, seed=1)
    pytree_patches.enable(f"pytree,-{missing}")
    with torch.no_grad(), pytest.raises(Exception, match="Cache"):
        torch.export.export(model, (), kwargs=traced)


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


#: 4.x and 5.0-5.4 keep state-space states in model-local caches (pytree.model_cache.<model>), stepped with a
#: cache_position; 5.5 on in DynamicCache's linear-attention layers (pytree.dynamic_cache).
LOCAL_CACHES = Version(transformers.__version__) < Version("5.5")
MAMBA = dict(vocab_size=64, hidden_size=32, state_size=4, num_hidden_layers=2, conv_kernel=4, expand=2)
JAMBA = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=100, num_experts=1,
             mamba_d_state=4, mamba_expand=2, use_mamba_kernels=False)
# Model-local MambaCache and FalconMambaCache (4.57, 5.3), or DynamicCache (5.12, 5.23). Jamba's model-local cache
# is a hybrid one: test_hybrid_decode_step.
SSM = [*(pytest.param(name, "pytree.dynamic_cache", marks=requires("transformers>=5.5"))
         for name in ("mamba", "falcon_mamba", "jamba")),
       *(pytest.param(name, f"pytree.model_cache.{name}", marks=requires("transformers<5.5"))
         for name in ("mamba", "falcon_mamba"))]
#: FalconMamba (4.57, 5.12) registers Parameters as non-persistent buffers: ep.module() needs this torch row.
SSM_ALSO = "torch.export.parameter_buffers"


def _ssm_inputs(model, batch, past, seed, position=None):
    """A one-token decode step after an eager prefill of ``past`` tokens. The cache goes under the name the
    model's output gives it (Mamba's and Mamba2's cache_params, the others' past_key_values); a model-local cache
    also takes the step's cache_position (``position``, by default ``past``), as generate() passes it."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        out = model(input_ids=torch.randint(0, 64, (batch, past), generator=g), use_cache=True)
    name = "cache_params" if hasattr(out, "cache_params") else "past_key_values"
    inputs = {"input_ids": torch.randint(0, 64, (batch, 1), generator=g), name: getattr(out, name)}
    if LOCAL_CACHES:
        position = past if position is None else position
        inputs["cache_position"] = torch.arange(position, position + 1)
    return inputs


@pytest.mark.parametrize("name,patch_id", SSM)
def test_state_space_decode_step_with_and_without_its_patch(pytree_patches, name, patch_id):
    config_cls, model_cls, kwargs = {
        "mamba": (transformers.MambaConfig, transformers.MambaForCausalLM, MAMBA),
        "falcon_mamba": (transformers.FalconMambaConfig, transformers.FalconMambaForCausalLM, MAMBA),
        "jamba": (transformers.JambaConfig, transformers.JambaForCausalLM, JAMBA)}[name]
    pytree_patches.enable(f"pytree,{SSM_ALSO}")
    torch.manual_seed(0)
    model = model_cls(config_cls(**kwargs)).eval()
    traced, other, run = (_ssm_inputs(model, b, p, s) for b, p, s in ((2, 5, 1), (3, 6, 2), (1, 7, 3)))
    shapes = autopatch.guess_dynamic_shapes(traced, other)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)
        assert_same_outputs(program.module()(**copy.deepcopy(run)), model(**copy.deepcopy(run)))
        assert pytree_patches.records[patch_id].hits > 0
        pytree_patches.enable(f"pytree,{SSM_ALSO},-{patch_id}")
        with pytest.raises(Exception, match="Cache"):
            torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)


def test_a_dynamic_cache_subclass_defined_after_activation_exports_with_its_own_state(pytree_patches):
    """Pytree registration is per exact class: a subclass (a model's own, like 5.x MiniMaxCache, or a user's) is
    registered when it is defined, and its own attributes travel: tensors as inputs, the rest as structure."""

    class ScaledCache(transformers.DynamicCache):
        def __init__(self, scale):
            super().__init__()
            self.scale = torch.full((1,), float(scale))  # a tensor of its own: an export input
            self.label = "scaled"  # structure: kept in the context

    assert ScaledCache in torch.utils._pytree.SUPPORTED_NODES
    model, config = zoo.build("llama")

    def inputs(batch, past, seq, seed, scale):
        plain = zoo.decode_inputs(model, config, batch, past, seq, seed)
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
    shapes = autopatch.guess_dynamic_shapes(traced, other)
    with torch.no_grad():
        program = torch.export.export(wrapper, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)
        got_logits, got_cache = program.module()(**copy.deepcopy(run))
        expected_logits, expected_cache = wrapper(**copy.deepcopy(run))
    torch.testing.assert_close(got_logits, expected_logits)
    assert type(got_cache) is ScaledCache and got_cache.get_seq_length() == 10
    pytree_patches.disable()
    assert ScaledCache not in torch.utils._pytree.SUPPORTED_NODES  # undone with the rest
    assert "__init_subclass__" not in vars(transformers.DynamicCache)


def test_output_containers_need_no_patch(agent):
    """transformers registers ModelOutput subclasses itself on the versions we support: with no patch at all, an
    encoder returns its output container from the program, fields and values intact, at other sizes."""
    config = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    assert not agent.active
    ids = torch.randint(0, 128, (2, 7))
    dyn = torch.export.Dim.DYNAMIC
    with torch.no_grad():
        program = torch.export.export(model, (ids,), dynamic_shapes=({0: dyn, 1: dyn},))
        other = torch.randint(0, 128, (3, 11))
        got, expected = program.module()(other), model(other)
    assert type(got) is type(expected) and list(got.keys()) == list(expected.keys())
    for key in expected.keys():
        torch.testing.assert_close(got[key], expected[key])


HYBRID_COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2)
MAMBA2_MIXER = dict(mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=4,
                    mamba_expand=2, mamba_chunk_size=8)
HYBRIDS = {  # config class, model class, extra config
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM",
                   dict(head_dim=8, layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
                        linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
                        linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                        shared_expert_intermediate_size=16, mlp_only_layers=[0, 1])),
    "bamba": ("BambaConfig", "BambaForCausalLM", dict(attn_layer_indices=[1], **MAMBA2_MIXER)),
    "granitemoehybrid": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM",
                         dict(layer_types=["mamba", "attention"], num_local_experts=0, shared_intermediate_size=64,
                              **MAMBA2_MIXER)),
    # Layer 0 mamba with a dense MLP, layer 1 attention with a 4-expert sparse block.
    "jamba": ("JambaConfig", "JambaForCausalLM",
              dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                   num_experts=4, num_experts_per_tok=2, mamba_d_state=4, mamba_expand=2, use_mamba_kernels=False)),
    # Attention and mamba side by side in every layer.
    "falcon_h1": ("FalconH1Config", "FalconH1ForCausalLM", dict(mamba_d_ssm=64, **MAMBA2_MIXER)),
}
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


def _hybrid(name):
    config_name, model_name, extra = HYBRIDS[name]
    torch.manual_seed(0)
    return getattr(transformers, model_name)(getattr(transformers, config_name)(**HYBRID_COMMON, **extra)).eval()


def _hybrid_decode_inputs(model, batch, past, seed, padded=False, seq=1):
    """A decode step of ``seq`` new tokens after an eager prefill; ``padded``: the first row's prompt is
    left-padded."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, past, dtype=torch.long)
    if padded:
        mask[0, :2] = 0
    prefill = {"input_ids": torch.randint(0, 64, (batch, past), generator=g), "attention_mask": mask, "use_cache": True}
    module = inspect.getmodule(type(model))
    if LOCAL_CACHES and hasattr(module, "FalconHybridMambaAttentionDynamicCache"):
        cache = module.FalconHybridMambaAttentionDynamicCache(model.config, batch, torch.float32, devices=["cpu"] * 2)
    elif LOCAL_CACHES and hasattr(module, "HybridMambaAttentionDynamicCache"):
        cache = module.HybridMambaAttentionDynamicCache(model.config, batch, torch.float32, "cpu")
    else:
        cache = None  # the model makes its own
    if cache is not None:  # Bamba-style models with a local cache use only a cache they are given
        prefill.update(past_key_values=cache, cache_position=torch.arange(past))
    with torch.no_grad():
        out = model(**prefill)
    inputs = {"input_ids": torch.randint(0, 64, (batch, seq), generator=g),
              "attention_mask": torch.cat([mask, torch.ones(batch, seq, dtype=torch.long)], dim=1),
              "past_key_values": out.past_key_values}
    if LOCAL_CACHES:  # as generate() passes it (5.5's forward on has no such argument)
        inputs["cache_position"] = torch.arange(past, past + seq)
    return inputs


@pytest.mark.parametrize("name, cache_patch", [
    *(pytest.param(name, "pytree.dynamic_cache", marks=requires("transformers>=5.5")) for name in HYBRIDS),
    *(pytest.param(name, f"pytree.model_cache.{name}", marks=requires("transformers<5.5")) for name in HYBRIDS)])
def test_hybrid_decode_step(make_agent, name, cache_patch):
    """Linear-attention or mamba2 layers next to full attention. 5.5 on keep them in DynamicCache; 4.57 and 5.3 in
    the model's own cache class, and need the model's transformers rows too (its mask and, for Bamba-style mixers,
    the decode test). Each row is needed: without any one of them the same export fails."""
    model = _hybrid(name)
    traced, other = _hybrid_decode_inputs(model, 2, 5, 1), _hybrid_decode_inputs(model, 3, 6, 2)

    def export():
        with torch.no_grad():
            return torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)

    needed = {cache_patch, *(HYBRID_PATCHES_LOCAL[name] if LOCAL_CACHES else [])}
    pytree = [s for s in registry.PATCHES if s.family == "pytree" and s.id not in needed]
    own = make_agent(pytree + [s for s in registry.PATCHES if s.id in needed])
    shapes = autopatch.guess_dynamic_shapes(traced, other)  # the cache flattened as registered
    program = export()
    assert set(autopatch.last_export_report()["patches"]) >= needed - {cache_patch}
    for batch, past, seed, padded in ((1, 7, 3, False), (4, 9, 4, True)):
        run = _hybrid_decode_inputs(model, batch, past, seed, padded)
        with torch.no_grad():
            got, expected = program.module()(**copy.deepcopy(run)), model(**copy.deepcopy(run))
        assert_same_outputs(got, expected)
    if any(i.endswith("decode_position") for i in needed):  # a decode step at position 0 contradicts its cache:
        wrong = {**copy.deepcopy(traced), "cache_position": torch.tensor([0])}  # refused, not miscomputed
        with pytest.raises(Exception, match="Runtime assertion failed"):
            program.module()(**wrong)
    own.disable()
    for missing in sorted(needed):
        own = make_agent(pytree + [s for s in registry.PATCHES if s.id in needed - {missing}])
        # Without a rewrite of FalconH1's cache update, len() fixes the batch: a constraint violation.
        error = {cache_patch: "Cache", "transformers.falcon_h1.cache_update": "Constraints violated"}
        with pytest.raises(Exception, match=error.get(missing, "data-dependent")):
            export()
        own.disable()


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
    model = _hybrid(name)
    traced = _hybrid_decode_inputs(model, 2, 5, 1, seq=3)
    other = _hybrid_decode_inputs(model, 3, 7, 2, seq=2)  # every size differs, the mask's length too
    make_agent()
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced),
                                      dynamic_shapes=autopatch.guess_dynamic_shapes(traced, other))
        assert autopatch.last_export_report()["patches"][row] > 0
        several = _hybrid_decode_inputs(model, 4, 7, 3, seq=4)
        assert_same_outputs(program.module()(**copy.deepcopy(several)), model(**copy.deepcopy(several)))
        one = _hybrid_decode_inputs(model, 1, 7, 4)
        with pytest.raises(RuntimeError, match="traced with several new tokens and a cache"):
            program.module()(**copy.deepcopy(one))
    # The same rewrite with the length compared as written: the program takes the one-token step and answers wrong.
    monkeypatch.setattr(runtime, "is_one", lambda length, why: length == 1)
    with torch.no_grad():
        unchecked = torch.export.export(model, (), kwargs=copy.deepcopy(traced),
                                        dynamic_shapes=autopatch.guess_dynamic_shapes(traced, other))
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
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(transformers.MambaConfig(**MAMBA)).eval()
    with torch.no_grad():
        cache = model(input_ids=torch.randint(0, 64, (2, 5)), use_cache=True).cache_params
    layer = cache.layers[0]
    assert isinstance(layer.conv_states, dict)
    conv, recurrent = layer.conv_states[0], layer.recurrent_states[0]
    layer.conv_states, layer.recurrent_states = conv, recurrent  # the 5.12 layout: one tensor per kind
    layer.is_conv_states_initialized = layer.is_recurrent_states_initialized = layer.has_previous_state = True
    layer.conv_kernel_size = conv.shape[-1]
    leaves, spec = torch.utils._pytree.tree_flatten(cache)
    assert any(leaf is conv for leaf in leaves) and any(leaf is recurrent for leaf in leaves)
    rebuilt = torch.utils._pytree.tree_unflatten(leaves, spec).layers[0]
    assert rebuilt.conv_states is conv and rebuilt.recurrent_states is recurrent
    assert rebuilt.has_previous_state is True and rebuilt.conv_kernel_size == conv.shape[-1]
    assert rebuilt.max_batch_size == 2


# Mamba2 and LFM2 with model-local caches (4.57, 5.3): their one-token path is chosen by cache_position[0] > 0 alone.
ONE_TOKEN_DECODERS = {
    "mamba2": lambda: transformers.Mamba2ForCausalLM(transformers.Mamba2Config(
        vocab_size=64, hidden_size=32, state_size=8, num_heads=4, head_dim=16, expand=2, n_groups=1,
        num_hidden_layers=2, conv_kernel=4, chunk_size=8)),
    # Layer 0 a short convolution, layer 1 attention.
    "lfm2": lambda: transformers.Lfm2ForCausalLM(transformers.Lfm2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, layer_types=["conv", "full_attention"], conv_L_cache=3)),
}


@requires("transformers<5.5")
@pytest.mark.parametrize("name", ONE_TOKEN_DECODERS)
def test_one_token_decode_step_needs_its_decode_by_length_row(make_agent, name):
    torch.manual_seed(0)
    model = ONE_TOKEN_DECODERS[name]().eval()
    traced, other = _ssm_inputs(model, 2, 5, 1), _ssm_inputs(model, 3, 6, 2)
    cache_row, mixer_row = f"pytree.model_cache.{name}", f"transformers.{name}.decode_by_length"
    pytree = [s for s in registry.PATCHES if s.family == "pytree"]

    def export():
        with torch.no_grad():
            return torch.export.export(model, (), kwargs=copy.deepcopy(traced),
                                       dynamic_shapes=autopatch.guess_dynamic_shapes(traced, other))

    own = make_agent(pytree)
    with pytest.raises(Exception, match="data-dependent"):
        export()
    own.disable()
    own = make_agent(pytree + [s for s in registry.PATCHES if s.id == mixer_row])
    program = export()
    assert autopatch.last_export_report()["patches"][mixer_row] > 0
    for batch, past, seed in ((1, 7, 3), (4, 9, 4)):
        run = _ssm_inputs(model, batch, past, seed)
        with torch.no_grad():
            assert_same_outputs(program.module()(**copy.deepcopy(run)), model(**copy.deepcopy(run)))
    # One token at position 0 would take the prefill path in eager: the program refuses it, it does not miscompute.
    with pytest.raises(Exception, match="Runtime assertion failed"):
        program.module()(**_ssm_inputs(model, 2, 5, 5, position=0))
    own.disable()
    make_agent([s for s in pytree if s.id != cache_row] + [s for s in registry.PATCHES if s.id == mixer_row])
    with pytest.raises(Exception, match="Unsupported input type"):  # the cache row is needed too
        export()


@requires("transformers<5")
@pytest.mark.parametrize("name", list(zoo.SEQ2SEQ))
def test_decoder_step_given_encoder_outputs(make_agent, name):
    """A seq2seq decode step fed as runtimes feed it: the encoder's output as a BaseModelOutput, with the cache.
    On 4.x that output type has no key paths: the export stops without the row and matches eager with it, at
    other batch, source, past and step lengths; every output leaf (logits, every cache state) compared."""
    model, config = zoo.build_seq2seq(name)

    def step(batch, source, past, seq, seed):
        inputs = zoo.seq2seq_decode_inputs(model, config, batch=batch, source=source, past=past, seq=seq, seed=seed)
        encoder_inputs = {k: inputs.pop(k) for k in ("input_ids", "input_features") if k in inputs}
        with torch.no_grad():
            hidden = model.get_encoder()(**encoder_inputs).last_hidden_state
        inputs["encoder_outputs"] = transformers.modeling_outputs.BaseModelOutput(last_hidden_state=hidden)
        return inputs

    traced, other, run = step(2, 5, 3, 2, 1), step(3, 7, 4, 3, 2), step(1, 9, 6, 1, 3)
    make_agent(registry.PATCHES, "pytree,-pytree.model_output_keys")
    shapes = autopatch.guess_dynamic_shapes(traced, other)  # with the cache registered: it lays the cache out
    with torch.no_grad(), pytest.raises(ValueError, match="flatten_with_keys_fn"):
        torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)
    agent = make_agent(registry.PATCHES, "pytree")
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)
        expected = model(**copy.deepcopy(run))
        got = program.module()(**copy.deepcopy(run))
    got_leaves, got_spec = torch.utils._pytree.tree_flatten(got)
    expected_leaves, expected_spec = torch.utils._pytree.tree_flatten(expected)
    assert got_spec == expected_spec
    for g, e in zip(got_leaves, expected_leaves):
        torch.testing.assert_close(g, e)
    assert agent.records["pytree.model_output_keys"].hits > 0


@requires("transformers>=5.23")
def test_static_cache_with_sliding_layers_is_exact_or_refused(pytree_patches, monkeypatch):
    """Gemma 3's own 5:1 pattern in a StaticCache: 5.x's static sliding layer branches on a Python int count
    (`cumulative_length_int`: is its window full?), a constant of any program. It travels in the context, so the
    program runs exactly at the traced count (other batches, the same step length) and refuses any other count
    with torch's input-spec check: never the traced count's branch applied to another."""
    config = transformers.Gemma3TextConfig(**{**zoo.COMMON, "num_hidden_layers": 6, "head_dim": 16,
                                              "sliding_window": 8})
    torch.manual_seed(0)
    model = transformers.Gemma3ForCausalLM(config).eval()
    traced, other = _static_inputs(model, config, 2, 5, 2, 1), _static_inputs(model, config, 3, 5, 2, 2)
    shapes = autopatch.guess_dynamic_shapes(traced, other)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)
        for batch in (1, 4):
            run = _static_inputs(model, config, batch, 5, 2, batch)
            torch.testing.assert_close(program.module()(**copy.deepcopy(run)).logits,
                                       model(**copy.deepcopy(run)).logits)
        elsewhere = _static_inputs(model, config, 2, 9, 2, 3)  # past the window: the other branch
        with pytest.raises(ValueError, match="Trying to flatten user inputs with exported input tree spec"):
            program.module()(**copy.deepcopy(elsewhere))
    # Without the count in the context, the rebuilt layers start from 0 and take the wrong branch: wrong numbers
    # at the traced count already, silently.
    from autopatch.areas.pytree import caches as pytree_caches

    monkeypatch.setattr(pytree_caches, "INT_COUNTERS", ())
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=copy.deepcopy(traced), dynamic_shapes=shapes)
        run = _static_inputs(model, config, 2, 5, 2, 3)
        wrong = (program.module()(**copy.deepcopy(run)).logits - model(**copy.deepcopy(run)).logits).abs().max()
    assert wrong > 1e-2
