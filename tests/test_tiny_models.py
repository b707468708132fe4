"""autopatch.models.tiny, the sweep's tiny-model factory, on architectures its predecessor (catalogue.shrink_config)
failed to build: each builds within the parameter budget, its vocabulary is above every special token id of its
config tree, its per-layer patterns keep every kind of layer the full model has, eager runs on input set 0 of
each step, and the three input sets differ in batch and sequence."""

import pytest
import torch
import transformers

from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

from autopatch.models import builders, tiny
from conftest import requires

TF4 = int(transformers.__version__.split(".")[0]) < 5

# (kind, model type): what each one used to fail on
REPRESENTATIVES = [
    ("causal", "phi3"),  # vocab shrunk below its pad id
    ("causal", "deepseek_v3"),  # MLA head dims shrunk inconsistently
    ("causal", "gptj"),  # rotary_dim larger than the shrunk head
    ("causal", "mamba"),  # expand / intermediate / time-step rank
    ("causal", "jamba"),  # hybrid: attention every 8 layers from the 5th
    ("causal", "longcat_flash"),  # rotary embedding sized by head_dim, which is the MLA rope dim
    ("causal", "dbrx"),  # default attention config incomplete (rope_theta, clip_qkv): per-model overrides
    ("causal", "mllama"),  # 4.x: the default text config's rope_scaling is None, which the model indexes
    ("vlm", "mllama"),
    ("causal", "phi4_multimodal"),  # 4.x: the default vision_config is None, which the model reads
    ("causal", "hunyuan_v1_moe"),  # its default config has one expert: a tiny mixture instead
    ("vlm", "pix2struct"),  # 4.x: its text config's initializer_range comes from the parent, lost by a rebuild
    ("seq2seq", "encoder-decoder"),  # transformers 4: no default sub-configs
    ("vlm", "gemma3"),  # vision tower and token count left full size
    ("vlm", "qwen2_vl"),  # flattened patches and (t, h, w) grids; M-RoPE sections for the tiny head
    ("vlm", "llava_next"),  # tiled images: grid pinpoints shrunk like the tower's image size
    ("speech", "whisper"),  # pad / decoder-start ids above the shrunk vocab
    ("encoder", "distilbert"),  # a masked-LM encoder (BERT itself is in the causal mapping too)
]


def _arch(kind, model_type):
    arch = tiny.architecture(model_type, kind)
    if arch is None:
        pytest.skip(f"{model_type} is not a {kind} architecture in this transformers")
    try:
        tiny.model_class(arch)
    except tiny.BuildError as exc:
        pytest.skip(str(exc))
    return arch


def _default(model_type):
    return tiny.default_config(model_type)


def _kinds_of_layers(config) -> dict:
    """Each per-layer pattern of every config of the tree, as the set of kinds it holds."""
    return {(type(node).__name__, name): set(values)
            for node in tiny._tree(config) for name, values in builders.layer_patterns(node).items()}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("kind,model_type", REPRESENTATIVES)
def test_builds_tiny_with_consistent_config_and_runs_eager(kind, model_type):
    arch = _arch(kind, model_type)
    model = tiny.build(arch)
    assert 0 < tiny.params(model) <= tiny.PARAMS_BUDGET
    config = model.config
    # the vocabulary holds every special token id of the whole tree
    for node in tiny._tree(config):
        size = vars(node).get("vocab_size")
        if isinstance(size, int):
            assert size > max(tiny.special_ids(config), default=-1), (type(node).__name__, size)
    # every kind of layer of the full model's patterns is still there
    full, shrunk = _kinds_of_layers(_default(model_type)), _kinds_of_layers(tiny.tiny_config(model_type))
    for key, kinds in full.items():  # as many kinds (a pattern of expert counts has tiny counts)
        assert len(shrunk.get(key, ())) == len(kinds), (key, kinds, shrunk.get(key))
    for step in tiny.steps(arch):
        found = tiny.inputs(model, arch, step, 0)
        with torch.no_grad():
            out = model(**found)
        logits = getattr(out, "logits", None)
        if logits is None:
            logits = out.last_hidden_state
        assert torch.isfinite(logits).all()


