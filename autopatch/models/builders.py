"""Input sets for tiny models, as a user's code gives them: prefill, decode from the model's own eager prefill
(its own cache class, hybrid and state-space caches included), seq2seq forward and decode, left-padded batches with
``position_ids`` as ``generate()`` makes them; and the config's own per-layer patterns at a tiny depth.

Sizes: set ``k`` of each list; set 1 differs from set 0 in every size that should be dynamic, set 2 differs again
(traced, used to guess dynamic shapes, compared). Imports torch and transformers lazily.
"""

from __future__ import annotations

import inspect

# Sizes: prefill (batch, seq); decode (batch, past, seq).  b differs from a in every size, c differs again.
PREFILL = [(2, 5), (3, 7), (4, 9)]
DECODE = [(2, 6, 3), (3, 8, 2), (1, 9, 1)]
# A padded batch has rows of its own lengths: C keeps at least two rows (one row alone is never padded).
PADDED_DECODE = [(2, 6, 3), (3, 8, 2), (4, 9, 1)]
RECURRENT_DECODE = [(2, 6, 1), (3, 8, 1), (1, 9, 1)]  # one token at a time, the cache position says where; batch 1 last

# helpers
# ---------------------------------------------------------------------------------------------------------------


def transformers_module():
    import transformers

    return transformers


def transformers_major() -> int:
    return int(transformers_module().__version__.split(".")[0])


def rope(rope_type: str, **params) -> dict:
    """Config keywords for a RoPE variant: ``rope_parameters`` on transformers 5, ``rope_scaling`` on 4."""
    if transformers_major() >= 5:
        return {"rope_parameters": {"rope_type": rope_type, "rope_theta": 10000.0, **params}}
    if rope_type == "longrope":  # phi3 on 4.x wants exactly type, short_factor and long_factor
        return {"rope_scaling": {"type": rope_type, **params}}
    return {"rope_scaling": {"rope_type": rope_type, "type": rope_type, **params}}


def make_model(config_name: str, model_name: str, **kwargs):
    import torch

    tf = transformers_module()
    config = getattr(tf, config_name)(**kwargs)
    torch.manual_seed(0)
    return getattr(tf, model_name)(config).eval(), config


def accepts(model, name: str) -> bool:
    params = inspect.signature(model.forward).parameters
    return name in params


def random_ids(g, vocab, *shape, low=3):
    import torch

    return torch.randint(low, vocab, shape, generator=g)


def code_streams(config) -> tuple | None:
    """(codebooks, codes per codebook) of a decoder that reads, at each position, a text token and one audio code
    per codebook (Kyutai's speech-to-text: its embedding sums them); None for a decoder of text tokens. Codes stay
    below the audio special ids (begin, pad), as a codec's are."""
    given = getattr(config, "code_streams", False)
    if given is not False:  # a _Vocab stand-in carries the real config's
        return given
    codebooks, codes = getattr(config, "num_codebooks", None), getattr(config, "codebook_vocab_size", None)
    if not (isinstance(codebooks, int) and isinstance(codes, int)):
        return None
    specials = [getattr(config, name, None) for name in ("audio_bos_token_id", "audio_pad_token_id")]
    return codebooks, min([codes, *(i for i in specials if isinstance(i, int) and i < codes)])


def token_ids(g, config, batch, seq):
    """Random input ids: ``(batch, seq)`` text tokens, or for a decoder of code streams (``code_streams``) each
    position's text token and codes, ``(batch, seq, 1 + codebooks)``."""
    import torch

    ids = random_ids(g, vocab_of(config), batch, seq)
    streams = code_streams(config)
    if streams is None:
        return ids
    codebooks, codes = streams
    return torch.cat([ids[..., None], random_ids(g, codes, batch, seq, codebooks, low=0)], dim=-1)


def generator(seed):
    import torch

    return torch.Generator().manual_seed(seed)


def vocab_of(config):
    return getattr(config, "vocab_size", 128)


# ---------------------------------------------------------------------------------------------------------------
# the config class's own layer pattern at a tiny depth
# ---------------------------------------------------------------------------------------------------------------

# A per-layer list with more kinds than this is a list of layer indices (Llama 4's moe_layers), not a pattern.
MAX_PATTERN_KINDS = 4
# The deepest pattern prefix the catalogue and the sweep build (Gemma 3n's activation sparsity needs 11 layers).
MAX_DEPTH = 16


