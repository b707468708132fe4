"""Routes for 4.x TAPAS's segmented operations (``positions/rows.py`` says which and why).

TAPAS restarts its position ids in every table cell (``reset_position_index_per_cell``, the config's default): it
groups tokens by (column, row) with an ``IndexMap`` and takes each cell's first position with a segment minimum
(``_segment_reduce``, which its question-answering head uses for its cell and column scores too). 4.x keeps every
segment count in a tensor (``IndexMap`` wraps its ``num_segments``; ``flatten`` multiplies it by a batch size it
makes a tensor of) and reads it back to size tensors (``int(...)``, ``.tolist()``): under export each read is a
data-dependent value the trace cannot size a tensor with. A count is a config value times the batch, nothing about
it is data: kept as a Python int (a SymInt for the batch), it sizes the same tensors without a read. The routed
``_segment_reduce`` flattens and builds its output index itself, so ``flatten`` and ``range_index_map`` (which it
alone calls) are left as they are; counts given as tensors still take the original functions.
"""

from __future__ import annotations

import math

from ...kit import calls_original, runtime


@calls_original
def index_map_count_kept(original, self, indices, num_segments, batch_dims=0):
    """``IndexMap.__init__`` with an int count: the count kept as it is, not wrapped in a tensor."""
    if not runtime.is_size(num_segments):
        return original(self, indices, num_segments, batch_dims)
    self.indices = indices
    self.num_segments = num_segments
    self.batch_dims = batch_dims


def _flattened(index):
    """``index``'s indices over one dimension, each batch element's segments shifted past the previous ones', and
    their count: ``num_segments`` times the batch."""
    import torch

    batch_shape = index.batch_shape()
    batch = math.prod(batch_shape)
    # one offset per batch element, broadcast over the element's own dimensions
    offsets = torch.arange(batch, device=index.indices.device) * index.num_segments
    offsets = offsets.view(*batch_shape, *([1] * (index.indices.dim() - index.batch_dims)))
    return (offsets + index.indices).view(-1), index.num_segments * batch


def _range_indices(batch_shape, count, device):
    """``range(count)`` repeated over ``batch_shape``."""
    import torch

    batch_shape = list(batch_shape)
    return torch.arange(count, device=device).view([1] * len(batch_shape) + [count]).repeat(batch_shape + [1])


def _index_map(indices, count, batch_dims):
    from transformers.models.tapas.modeling_tapas import IndexMap

    return IndexMap(indices=indices, num_segments=count, batch_dims=batch_dims)


@calls_original
def segment_reduce_counted(original, values, index, segment_reduce_fn, name):
    """``_segment_reduce`` for an int count: the same ``scatter_reduce`` into the same zeros, the sizes it reshapes
    to given as sizes; its output index on the indices' device, as the original's."""
    import torch

    if not runtime.is_size(index.num_segments):
        return original(values, index, segment_reduce_fn, name)
    flat_indices, count = _flattened(index)
    vector_shape = list(values.size()[index.indices.dim():])
    flat_values = values.reshape([-1] + vector_shape)
    out = torch.zeros(count, dtype=torch.float, device=flat_values.device)
    reduced = out.scatter_reduce(dim=0, index=flat_indices.long(), src=flat_values.float(), reduce=segment_reduce_fn,
                                 include_self=False)
    batch_shape = list(index.batch_shape())
    output_values = reduced.clone().view(batch_shape + [index.num_segments] + vector_shape).to(values.dtype)
    device = index.indices.device
    output_index = _index_map(_range_indices(batch_shape, index.num_segments, device), index.num_segments,
                              len(batch_shape))
    return output_values, output_index