# (kind, model type, first transformers with it): architectures that used to build at full size or not at all, and
# what the shrink now covers; eager runs on each step's input set 0 (but BUILT_ONLY)
SHRUNK = [
    ("vlm", "janus", "4.56"),  # a VQ model's base / latent channels, codebook and generation embedding
    ("vlm", "dots3_note", "5"),  # adapter widths that must equal the tower's and the text's hidden sizes
    ("vlm", "muse_spark", "5"),  # an audio pyramid's per-stage widths and depths; a merger's width (hidden x 2 x 2)
    ("speech", "vibevoice", "5"),  # an audio tokenizer doubling from num_filters over six stages
    ("encoder", "perceiver", "4.56"),  # latent width, latent count, self-attends per block, their heads
    ("vlm", "deepseek_ocr2", "5"),  # mlp_layer_types None (override); a SAM neck's channels to the encoder width
    ("vlm", "granite4_vision", "5"),  # deepstack map and downsample rate None (override); pinpoints of another size
    ("vlm", "chameleon", "4.56"),  # vocabulary_map None: a tiny map of the shrunk codebook
    ("vlm", "emu3", "4.56"),  # likewise, and a VQ attention as wide as the pyramid's bottom
    ("vlm", "gemma4", "5"),  # no default vision tower; flattened patches with their positions
    ("vlm", "diffusion_gemma", "5"),  # expert sizes None although every layer routes
    ("causal", "gemma4_assistant", "5"),  # a default its own validator refuses (DEFAULT_ARGUMENTS)
    ("vlm", "t5gemma2", "5.23"),  # its vision config inside its encoder's: the images were sized by the encoder's
    ("vlm", "ernie4_5_vl_moe", "5"),  # M-RoPE sections of its own order (height = width, then time); one-frame patches
    ("vlm", "pp_formulanet", "5.23"),  # the convolution after its encoder takes the encoder's output channels
    ("vlm", "step3p7", "5.23"),  # a sliding-window mask its default config (no window, no such layer) cannot build
    ("vlm", "gemma4_unified", "5.23"),  # no default vision config; its embedder's widths, its patch size
    ("vlm", "pi0", "5.23"),  # a policy: images per camera, read by its PaliGemma; state, noise and time given
]
#: Built only: DiffusionGemma's forward takes encoder outputs, Gemma 4's assistant the target model's key/value states.
BUILT_ONLY = ("diffusion_gemma", "gemma4_assistant")
SHRUNK_SINCE = [pytest.param(kind, model_type, marks=requires(f"transformers>={since}"), id=model_type)
                for kind, model_type, since in SHRUNK]


@pytest.mark.parametrize("kind,model_type", SHRUNK_SINCE)
def test_sizes_the_name_rules_used_to_miss_are_tiny(kind, model_type):
    arch = _arch(kind, model_type)
    model = tiny.build(arch)
    assert 0 < tiny.params(model) <= tiny.PARAMS_BUDGET
    if model_type in BUILT_ONLY:
        return
    for step in tiny.steps(arch):
        with torch.no_grad():
            model(**tiny.inputs(model, arch, step, 0))


@requires("transformers>=5.23")
def test_a_policys_prefill_is_one_answer():
    """PI0 samples its action noise and flow-matching time when not given them: the inputs give them (and its
    state), so eager answers the same twice and a program can be compared with it."""
    arch = _arch("vlm", "pi0")
    model = tiny.build(arch)
    inputs = tiny.inputs(model, arch, "prefill", 0)
    assert inputs["pixel_values"].shape[:2] == inputs["pixel_attention_mask"].shape == (2, tiny.CAMERAS)
    image = model.config.vlm_config.image_token_id
    per_image = model.model.vlm.get_image_features(inputs["pixel_values"][:, 0]).pooler_output.shape[1]
    assert ((inputs["input_ids"] == image).sum(-1) == tiny.CAMERAS * per_image).all()  # every camera's tokens
    with torch.no_grad():
        first, second = model(**inputs).logits, model(**inputs).logits
    assert torch.equal(first, second)


def test_zambas_shared_block_is_tied_between_two_hybrid_layers():
    """The catalogue's Zamba keeps two hybrid layers (its real first three layers, then a Mamba and a hybrid
    one): their shared transformer block is one set of weights."""
    model = tiny.build(_arch("causal", "zamba"))
    kinds = model.config.layers_block_type
    hybrid = [i for i, kind in enumerate(kinds) if kind == "hybrid"]
    assert len(kinds) == 5 and hybrid == [2, 4], kinds
    first, second = (model.model.layers[i].shared_transf.self_attn.q_proj.weight for i in hybrid)
    assert first.data_ptr() == second.data_ptr()


