"""A user's script: a tiny decoder's decode step through one of transformers' own exporters, run by transformers'
own runner at the traced sizes and at other ones, every output leaf compared with eager. Prints one JSON line.
    python hf_exporter_target.py ARCH EXPORTER [WINDOW]
ARCH: llama, qwen3, mistral (every layer sliding), gemma2 (sliding and full layers); EXPORTER: onnx, dynamo,
executorch; WINDOW: a sliding window for the last two (default: the config class's own, larger than any past here;
4 puts every past of this script beyond it, where a sliding layer holds only its last 3 tokens).
No code mentions autopatch: the agent is on only when EXPORT_PATCHES is set."""

import copy
import json
import sys

import torch
import transformers
from torch.utils import _pytree as pytree

ARCHS = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
         "mistral": ("MistralConfig", "MistralForCausalLM"), "gemma2": ("Gemma2Config", "Gemma2ForCausalLM")}


def main(arch: str, exporter: str, window: str = "") -> dict:
    if exporter == "onnx":
        from transformers.exporters.exporter_onnx import OnnxConfig as Config, OnnxExporter as Exporter
    elif exporter == "executorch":
        from transformers.exporters.exporter_executorch import ExecutorchConfig as Config
        from transformers.exporters.exporter_executorch import ExecutorchExporter as Exporter
    else:
        from transformers.exporters.exporter_dynamo import DynamoConfig as Config, DynamoExporter as Exporter
    config_name, model_name = ARCHS[arch]
    # Sizes only: rope, window (Mistral: 4096, every layer sliding) and positions stay the config class's own.
    extra = {"sliding_window": int(window)} if window else {}
    config = getattr(transformers, config_name)(vocab_size=128, hidden_size=64, intermediate_size=128,
                                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                head_dim=16, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()

    def inputs(batch, new, past, seed):
        g = torch.Generator().manual_seed(seed)
        cache = transformers.DynamicCache(config=config)
        with torch.no_grad():
            model(input_ids=torch.randint(0, 128, (batch, past), generator=g), past_key_values=cache, use_cache=True)
        return {"input_ids": torch.randint(0, 128, (batch, new), generator=g),
                "attention_mask": torch.ones(batch, past + new, dtype=torch.long), "past_key_values": cache}

    traced = inputs(2, 3, 5, 1)
    exported = Exporter().export(model, copy.deepcopy(traced), Config(dynamic=True))
    result = {}
    for name, run in (("traced", traced), ("other", inputs(3, 4, 7, 2))):
        with torch.no_grad():
            expected = model(**copy.deepcopy(run))
            got = exported(**copy.deepcopy(run))
        got_leaves, got_spec = pytree.tree_flatten_with_path(got)
        expected_leaves, expected_spec = pytree.tree_flatten_with_path(expected)
        result[name] = {
            "same_structure": got_spec == expected_spec,
            # A leaf of another shape than eager's (a cache that kept other tokens) is as wrong as it gets.
            "diff": {pytree.keystr(path): (g - e).abs().max().item() if g.shape == e.shape else float("inf")
                     for (path, e), (_, g) in zip(expected_leaves, got_leaves)},
        }
    return result


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
