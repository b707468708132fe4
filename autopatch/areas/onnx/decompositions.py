"""Decompositions ``torch.onnx.export`` gets from torch that leave a graph its own later passes cannot read.

``torch.onnx.export(dynamo=True)`` decomposes the exported program with torch's table minus the operators
torchlib translates (``_decomp.create_onnx_friendly_decomposition_table``), then inserts explicit casts where
operands' dtypes differ (``InsertTypePromotion``), re-choosing each cast node's overload from its new arguments.

* ``torch.onnx.rsub_of_a_number``: torchlib leaves ``rsub`` to torch's decomposition (``torch._refs.rsub``), which
  calls ``torch.sub(other, self)`` and so records ``aten.sub.Tensor(1.0, mask)``: a number where the schema
  wants a tensor, which torch runs but no overload of ``sub`` accepts. When ``self`` needs a cast (an integer
  mask under ``1.0 - mask``: XLNet's attention mask, Mllama's cross-attention mask, any model handed the
  tokenizer's int64 mask), the type-promotion pass looks for an overload of ``sub`` taking a number first, finds
  none, and the conversion stops ("Cannot find a compatible OpOverload for aten.sub"; plain torch.export is
  fine). In that case only (a number, ``self`` cast, ``alpha`` 1), decomposed here as ``other + (-self)`` with
  ``self`` first cast to the result dtype: every node takes a tensor first, and the value is the same bit for bit
  (negation is exact; ``a + (-b)`` is ``a - b`` in IEEE arithmetic and modulo 2**n for integers). Every other
  rsub keeps torch's decomposition, which converts.
"""

from __future__ import annotations

import functools

from ... import kit

RSUB_OF_A_NUMBER = "torch.onnx.rsub_of_a_number"


def rsub_of_a_number(self, other, dtype):
    """``other - self`` for a number ``other`` and a ``self`` whose dtype differs from the result's, ``dtype``:
    ``self`` cast, negated, plus the number (the only nodes are ones whose first argument is a tensor)."""
    import torch

    kit.count_hit(RSUB_OF_A_NUMBER)
    self = torch.ops.prims.convert_element_type.default(self, dtype)
    return torch.ops.aten.add.Tensor(torch.ops.aten.neg.default(self), other)


def _cast_result_dtype(self, other, alpha):
    """The result dtype in the only case torch.onnx's type promotion fails on (a number first after a cast of
    ``self``), else None: everything else keeps torch's nodes (ONNX's Neg has no unsigned types: a uint8 ``self``
    cast to nothing else stays)."""
    import torch
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    if alpha != 1 or isinstance(other, torch.Tensor):
        return None
    dtype = elementwise_dtypes(self, other, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
    return dtype if self.dtype != dtype else None


def _with_rsub(table: dict) -> dict:
    """The table with torch's rsub decompositions wrapped, where it has them (a torchlib that translates rsub
    itself leaves them out, and then so do we)."""
    import torch

    for overload in (torch.ops.aten.rsub.Scalar, torch.ops.aten.rsub.Tensor):
        torch_decomposition = table.get(overload)
        if torch_decomposition is None:
            continue

        @functools.wraps(torch_decomposition)
        def decomposition(self, other, alpha=1, *, _torch_decomposition=torch_decomposition):
            dtype = _cast_result_dtype(self, other, alpha)
            if dtype is not None:
                return rsub_of_a_number(self, other, dtype)
            return _torch_decomposition(self, other, alpha=alpha)

        table[overload] = decomposition
    return table


def install_rsub_of_a_number(record, owner, name, original):
    """Installer of ``torch.onnx.rsub_of_a_number`` on ``_decomp.create_onnx_friendly_decomposition_table`` (module
    level, looked up by ``_fx_passes`` at each call): the table changes only while the current thread exports."""

    @functools.wraps(original)
    def create_onnx_friendly_decomposition_table(*args, **kwargs):
        table = original(*args, **kwargs)
        return _with_rsub(table) if kit.in_export() else table

    return kit.install_always_on(record, owner, name, original, create_onnx_friendly_decomposition_table)