@pytest.mark.parametrize("model_type, depth, indices", [
    ("qwen2_vl", 2, {}),  # 32 blocks, all alike
    ("qwen2_5_vl", 8, {"fullatt_block_indexes": [7]}),  # windowed blocks, the first full-attention one at 7
    pytest.param("qwen3_vl", 9, {"deepstack_visual_indexes": [8]}, marks=requires("transformers>=4.57")),
])
def test_vision_towers_named_by_depth_are_shrunk_to_their_first_block_of_each_kind(model_type, depth, indices):
    """Qwen2-VL's family and GLM-4V name their tower's block count ``depth``: left at 24-32 blocks, their tiny
    models were deep and slow to export (GLM-5-Next's ONNX step past the sweep's limit). Shrunk like a layer
    count, the first block of every kind kept (the index lists cut to it)."""
    vision = tiny.tiny_config(model_type).vision_config
    assert vision.depth == depth
    assert {name: list(getattr(vision, name)) for name in indices} == indices


@requires("transformers>=5")  # AFMoE is a 5.x model
def test_no_weight_matrix_is_left_all_zeros():
    """AFMoE's init zeroes its router's gate: every router score is then equal, and top-k picks among ties, which
    torch and onnxruntime break differently (its ONNX logits differed by 0.08 for that reason alone). The build gives
    an all-zero matrix random values, as a trained checkpoint has; vectors keep their init."""
    model = tiny.build(_arch("causal", "afmoe"))
    gate = model.model.layers[-1].mlp.router.gate.weight
    assert gate.any() and gate.std() > 0
    assert all(p.any() for p in model.parameters() if p.dim() >= 2)
    assert not model.model.layers[-1].mlp.expert_bias.any()  # a vector: still the init's zeros


def test_a_default_config_of_one_expert_becomes_a_tiny_mixture():
    """Hunyuan-MoE's class default is one expert, top-1: no mixture, and transformers' grouped experts then count
    tokens with histc(min=0, max=0), which torch.onnx refuses. Checkpoints route among many."""
    _arch("causal", "hunyuan_v1_moe")
    config = tiny.tiny_config("hunyuan_v1_moe")
    assert (config.num_experts, config.moe_topk) == (4, 2)


def test_a_constructor_argument_the_config_aliases_keeps_its_tiny_value():
    """transformers 5 configs take some sizes under a name their attribute_map aliases (Qwen3-MoE's constructor
    takes num_experts, stored as num_local_experts): the rebuild read the stored names only and put the default
    back, 128 experts for Qwen3-MoE, 256 for Kimi-Linear (whose sweep then timed out), 24 tower layers for Inkling."""
    assert tiny.tiny_config("qwen3_moe").num_experts == 4
    for model_type, sizes in [("kimi_linear", {"num_experts": 4, "n_group": 1}),
                              ("inkling_vision", {"num_hidden_layers": 2})]:
        if model_type not in CONFIG_MAPPING_NAMES:
            continue  # a model of later transformers than this one
        config = tiny.tiny_config(model_type)
        assert {name: getattr(config, name) for name in sizes} == sizes, model_type


def test_linear_attention_heads_are_tiny():
    """Kimi-Linear's and Bailing-hybrid's linear attention has heads of its own (32 of 128 by default): left at
    that, one model took longer than the sweep's whole budget per architecture."""
    for model_type in ("kimi_linear", "bailing_hybrid"):
        if model_type not in CONFIG_MAPPING_NAMES:
            continue  # a model of later transformers than this one
        config = tiny.tiny_config(model_type)
        # Bailing-hybrid derives them from its attention's (a head of 8 there)
        assert config.linear_num_heads == tiny.HEADS and config.linear_head_dim <= tiny.HEAD_DIM, model_type


@requires("transformers>=5.23")  # dots.ocr 3
def test_per_layer_overrides_keep_multi_head_attention_multi_head():
    """dots.ocr 3's sliding layers override the heads (64 query, 64 key/value): shrunk as the global values are,
    4 and 4, not 4 and 2 (its latent attention makes one key per query head; with fewer key/value heads declared,
    eager fails on a padded batch, the path every export takes)."""
    config = tiny.tiny_config("dots3_note").text_config
    for layer in config.per_layer_config:
        assert layer.num_key_value_heads == layer.num_attention_heads == tiny.HEADS