def layer_count(config) -> int | None:
    # ``depth``: a vision tower's block count (Qwen2-VL's family and GLM-4V's), where no other name is
    for key in ("num_hidden_layers", "n_layer", "num_layers", "decoder_layers", "depth"):
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def layer_patterns(config) -> dict:
    """The config's per-layer patterns, by attribute: lists with one entry per layer and a few kinds of entry
    (``layer_types``, a hybrid's ``layers_block_type``, SmolLM3's ``no_rope_layers``, ...), stored or computed."""
    depth = layer_count(config)
    patterns = {}
    if not depth or depth < 2:
        return patterns
    for name in dir(config):
        if name.startswith("_"):
            continue
        try:
            value = getattr(config, name)
        except Exception:  # a property that needs what a default config does not have
            continue
        if not isinstance(value, (list, tuple)) or len(value) != depth:
            continue
        if not all(isinstance(item, (str, int, float, bool)) for item in value):
            continue
        if 1 < len(set(value)) <= MAX_PATTERN_KINDS:
            patterns[name] = list(value)
    return patterns


def own_depth(config, floor: int = 2) -> int:
    """Fewest layers (at least ``floor``) whose prefix of every per-layer pattern of ``config`` (at the class's
    own depth) holds every kind of layer the whole pattern holds: the real model's first layers."""
    needed = floor
    for values in layer_patterns(config).values():
        needed = max(needed, *(values.index(kind) + 1 for kind in set(values)))
    return min(needed, MAX_DEPTH)


def at_own_depth(config_class, kwargs: dict) -> dict:
    """``kwargs`` with as many layers as the class's own pattern needs (``own_depth``), the class built at its
    own depth to read that pattern.  A case that gives its own ``layer_types`` chose its pattern."""
    if "layer_types" in kwargs:
        return kwargs
    floor = kwargs.get("num_hidden_layers", 2)
    deep = config_class(**{k: v for k, v in kwargs.items() if k != "num_hidden_layers"})
    return {**kwargs, "num_hidden_layers": own_depth(deep, floor)}


def cut_layer_lists(config, full_depth: int, depth: int) -> None:
    """Every stored list with one entry per layer (layer_types, no_rope_layers, mlp_layer_types, ...) cut to the
    first ``depth`` layers; computed ones (Jamba's layers_block_type) follow the layer count by themselves."""
    for name, value in list(vars(config).items()):
        if isinstance(value, (list, tuple)) and len(value) == full_depth and depth and depth < full_depth:
            try:
                setattr(config, name, type(value)(value[:depth]))
            except Exception:
                pass


# ---------------------------------------------------------------------------------------------------------------
# left-padded batches
# ---------------------------------------------------------------------------------------------------------------


def left_pads(batch: int, room: int, k: int) -> list:
    """Pad counts per row of input set ``k``: one row unpadded (the longest, which a tokenizer pads the others
    to), the others by amounts that differ from set to set; never more than ``room - 1`` (``room`` >= 2 tokens),
    so that every row keeps a token of its own."""
    unpadded = k % batch
    return [0 if row == unpadded else 1 + (row + k) % (room - 1) for row in range(batch)]


def pad_token_id_of(config) -> int:
    text = getattr(config, "text_config", None) or config
    for owner in (text, config):
        value = getattr(owner, "pad_token_id", None)
        if isinstance(value, int):
            return value
    return 0


def left_pad(inputs: dict, pads: list, pad_token: int) -> dict:
    """Shifts each row of ``input_ids`` (and of ``attention_mask``) right by its pad count: pad tokens with mask 0
    at the start, the row's last tokens dropped (plain text, after any image placeholders)."""
    import torch

    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    for row, pad in enumerate(pads):
        if pad:  # (code streams: every stream of a pad position padded)
            ids[row] = torch.cat([torch.full((pad, *ids.shape[2:]), pad_token, dtype=ids.dtype), ids[row, :-pad]])
            mask[row] = torch.cat([torch.zeros(pad, dtype=mask.dtype), mask[row, :-pad]])
    return inputs


def generate_positions(model, inputs: dict, new_tokens: int) -> dict:
    """``position_ids`` as ``generate()`` makes them for a padded batch (the mask's running count) when the
    model takes them: real rows start at position 0 whatever their padding."""
    if not accepts(model, "position_ids"):
        return inputs
    mask = inputs["attention_mask"]
    positions = mask.long().cumsum(-1) - 1
    # the value at pad positions is generate()'s own: 1 on transformers 4, 0 on 5 (never attended)
    positions = positions.masked_fill(mask == 0, 0 if transformers_major() >= 5 else 1)
    inputs["position_ids"] = positions[:, -new_tokens:]
    return inputs


