"""transformers.moe.*: the 4.x mixture-of-experts blocks loop in Python over nonzero() of the experts hit, a
data-dependent guard for torch.export. Fails without the patch, exports with it, the program matches eager on
other sizes, and eager is unchanged. On 5.x the blocks export as they are and the patches are skipped. X-MOD's
4.x language adapters, chosen per sample the same way, are proven here too."""

import copy

import pytest
import torch
import transformers

import autopatch
import proving
from autopatch import registry, state
from autopatch.agent import Agent
from autopatch.errors import causes
from autopatch.models import builders
from conftest import needs_onnx, requires
from proving import Proof

TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=128, max_position_embeddings=256)
MOE_IDS = {name: f"transformers.moe.{name}"
           for name in ("mixtral", "minimax", "qwen2_moe", "qwen3_moe", "gpt_oss", "deepseek_v3", "dots1", "glm4_moe",
                        "qwen3_next", "longcat_flash")}
# DeepSeek-style routing (4 routed experts in one group, a shared expert), every layer sparse.
DEEPSEEK = dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                first_k_dense_replace=0, n_group=1, topk_group=1)
CONFIGS = {
    "mixtral": ("Mixtral", dict(num_local_experts=4, num_experts_per_tok=2)),
    "minimax": ("MiniMax", dict(num_local_experts=4, num_experts_per_tok=2,
                                layer_types=["full_attention", "full_attention"])),
    "qwen2_moe": ("Qwen2Moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                   shared_expert_intermediate_size=32, decoder_sparse_step=1)),
    "qwen3_moe": ("Qwen3Moe", dict(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                                   decoder_sparse_step=1, mlp_only_layers=[])),
    "gpt_oss": ("GptOss", dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=64,
                               layer_types=["sliding_attention", "full_attention"])),
    "deepseek_v3": ("DeepseekV3", dict(DEEPSEEK, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, head_dim=8,
                                       qk_nope_head_dim=8, v_head_dim=12, num_key_value_heads=4)),
    "dots1": ("Dots1", DEEPSEEK),
    "glm4_moe": ("Glm4Moe", DEEPSEEK),
    "qwen3_next": ("Qwen3Next", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                     shared_expert_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[],
                                     layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
                                     linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
                                     linear_num_value_heads=4)),
    # One MoE layer (num_layers=1; each has two attention sublayers), two of its experts "zero" (identity).
    "longcat_flash": ("LongcatFlash", dict(num_layers=1, num_key_value_heads=4, ffn_hidden_size=128, q_lora_rank=32,
                                           kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, head_dim=8,
                                           v_head_dim=12, moe_topk=2, n_routed_experts=4, zero_expert_num=2,
                                           expert_ffn_hidden_size=32)),
}
# Rows a model needs besides its MoE row (and the pytree family) to export a decode step at all on 4.57.
COMPANIONS = {"qwen3_next": ("transformers.qwen3_next.linear_attention_mask",)}
MOE_LAYERS = {"longcat_flash": 1}  # hits of the MoE patch per export; the others: one per hidden layer
# The failure (and so the patches) exists on transformers 4.x only, measured on 4.57.6; 5.23 exports these.
MODELS = [pytest.param(name, marks=requires("transformers<5")) for name in MOE_IDS]


def _build(name):
    prefix, extra = CONFIGS[name]
    config = getattr(transformers, f"{prefix}Config")(**{**TEXT, **extra})
    torch.manual_seed(0)
    return getattr(transformers, f"{prefix}ForCausalLM")(config).eval(), config


def _private_agent(ids=()):
    """The real entry points, the pytree patches (the decode step takes a DynamicCache), and ``ids``."""
    own = Agent(registry.EXPORT_ENTRY_POINTS, [s for s in registry.PATCHES if s.family == "pytree" or s.id in ids])
    own.enable("all")
    return own


def _decode_sets(model, config):
    traced = builders.decode_inputs(model, config, batch=2, past=5, seq=3)
    other = builders.decode_inputs(model, config, batch=3, past=7, seq=2, seed=1)
    third = builders.decode_inputs(model, config, batch=1, past=9, seq=4, seed=2)
    return traced, other, third


def moe_case(name):
    def build_case():
        model, config = _build(name)
        traced, other, third = _decode_sets(model, config)
        return model, traced, other, [other, third]  # batch, past and new tokens all differ from traced

    return Proof(f"{name}/decode", build_case, rows=(MOE_IDS[name],),
                 fails_with="Could not guard on data-dependent expression",
                 beside=("pytree", *COMPANIONS.get(name, ())))