def test_sizes_are_consistent_where_the_model_derives_them():
    deepseek = tiny.tiny_config("deepseek_v3")
    assert deepseek.qk_head_dim == deepseek.qk_nope_head_dim + deepseek.qk_rope_head_dim
    gptj = tiny.tiny_config("gptj")
    assert gptj.rotary_dim <= gptj.n_embd // gptj.n_head
    mamba = tiny.tiny_config("mamba")
    assert mamba.intermediate_size == mamba.expand * mamba.hidden_size
    longcat = tiny.tiny_config("longcat_flash")
    assert longcat.head_dim == longcat.qk_rope_head_dim
    zamba = tiny.tiny_config("zamba")  # the shared attention reads hidden state and embeddings side by side
    assert zamba.attention_hidden_size == 2 * zamba.hidden_size
    assert zamba.attention_head_dim * zamba.num_attention_heads == zamba.attention_hidden_size
    # code paths keep the default's values
    for model_type in ("gemma2", "mistral", "phi3"):
        default, shrunk = _default(model_type), tiny.tiny_config(model_type)
        for name in ("sliding_window", "max_position_embeddings"):
            assert getattr(shrunk, name, None) == getattr(default, name, None), (model_type, name)


@requires("transformers>=5.23")  # the versions we run that ship HRM and keep xLSTM's counter in a tensor
def test_stacks_and_widths_the_cache_derives_are_consistent():
    """HRM's cache holds a slot per layer call (layers per stack x H_cycles x (L_cycles + 1)), its cycles kept
    real; xLSTM builds num_blocks (a copy of the depth), and its cache rounds hidden x factor up to a multiple of
    64 where its layers do not: both at tiny sizes, and the decode inputs built from them."""
    hrm = tiny.tiny_config("hrm_text")
    default = _default("hrm_text")
    assert (hrm.H_cycles, hrm.L_cycles) == (default.H_cycles, default.L_cycles)
    assert hrm.num_hidden_layers == hrm.num_layers_per_stack * hrm.H_cycles * (hrm.L_cycles + 1)
    xlstm = tiny.tiny_config("xlstm")
    assert xlstm.num_blocks == xlstm.num_hidden_layers <= 4
    for factor in (xlstm.qk_dim_factor, xlstm.v_dim_factor):
        assert (xlstm.hidden_size * factor) % 64 == 0
    for model_type in ("hrm_text", "xlstm"):
        arch = _arch("causal", model_type)
        model = tiny.build(arch)
        with torch.no_grad():
            model(**tiny.inputs(model, arch, "decode", 2))


def test_a_numbered_patch_layout_leaves_the_text_its_own_mask():
    """Pix2Struct's patches come with a mask of real patches, which its encoder reads; Kosmos-2.5 takes the same
    patches but gives attention_mask to its text model: there the mask is the text's (it was the patches')."""
    for model_type, mask_of in (("pix2struct", "flattened_patches"), ("kosmos-2.5", "input_ids")):
        arch = _arch("vlm", model_type)
        inputs = tiny.inputs(tiny.build(arch), arch, "prefill", 0)
        assert inputs["attention_mask"].shape == inputs[mask_of].shape[:2], model_type


@pytest.mark.parametrize("kind,model_type", [("causal", "llama"), ("seq2seq", "bart"), ("encoder", "distilbert")])
def test_input_sets_differ_in_batch_and_sequence(kind, model_type):
    arch = _arch(kind, model_type)
    model = tiny.build(arch)
    for step in tiny.steps(arch):
        shapes = [tuple(tiny.inputs(model, arch, step, k)[_ids_name(step, kind)].shape) for k in range(3)]
        assert len({s[0] for s in shapes}) == 3, (step, shapes)  # batch
        assert len({s[1] for s in shapes}) == 3, (step, shapes)  # sequence
        assert tiny.inputs(model, arch, step, 1)[_ids_name(step, kind)].tolist() == \
            tiny.inputs(model, arch, step, 1)[_ids_name(step, kind)].tolist()  # deterministic


