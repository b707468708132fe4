"""A user's builder for `autopatch validate --builder validate_target:build`: a model whose second input is
broadcast against the first, and two input sets that differ in every dynamic size."""

import torch


class Scale(torch.nn.Module):
    def forward(self, x, scale):
        return {"scaled": x * scale, "total": (x * scale).sum(-1)}


def build():
    a = {"x": torch.randn(2, 5), "scale": torch.randn(2, 1)}
    b = {"x": torch.randn(3, 7), "scale": torch.randn(3, 1)}
    return Scale(), a, b


def not_a_triple():
    return Scale()


def jamba_steps_of_several_tokens():
    """A Jamba decode step of several new tokens with a filled cache (both sets): its program asserts at run time
    that a step is not one token long (transformers.jamba.selective_scan), a check an ONNX model does not make."""
    from autopatch.models import builders, recurrent

    model, config = recurrent.build("jamba_three")
    a = builders.decode_inputs(model, config, batch=2, past=6, seq=3, seed=1)
    b = builders.decode_inputs(model, config, batch=3, past=8, seq=2, seed=2)
    return model, a, b


class Refuses(torch.nn.Module):
    def forward(self, x):
        raise ValueError("this model refuses to be traced")  # the line validate must name


def refuses():
    return Refuses(), {"x": torch.randn(2, 3)}, {"x": torch.randn(3, 4)}



class Difference(torch.nn.Module):
    def forward(self, x, y, halve=False):
        out = x - y
        return out / 2 if halve else out


def tensors_out_of_signature_order():
    """The second input set's keywords in another order than the first's (the one traced): an exported program
    pairs them by name, but an ONNXProgram called as program(**inputs) pairs its graph's inputs (in the traced
    order) with them by position, so x and y swap and the model answers -(x - y) without a word."""
    a = {"x": torch.randn(2, 5), "y": torch.randn(2, 5), "halve": True}
    b = {"y": torch.randn(3, 7), "x": torch.randn(3, 7), "halve": True}
    return Difference(), a, b


def a_flag_before_the_tensors():
    """A Python flag first (``use_cache=True`` often is): program(**inputs) shifts every tensor one input along."""
    a = {"halve": True, "x": torch.randn(2, 5), "y": torch.randn(2, 5)}
    b = {"halve": True, "x": torch.randn(3, 7), "y": torch.randn(3, 7)}
    return Difference(), a, b


def answers_otherwise():
    """A model exported through a patch that computes something else (a custom route: triple for double): its
    program runs and disagrees with eager, and validate names the patch whose nodes are in the program."""
    import autopatch
    import scope_target

    autopatch.register(id="test.triple", family="custom", trigger="scope_target", target="double", mode="route",
                       replacement="scope_target:triple", reason="answers otherwise under export")
    autopatch.enable("all,test.triple")
    return scope_target.UsesDouble(), {"x": torch.ones(2, 3)}, {"x": torch.ones(3, 4)}
