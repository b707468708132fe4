"""A plain export script: nothing here knows about autopatch.

It builds a tiny Llama from a config (random weights, nothing downloaded), fills a DynamicCache with past
keys/values and exports one decoding step with dynamic batch, sequence and cache lengths.  Then it checks the
exported program against eager on inputs of *other* sizes than the ones it traced.

    python examples/train_export.py                    # fails: DynamicCache is not a pytree node
    EXPORT_PATCHES=1 python examples/train_export.py   # exports
"""

import sys

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM


def tiny_llama():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval(), config


def decode_inputs(config, batch, seq, past):
    head_dim = config.hidden_size // config.num_attention_heads
    cache = DynamicCache()
    for layer in range(config.num_hidden_layers):
        shape = (batch, config.num_key_value_heads, past, head_dim)
        cache.update(torch.randn(shape), torch.randn(shape), layer)
    return {
        "input_ids": torch.randint(0, config.vocab_size, (batch, seq)),
        "attention_mask": torch.ones(batch, past + seq, dtype=torch.long),
        "past_key_values": cache,
    }


def main():
    model, config = tiny_llama()
    # Dim.DYNAMIC lets torch.export find the ranges and relations itself (attention_mask is past + seq long).
    dyn = torch.export.Dim.DYNAMIC
    cache_dims = [{0: dyn, 2: dyn}] * config.num_hidden_layers
    dynamic_shapes = {
        "input_ids": {0: dyn, 1: dyn},
        "attention_mask": {0: dyn, 1: dyn},
        # DynamicCache flattens to [key tensors, value tensors], one entry per layer.
        "past_key_values": [cache_dims, cache_dims],
    }
    torch.manual_seed(1)
    traced = decode_inputs(config, batch=2, seq=3, past=5)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=traced, dynamic_shapes=dynamic_shapes)
        print("exported:", type(program).__name__)
        for sizes in ((1, 1, 9), (3, 4, 2)):  # other batch, sequence and past lengths than traced
            inputs = decode_inputs(config, *sizes)
            expected = model(**decode_inputs_copy(inputs)).logits
            got = program.module()(**inputs).logits
            diff = (expected - got).abs().max().item()
            print(f"batch={sizes[0]} seq={sizes[1]} past={sizes[2]}: max |eager - exported| = {diff:.2e}")
            if not torch.allclose(expected, got, atol=1e-4):
                sys.exit("exported program does not match eager")
    print("ok")


def decode_inputs_copy(inputs):
    """The model appends to the cache it is given; eager and exported runs each get their own copy."""
    cache = DynamicCache()
    for idx, layer in enumerate(inputs["past_key_values"].layers):
        cache.update(layer.keys.clone(), layer.values.clone(), idx)
    return {**inputs, "past_key_values": cache}


if __name__ == "__main__":
    main()