@pytest.mark.parametrize("model_type", ["llama", "gemma3"])
def test_every_decode_step_returns_the_cache_it_was_given_one_position_longer(model_type):
    """The decode sets of a model that returns no cache unless asked (transformers 4's Gemma 3, a
    conditional-generation model under the causal mapping) pass use_cache=True, as generate() does; the others
    are left without the flag. Either way the step returns its cache, one position longer."""
    arch = _arch("causal", model_type)
    model = tiny.build(arch)
    inputs = tiny.inputs(model, arch, "decode", 0)
    assert ("use_cache" in inputs) == (model_type == "gemma3" and TF4), sorted(inputs)
    past = inputs["past_key_values"].get_seq_length()
    with torch.no_grad():
        out = model(**inputs)
    assert out.past_key_values is not None
    assert out.past_key_values.get_seq_length() == past + inputs["input_ids"].shape[1]


@pytest.mark.parametrize("model_type", ["qwen2_vl", "llava_next", "got_ocr2",
                                        # one block of pixels per language-model token, channels last
                                        pytest.param("inkling2", marks=requires("transformers>=5.13"))])
def test_vlm_input_sets_differ_and_hold_two_images_or_more(model_type):
    arch = _arch("vlm", model_type)
    model = tiny.build(arch)
    token = tiny.image_token(model.config)
    sets = [tiny.inputs(model, arch, "prefill", k) for k in range(3)]
    shapes = [tuple(found["input_ids"].shape) for found in sets]
    assert len({s[0] for s in shapes}) == 3 and len({s[1] for s in shapes}) == 3, shapes
    for found in sets:
        images = found["image_grid_thw"].shape[0] if "image_grid_thw" in found else found["pixel_values"].shape[0]
        assert found["input_ids"].shape[0] >= 2 and images >= 2
        assert (found["input_ids"] == token).sum() > 0


def _ids_name(step, kind):
    return "decoder_input_ids" if kind == "seq2seq" and step == "decode" else "input_ids"


def test_architectures_cover_every_kind_once_per_model_type():
    archs = tiny.architectures()
    assert {a.kind for a in archs} == set(tiny.KINDS)
    keys = [(a.kind, a.model_type) for a in archs]
    assert len(keys) == len(set(keys)) and keys == sorted(keys, key=lambda k: (tiny.KINDS.index(k[0]), k[1]))
    others = {a.model_type for a in archs if a.kind != "encoder"}
    assert not any(a.model_type in others for a in archs if a.kind == "encoder")
    assert tiny.steps(next(a for a in archs if a.model_type == "llama" and a.kind == "causal")) == ("prefill", "decode")


def test_reasons_are_one_honest_line():
    assert tiny._reason(ImportError("FooModel requires the timm library but it was not found")) == "needs timm"
    missing = AttributeError("'DbrxAttentionConfig' object has no attribute 'rope_theta'")
    assert tiny._reason(missing) == "default config incomplete: DbrxAttentionConfig has no rope_theta"
    assert tiny._reason(RuntimeError("one\ntwo")) == "RuntimeError: one"
    wrong_class = AttributeError("'PixtralVisionConfig' object has no attribute 'vision_config'")
    assert tiny._reason(wrong_class).startswith("AttributeError: ")


@requires("transformers>=5.23")
def test_a_vlm_whose_forward_takes_no_pixels_is_refused_with_the_reason():
    """DiffusionGemma's block-diffusion model takes images only as features its encoder computed beforehand
    (``mm_encoder_outputs``): the harness says so instead of failing to count placeholders."""
    arch = tiny.architecture("diffusion_gemma", "vlm")
    with pytest.raises(tiny.BuildError, match="forward takes no pixels: images come in as mm_encoder_outputs"):
        tiny.inputs(tiny.build(arch), arch, "prefill", 0)


@requires("transformers<5")
def test_a_vlm_whose_model_type_names_only_its_tower_is_refused_with_the_reason():
    """transformers 4's Pixtral maps to LlavaForConditionalGeneration with a vision config only: the harness does
    not guess the Llava settings its checkpoints hold (feature layer, strategy, image sizes), and says so."""
    with pytest.raises(tiny.BuildError, match="vision tower's only .*LlavaConfig"):
        tiny.build(tiny.architecture("pixtral", "vlm"))


