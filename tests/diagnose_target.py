"""Builders for `autopatch diagnose --builder diagnose_target:NAME`: models whose export fails in one known
submodule without the agent, each returning (model, inputs_a, inputs_b)."""

import torch


class Gate(torch.nn.Module):
    """A user's module with an `if` on a tensor: torch.export stops on a data-dependent guard here."""

    def forward(self, x):
        y = x - 1
        if x.sum() > 0:
            y = x * 2
        return y


class Sandwich(torch.nn.Module):
    """Linear, the piece named ``name``, linear: only the middle piece fails, the linears export."""

    def __init__(self, name: str, middle: torch.nn.Module, width_out: int = 4):
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.middle_name = name
        self.add_module(name, middle)
        self.last = torch.nn.Linear(8, width_out)

    def forward(self, x):
        return self.last(getattr(self, self.middle_name)(self.first(x)))


def tensor_if():
    torch.manual_seed(0)
    return Sandwich("gate", Gate()).eval(), {"x": torch.randn(2, 5, 8)}, {"x": torch.randn(3, 7, 8)}


def dynamic_rope_llama():
    """A tiny Llama with dynamic RoPE, prefill inputs (no cache): only the rotary embedding stops the export
    without transformers.rope.dynamic."""
    from autopatch.models import builders

    model, config = builders.make_model(
        "LlamaConfig", "LlamaForCausalLM", vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8,
        **builders.rope("dynamic", factor=2.0))
    a = builders.prefill_inputs(model, config, batch=2, seq=5, seed=1)
    b = builders.prefill_inputs(model, config, batch=3, seq=11, seed=2)
    return model, a, b


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


class Writer(torch.nn.Module):
    """``*args, **kwargs`` only, and a cache it updates in place: the recorded inputs must be the cache before."""

    def forward(self, *args, **kwargs):
        (x,) = args
        keys, _ = kwargs["cache"].update(x[:, None], x[:, None], 0)
        return keys.sum(2)[:, 0]


class TwiceAndNever(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = Double()
        self.unused = torch.nn.Linear(4, 4)
        self.writer = Writer()

    def forward(self, x, cache):
        return self.writer(self.shared(x=self.shared(x=x)), cache=cache)


def twice_and_never():
    from transformers import DynamicCache

    def inputs(batch, past, seq):
        cache = DynamicCache()
        cache.update(torch.randn(batch, 1, past, 4), torch.randn(batch, 1, past, 4), 0)
        return {"x": torch.randn(batch, seq, 4), "cache": cache}

    torch.manual_seed(0)
    return TwiceAndNever().eval(), inputs(2, 3, 5), inputs(3, 4, 6)


class GatedWriter(torch.nn.Module):
    """``*args, **kwargs``, a cache it grows in place, and an `if` on a tensor: the piece that fails."""

    def forward(self, *args, **kwargs):
        (x,) = args
        if x.sum() > 0:
            x = x * 2
        keys, _ = kwargs["cache"].update(x[:, None], x[:, None], 0)
        return keys.sum(2)[:, 0]


class CachedModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.writer = GatedWriter()
        self.head = torch.nn.Linear(4, 4)

    def forward(self, x, cache):
        return {"out": self.head(self.writer(self.proj(x), cache=cache)), "cache": cache}


def cache_writer_with_if():
    from transformers import DynamicCache

    def inputs(batch, past, seq, seed):
        g = torch.Generator().manual_seed(seed)
        cache = DynamicCache()
        cache.update(torch.randn(batch, 1, past, 4, generator=g), torch.randn(batch, 1, past, 4, generator=g), 0)
        return {"x": torch.randn(batch, seq, 4, generator=g), "cache": cache}

    torch.manual_seed(0)
    return CachedModel().eval(), inputs(2, 3, 5, 1), inputs(3, 4, 6, 2)


class Triple(Gate):
    """Output length three times the input's, then the gate's `if`: no rule learned from the recorded calls gives
    that length (not an input's dim, nor a sum of two), a shape function must."""

    def forward(self, x):
        return super().forward(torch.cat([x, x, x], dim=1))


def tripler():
    torch.manual_seed(0)
    return Sandwich("triple", Triple(), width_out=2).eval(), {"x": torch.randn(2, 5, 8)}, {"x": torch.randn(3, 7, 8)}
