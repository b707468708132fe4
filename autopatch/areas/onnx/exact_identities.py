"""``torch.onnx.exact_identity_constants``: onnxscript's optimizer removes only true no-ops.

``torch.onnx.export(dynamo=True)`` optimizes the ONNX model with onnxscript's rewriter, whose default rules include
``x * 1 -> x``, ``x + 0 -> x``, ``x - 0 -> x`` and ``x / 1 -> x``. A pattern's constant matches a graph constant
*within a tolerance* (``math.isclose``, relative 1e-5, absolute 1e-8), so those rules also remove ``x * (1 - 1e-6)``
and ``x + 1e-12``: multiplications and epsilons that models write on purpose. Measured (onnxscript 0.7.2): the
Idefics2 / Idefics3 / SmolVLM vision embeddings scale their fractional patch coordinates by ``1 - 1e-6`` before
``bucketize`` so that the last patch stays in the last bucket; without the scale, positions land one bucket over
and the ONNX model's logits differ from eager by up to 0.08. An epsilon added before a division turns a zero
norm into NaN.

A pattern constant 0 or 1 stands for an identity element, and a graph constant is one only when it equals it
exactly (any dtype's 1.0 is exactly 1), so while the current thread exports, those patterns match only exact
zeros and ones. The tolerance stays for every other constant: fusion patterns spell ``sqrt(2 / pi)`` and the like
in double precision and need it to match a model's float32 constants.
"""

from __future__ import annotations

from ... import kit

#: The pattern values that name identity elements (``Mul``/``Div`` by 1, ``Add``/``Sub`` of 0).
IDENTITIES = (0, 1)


def _names_identity(expected) -> bool:
    values = expected if isinstance(expected, list) else [expected]
    return bool(values) and all(isinstance(v, (int, float)) and v in IDENTITIES for v in values)


def _equals_exactly(value, expected) -> bool:
    """Whether the graph constant ``value`` (already matched within the tolerance) is exactly ``expected``."""
    found = value.const_value.numpy().reshape(-1)
    wanted = expected if isinstance(expected, list) else [expected]
    return len(found) == len(wanted) and all(found[i] == wanted[i] for i in range(len(wanted)))


def install_exact_identities(record, owner, name, original):
    """Installer of ``torch.onnx.exact_identity_constants`` on ``SimplePatternMatcher._match_constant``. Wrapped,
    not rewritten: it needs of the original only its answer and the matcher's ``fail``."""
    patch_id = record.spec.id

    def match_constant(self, pattern_constant, value):
        matched = original(self, pattern_constant, value)
        if not matched or not kit.in_export():
            return matched
        expected = pattern_constant.value
        if not _names_identity(expected) or _equals_exactly(value, expected):
            return matched
        kit.count_hit(patch_id)  # the one case this row changes: a near-identity that is not one
        return self.fail(f"{value.name} is close to {expected} but not equal to it: not a no-op ({patch_id})")

    return kit.install_always_on(record, owner, name, original, match_constant)