@pytest.mark.parametrize("name", MODELS)
def test_export_fails_without_the_patch(make_agent, name):
    proving.fails_without(moe_case(name), make_agent)


@pytest.mark.parametrize("name", MODELS)
def test_exported_decode_step_matches_eager_at_other_sizes(make_agent, name):
    _, own = proving.exports_with(moe_case(name), make_agent)
    patch_id = MOE_IDS[name]
    assert autopatch.last_export_report()["patches"][patch_id] == MOE_LAYERS.get(name, TEXT["num_hidden_layers"])
    assert own.records[patch_id].state == state.APPLIED_LATE


def _moe_block(model, name):
    layer = model.model.layers[0]
    if name in ("mixtral", "minimax"):
        return layer.block_sparse_moe
    return layer.mlp.experts if name == "gpt_oss" else layer.mlp


@pytest.mark.parametrize("name", MODELS)
def test_eager_is_unchanged_and_the_dense_routing_computes_the_same(agent, name):
    model, config = _build(name)
    traced, _, _ = _decode_sets(model, config)
    with torch.no_grad():
        before = model(**copy.deepcopy(traced)).logits
    block = _moe_block(model, name)
    method = proving.row(MOE_IDS[name]).target.rpartition(".")[2]
    original = getattr(type(block), method)
    own = _private_agent([MOE_IDS[name]])
    try:
        assert getattr(type(block), method) is not original  # the router is in place...
        with torch.no_grad():
            after = model(**copy.deepcopy(traced)).logits
        assert torch.equal(after, before)  # ...and outside export it runs the original, bit for bit
    finally:
        own.disable()
    assert getattr(type(block), method) is original
    # The replacement itself, called directly, computes what the sparse loop computes (many tokens: every
    # expert is hit, some tokens pick the same pair).
    hidden = torch.randn(3, 11, config.hidden_size, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        spec = proving.row(MOE_IDS[name])
        replacement = spec.resolve_replacement()
        if name == "gpt_oss":
            scores, indices = model.model.layers[0].mlp.router(hidden)
            expected = block(hidden, router_indices=indices, routing_weights=scores)
            got = replacement(block, hidden, router_indices=indices, routing_weights=scores)
        elif spec.target.endswith(".moe"):  # DeepSeek-style: the patched method takes the router's choice
            topk_indices, topk_weights = (block.router if name == "longcat_flash" else block.gate)(hidden)
            tokens = hidden.view(-1, hidden.shape[-1])
            expected = block.moe(tokens, topk_indices, topk_weights)
            got = replacement(block, tokens, topk_indices, topk_weights)
        else:
            expected = block(hidden)
            got = replacement(block, hidden)
    if isinstance(expected, tuple):
        torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)  # router logits: the same op
        got, expected = got[0], expected[0]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


# --- models built from the package's tiny catalogue (autopatch.models.tiny, as the sweep builds them) ---------

#: (model type, row, transformers versions): MoE blocks the sweep found stopping a decode step, built tiny from
#: their own config class (router settings, expert counts and top-k as the class defaults them, sizes shrunk).
CATALOGUE = [
    pytest.param("dbrx", "transformers.moe.dbrx_v4", marks=requires("transformers>=4.56,<5"), id="dbrx-4.x"),
    pytest.param("dbrx", "transformers.moe.dbrx", marks=requires("transformers>=5.23"), id="dbrx-5.x"),
    pytest.param("longcat_flash", "transformers.moe.longcat_flash_experts", marks=requires("transformers>=5"),
                 id="longcat_flash-5.x"),
    *(pytest.param(model_type, f"transformers.moe.{model_type}", marks=requires("transformers>=4.56,<5"),
                   id=f"{model_type}-4.x") for model_type in ("deepseek_v2", "ernie4_5_moe", "hunyuan_v1_moe", "phimoe")),
    pytest.param("aria_text", "transformers.moe.aria", marks=requires("transformers>=4.56,<5"), id="aria_text-4.x"),
]


def catalogue_case(model_type, row, step="decode"):
    from autopatch.models import tiny

    def build_case():
        arch = tiny.architecture(model_type, "causal")
        model = tiny.build(arch)
        traced, other, third = (tiny.inputs(model, arch, step, k) for k in range(3))
        return model, traced, other, [other, third]  # batch, past and new tokens all differ from traced

    return Proof(f"{model_type}/{step}", build_case, rows=(row,), fails_with="(from|on) data-dependent expression")