# ---------------------------------------------------------------------------------------------------------------
# decoder inputs
# ---------------------------------------------------------------------------------------------------------------


def prefill_inputs(model, config, batch, seq, seed, pads=None):
    import torch

    g = generator(seed)
    inputs = {"input_ids": token_ids(g, config, batch, seq)}
    # a mamba model's mask only matters when a batch is padded (generate() passes it then)
    mamba = getattr(config, "model_type", "").startswith("mamba")
    if accepts(model, "attention_mask") and (pads is not None or not mamba):
        inputs["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
    if pads is not None:
        generate_positions(model, left_pad(inputs, pads, pad_token_id_of(config)), seq)
    inputs["use_cache"] = False
    return inputs


class StatefulModel(RuntimeError):
    """The model keeps its recurrent state in its own modules and returns no cache: no program can take or
    return that state, so a decode step cannot be exported (the model's property, not the harness's)."""


def find_cache(output, model=None):
    for name in ("past_key_values", "cache_params"):
        cache = getattr(output, name, None)
        if cache is not None:
            return name, cache
    if model is not None and any(hasattr(module, "_setup_cache") for module in model.modules()):
        # RecurrentGemma: its recurrent blocks hold their states as module attributes (set up by _setup_cache)
        raise StatefulModel(f"{type(model).__name__} keeps its recurrent state in its own modules and returns no "
                            f"cache ({type(output).__name__}): no program can take or return it")
    raise RuntimeError(f"the prefill returned no cache ({type(output).__name__})")


def hybrid_cache_class(model):
    import sys

    module = sys.modules[type(model).__module__]
    for name in dir(module):
        # 4.x Zamba's and Zamba2's have names of their own (other 5.0-5.4 hybrids' caches end the same way)
        if name.endswith("HybridMambaAttentionDynamicCache") or name in ("ZambaHybridDynamicCache",
                                                                           "Zamba2HybridDynamicCache"):
            return getattr(module, name)
    return None


def empty_hybrid_cache(model, config, batch):
    """The model's own hybrid cache, empty. Some 4.x classes (FalconH1) take one device per layer and have no
    default for it."""
    import inspect

    import torch

    cls = hybrid_cache_class(model)
    if "devices" in inspect.signature(cls.__init__).parameters:
        return cls(config, batch, torch.float32, devices=["cpu"] * config.num_hidden_layers)
    return cls(config, batch, torch.float32)


def empty_own_cache(model):
    """The empty cache a model's prefill must be handed for it to return one, or None when it builds its own.

    BLT (``model_type`` "blt") builds none it can use. 5.x BltModel wraps its self-attention caches in an
    EncoderDecoderCache of two ``DynamicCache(config=self.config)``, and its BltConfig has no
    ``num_hidden_layers`` (its depths are in its sub-configs): eager with ``use_cache=True`` stops there, and so
    does generate(), whose cache is wrapped the same way. Handed the same structure without the config (every
    layer a full DynamicLayer; the local window, 512 by default, exceeds the catalogue's lengths), it steps.
    4.x BltModel never creates a cache and returns the one it is given (generate() creates one from the same
    config and stops too): a DynamicCache, which its encoder and decoder layers share, as upstream has it."""
    if getattr(model.config, "model_type", "") != "blt":
        return None
    from transformers import DynamicCache

    if transformers_major() >= 5:
        from transformers import EncoderDecoderCache

        return EncoderDecoderCache(DynamicCache(), DynamicCache())
    return DynamicCache()


def decode_inputs(model, config, batch, past, seq, seed=0, cache_position=False, pads=None):
    """A decode step: the model's own eager prefill of ``past`` tokens builds the cache it expects.  With
    ``pads`` that prefill is left-padded (its mask and positions as generate() gives them), and the step's mask
    is the prefill's followed by the new tokens."""
    import torch

    g = generator(seed)
    prefill = {"input_ids": token_ids(g, config, batch, past), "use_cache": True}
    if pads is not None:
        prefill["attention_mask"] = torch.ones(batch, past, dtype=torch.long)
        generate_positions(model, left_pad(prefill, pads, pad_token_id_of(config)), past)
    if cache_position:
        prefill["cache_position"] = torch.arange(past)
    hybrid = not cache_position and hybrid_cache_class(model) is not None
    if hybrid:
        # transformers 4.x hybrid mamba models return no cache unless they are given an empty one
        prefill["past_key_values"] = empty_hybrid_cache(model, config, batch)
        prefill["cache_position"] = torch.arange(past)
    own = empty_own_cache(model)
    if own is not None:
        prefill["past_key_values"] = own
    with torch.no_grad():
        name, cache = find_cache(model(**prefill), model)
    inputs = {"input_ids": token_ids(g, config, batch, seq), name: cache}
    # Mamba's generate() drops the mask after the prefill (the state holds the padding already): so does its case.
    if accepts(model, "attention_mask") and not cache_position:
        past_mask = prefill.get("attention_mask", torch.ones(batch, past, dtype=torch.long))
        inputs["attention_mask"] = torch.cat([past_mask, torch.ones(batch, seq, dtype=torch.long)], dim=1)
        if pads is not None:
            generate_positions(model, inputs, seq)
    if cache_position or hybrid:
        inputs["cache_position"] = torch.arange(past, past + seq)
    if cache_position or hybrid or _returns_cache_only_when_asked(model, inputs):
        inputs["use_cache"] = True
    return inputs


def _returns_cache_only_when_asked(model, inputs) -> bool:
    """A model whose config has no ``use_cache`` (a composite one) and whose step returns no cache unless
    ``use_cache=True`` is passed, as generate() passes it (transformers 4's Gemma3ForConditionalGeneration, under
    the causal mapping). Every other step is left as it was, without the flag."""
    import copy

    import torch

    if not accepts(model, "use_cache") or getattr(model.config, "use_cache", None) is not None:
        return False
    with torch.no_grad():
        output = model(**copy.deepcopy(inputs))
    return all(getattr(output, name, None) is None for name in ("past_key_values", "cache_params"))


SEQ2SEQ_DECODE = [(2, 5, 3, 2), (3, 7, 4, 3), (1, 9, 6, 1)]
SEQ2SEQ_FORWARD = [(2, 5, 4), (3, 7, 6), (4, 9, 3)]


def seq2seq_forward_inputs(model, config, batch, source, target, seed):
    import torch

    g = generator(seed)
    return {"input_ids": random_ids(g, config.vocab_size, batch, source),
            "attention_mask": torch.ones(batch, source, dtype=torch.long),
            "decoder_input_ids": random_ids(g, config.vocab_size, batch, target), "use_cache": False}


def seq2seq_decode_inputs(model, config, batch, source, past, seq, seed=0):
    """A decoder step after ``past`` tokens, its cache from the model's own eager call.  ``source``: source tokens
    (text models); Whisper's audio features have a fixed number of frames, ``source`` is not used."""
    import torch

    g = generator(seed)
    if getattr(config, "model_type", "") == "whisper":
        frames = 2 * config.max_source_positions  # whisper's encoder takes exactly this many frames
        encoder = {"input_features": torch.randn(batch, config.num_mel_bins, frames, generator=g)}
    else:
        encoder = {"input_ids": random_ids(g, config.vocab_size, batch, source)}
    with torch.no_grad():
        prefix = random_ids(g, config.vocab_size, batch, past)
        try:
            cache = model(**encoder, decoder_input_ids=prefix, use_cache=True).past_key_values
        except AttributeError as exc:
            if "has no attribute 'config'" not in str(exc):
                raise
            # transformers 4's FSMT decoder builds its own empty cache from a config it does not have; generate()
            # gives it one it prepared: so does the sweep
            from transformers.cache_utils import DynamicCache, EncoderDecoderCache

            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            # ... and with a cache it reads only the last decoder token (fairseq's incremental decoding): the
            # prefix is fed one token at a time, as generate() steps it, so that the cache holds all of it
            for end in range(1, past + 1):
                cache = model(**encoder, decoder_input_ids=prefix[:, :end], past_key_values=cache,
                              use_cache=True).past_key_values
        except ValueError as exc:
            if "used as a decoder" not in str(exc):
                raise
            # 5.x Switch Transformers passes use_cache to its encoder too, which refuses it: encode first, as
            # generate() and seq2seq runtimes do, and step the decoder on the encoder's outputs
            encoder = {"encoder_outputs": model.get_encoder()(**encoder)}
            cache = model(**encoder, decoder_input_ids=prefix, use_cache=True).past_key_values
    return {**encoder, "decoder_input_ids": random_ids(g, config.vocab_size, batch, seq), "past_key_values": cache}