@pytest.mark.parametrize("model_type", ["bart", "fsmt"])
def test_seq2seq_decode_caches_hold_the_whole_prefix(model_type):
    """Each decode set's self-attention cache holds its whole prefix, so that the sets differ in past length (a
    dynamic dim). transformers 4's FSMT reads only the last decoder token once it has a cache (fairseq's
    incremental decoding), and builds no cache of its own: its prefix is stepped token by token, as generate()
    does."""
    arch = _arch("seq2seq", model_type)
    model = tiny.build(arch)
    for k, (_, _, past, _) in enumerate(builders.SEQ2SEQ_DECODE):
        cache = tiny.inputs(model, arch, "decode", k)["past_key_values"]
        assert cache.self_attention_cache.get_seq_length() == past, (k, past)


def test_pop2piano_features_are_its_encoders_input_embeddings_with_their_mask():
    """Pop2Piano takes ``input_features`` that its T5 encoder reads as input embeddings (the encoder's own main
    input is input_ids): the harness gives frames of the model's width, with the frames' mask its feature extractor
    gives a batch, and eager runs the forward and decode sets."""
    arch = tiny.architecture("pop2piano", "speech")
    model = tiny.build(arch)
    forward = tiny.inputs(model, arch, "forward", 0)
    features = forward["input_features"]
    assert features.dim() == 3 and features.shape[-1] == model.config.d_model
    assert torch.equal(forward["attention_mask"], torch.ones(features.shape[:2], dtype=torch.long))
    with torch.no_grad():
        model(**forward)
        model(**tiny.inputs(model, arch, "decode", 0))


@requires("transformers>=5.13")
@pytest.mark.parametrize("model_type", ["qwen2_vl", "mllama", "idefics3", "ernie4_5_vl_moe"])
def test_padded_vlm_prefill_shifts_every_token_input_and_runs_in_eager(model_type):
    """The sweep asks eager to run a VLM prefill left-padded (the masked path every export takes): every tensor as
    long as the text moves with it (Qwen2-VL's token types stay the image tokens' places, ERNIE 4.5 VL's expert
    token types too, as its processor gives them; Mllama's cross-attention
    mask is an expanded view), the pads are the config's pad id (0 where the shrunk vocab lost it: Idefics3's), and
    eager runs on it."""
    arch = tiny.architecture(model_type, "vlm")
    model = tiny.build(arch)
    plain = tiny.inputs(model, arch, "prefill", 0)
    padded = tiny.inputs(model, arch, "prefill", 0, padded=True)
    mask = padded["attention_mask"]
    assert not bool(mask.all()) and bool(mask[:, -1].all())  # some rows padded, on the left
    for row, pad in enumerate((mask == 0).sum(1).tolist()):
        for name, value in plain.items():
            if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[:2] == plain["input_ids"].shape:
                assert torch.equal(padded[name][row, pad:], value[row, :value.shape[1] - pad]), (name, row)
    if "mm_token_type_ids" in padded:
        assert torch.equal(padded["mm_token_type_ids"].bool(), padded["input_ids"] == model.config.image_token_id)
    assert ("moe_mm_token_type_ids" in padded) == (model_type == "ernie4_5_vl_moe")
    if "moe_mm_token_type_ids" in padded:  # the tokens its vision experts take: the image's
        assert torch.equal(padded["moe_mm_token_type_ids"].bool(), padded["input_ids"] == model.config.image_token_id)
    with torch.no_grad():
        model(**padded)


@requires("transformers<5")  # Mega is gone in 5.0
def test_mega_decodes_as_its_docs_build_a_causal_lm():
    """4.x Mega as a causal LM is built as its docs ask (bidirectional=False: the bidirectional EMA takes no
    incremental state) and decodes one token at a time, its EMA's only incremental step: eager runs every decode
    input set, batch 1 included."""
    arch = tiny.architecture("mega", "causal")
    model = tiny.build(arch)
    assert model.config.bidirectional is False and model.config.is_decoder
    for k in range(3):
        inputs = tiny.inputs(model, arch, "decode", k)
        assert inputs["input_ids"].shape[1] == 1
        with torch.no_grad():
            assert model(**inputs).logits.shape[:2] == inputs["input_ids"].shape
    assert tiny.inputs(model, arch, "decode", 2)["input_ids"].shape[0] == 1