@pytest.mark.parametrize("model_type, row", CATALOGUE)
def test_catalogue_moe_fails_without_its_row(make_agent, model_type, row):
    proving.fails_without(catalogue_case(model_type, row), make_agent)


@pytest.mark.parametrize("step", ["prefill", "decode"])
@pytest.mark.parametrize("model_type, row", CATALOGUE)
def test_catalogue_moe_exports_and_matches_eager_at_other_sizes(make_agent, model_type, row, step):
    proving.exports_with(catalogue_case(model_type, row, step), make_agent)


# --- 5.x: the experts' grouped matmul through torch.onnx.export ------------------------------------------------

ONNX_ROW = "transformers.moe.onnx_grouped_mm"
# 5.x MoE models whose experts call transformers::grouped_mm_fallback on CPU (gate-up and down: two per layer).
ONNX_MODELS = [pytest.param(name, marks=requires("transformers>=5")) for name in ("mixtral", "qwen3_moe", "deepseek_v3")]


def _every_row_but(make_agent, row):
    return make_agent(selection=f"all,-{row}")


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_onnx_export_of_5x_experts_fails_without_the_row(make_agent, name):
    needs_onnx()
    model, config = _build(name)
    traced, other, _ = _decode_sets(model, config)
    _every_row_but(make_agent, ONNX_ROW)
    with pytest.raises(Exception) as failure:
        proving.export_onnx(model, traced, other)
    chain = [str(error) for error in causes(failure.value)]
    assert any("No ONNX function found" in text and "grouped_mm_fallback" in text for text in chain), chain[-1][:300]


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_onnx_program_of_5x_experts_matches_eager_at_other_sizes(make_agent, name):
    needs_onnx()
    model, config = _build(name)
    traced, other, third = _decode_sets(model, config)
    own = make_agent()
    program = proving.export_onnx(model, traced, other)
    assert autopatch.last_export_report()["patches"][ONNX_ROW] == 2 * config.num_hidden_layers
    assert own.records[ONNX_ROW].state in (state.APPLIED, state.APPLIED_LATE)
    for inputs in (other, third):  # batch, past and new tokens all differ from the traced ones
        with torch.no_grad():
            expected = model(**copy.deepcopy(inputs))
        got = program(**copy.deepcopy(inputs))  # onnxruntime; every output leaf, in pytree order
        proving.assert_onnx_matches(got, (expected.logits, expected.past_key_values), rtol=1e-4, atol=1e-5)


class _GroupedMatmul(torch.nn.Module):
    """transformers' operator on its own, with the routing given as an input: empty experts and sentinel rows
    past the last expert's end, which a tiny model's random routing may never produce."""

    def __init__(self, experts=3, k=8, n=5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(experts, k, n, generator=torch.Generator().manual_seed(0)))

    def forward(self, rows, offs):
        return torch.ops.transformers.grouped_mm_fallback(rows, self.weight, offs)


@pytest.mark.parametrize("offs", [[2, 2, 6], [0, 3, 7], [1, 4, 4], [0, 0, 0], [3, 5, 9]],
                         ids=["empty-middle", "empty-first", "sentinel-tail", "all-sentinels", "every-expert"])
@requires("transformers>=5")
def test_translation_of_the_operator_matches_it_for_every_routing(make_agent, offs):
    needs_onnx()
    import transformers.integrations.moe  # noqa: F401 - defines the operator

    module = _GroupedMatmul()
    rows = torch.export.Dim("rows", min=2)
    make_agent()
    with torch.no_grad():
        program = torch.onnx.export(module, (torch.randn(6, 8), torch.tensor([2, 4, 6])), dynamo=True,
                                    dynamic_shapes=({0: rows}, None), verbose=False)
    assert autopatch.last_export_report()["patches"][ONNX_ROW] == 1
    tokens = torch.randn(9, 8, generator=torch.Generator().manual_seed(1))  # 9 rows: traced with 6
    ends = torch.tensor(offs)
    with torch.no_grad():
        expected = module(tokens, ends)
    (got,) = program(tokens, ends)
    torch.testing.assert_close(torch.as_tensor(got), expected, rtol=1e-5, atol=1e-5)


@requires("transformers>=5")
def test_the_translation_is_registered_only_inside_an_export(make_agent):
    needs_onnx()
    import transformers.integrations.moe  # noqa: F401 - defines the operator
    from torch.onnx._internal.exporter._registration import ONNXRegistry

    make_agent()
    target = torch.ops.transformers.grouped_mm_fallback.default
    assert not ONNXRegistry.from_torchlib().is_registered(target)  # a registry built outside export: torch's own


# --- 4.x X-MOD: language adapters chosen per sample ---------------------------------------------------------------

def xmod_case(step):
    """The catalogue's X-MOD ``step`` with three languages (the catalogue keeps the config's one), each set's
    samples in languages that are not in runs (0, 2, -1...: the 4.x split makes a run of each), one given as -1
    (the list index wraps it to the last language); the caches as the catalogue builds them, the masks of the sets
    it is run at left-padded."""
    from autopatch.models import tiny

    def build_case():
        arch = tiny.architecture("xmod", "causal")
        klass = tiny.model_class(arch)
        config = tiny._config_for(klass, tiny.tiny_config("xmod"), "causal")  # tiny.build's, with more languages
        config.languages = ["en_XX", "de_DE", "fr_XX"]
        torch.manual_seed(0)
        model = klass(config).eval()
        tiny._no_zero_matrices(model)  # the adapters' outputs differ from language to language
        model.set_default_language("en_XX")  # the catalogue's decode sets are built on an eager prefill without ids
        sets = []
        for k in range(3):
            inputs = tiny.inputs(model, arch, step, k)
            batch = inputs["input_ids"].shape[0]
            inputs["lang_ids"] = torch.tensor([(0, 2, -1, 1)[(row + k) % 4] for row in range(batch)])
            if k:  # the sets it is run at left-padded (the decode step's past)
                mask = inputs["attention_mask"].clone()
                room = mask.shape[1] - (inputs["input_ids"].shape[1] if step == "decode" else 0)
                for row, pads in enumerate(builders.left_pads(batch, room, k)):
                    mask[row, :pads] = 0
                inputs["attention_mask"] = mask
            sets.append(inputs)
        return model, sets[0], sets[1], sets[1:]

    return Proof(f"xmod/{step}", build_case, rows=("transformers.moe.xmod_lang_adapter",),
                 fails_with="data-dependent expression", beside=("all",))


@requires("transformers>=4.56,<5")
@pytest.mark.parametrize("step", ["prefill", "decode"])
def test_xmod_lang_adapter_fails_without_the_row_and_matches_eager_with_it(make_agent, step):
    proving.prove(xmod_case(step), make_agent)


@requires("transformers>=4.56,<5")
def test_xmod_lang_adapter_is_the_originals_exactly():
    """The replacement against 4.x lang_adapter in eager code: runs of one language and samples alone, negative ids
    (wrapped), float ids (the 4.x default is a float tensor; int() truncates them). Within one float32 rounding
    step, not bit for bit: the replacement runs each adapter on the whole batch, upstream on each run's rows, and
    with two threads the matrix product splits its work by row count (1.2e-7 apart measured; equal on one thread).
    A sample given another language's adapter is off by far more (the last check)."""
    from transformers.models.xmod import modeling_xmod

    from autopatch.areas.moe.experts import xmod_lang_adapter

    model, _, _, _ = xmod_case("prefill").build()
    output = next(m for m in model.modules() if isinstance(m, modeling_xmod.XmodOutput))
    generator = torch.Generator().manual_seed(0)
    for ids in ([0, 2, -1, 1], [1, 1, 0], [2], [-3.0, 0.0, 2.0, 1.7], [0, 0, 0, 0, 1]):
        ids = torch.tensor(ids)
        states = torch.randn(len(ids), 5, model.config.hidden_size, generator=generator)
        with torch.no_grad():
            expected = modeling_xmod.XmodOutput.lang_adapter(output, ids, states.clone())
            torch.testing.assert_close(xmod_lang_adapter(output, ids, states.clone()), expected, rtol=0, atol=1e-6,
                                       msg=lambda message: f"lang ids {ids.tolist()}: {message}")
    with torch.no_grad():  # the languages' adapters differ: a sample given another one's would show
        other = modeling_xmod.XmodOutput.lang_adapter(output, ids[:1], states[-1:])[0]
        assert (expected[-1] - other).abs().max() > 1e-3
