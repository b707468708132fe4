"""Generation helpers that models call inside their own forward or ``prepare_inputs_for_generation``.

4.x ``GenerationMixin._cache_dependant_input_preparation_exporting`` (what ``prepare_inputs_for_generation``
uses while exporting) always gathers ``input_ids[:, cache_position]``. Eager code leaves ids that are already the
new tokens alone (its "Exception 2") and keeps the last tokens when the position is past the ids ("Exception 3").
So a decode step given only its new tokens, the usual hand-written step, exports fine and then every run of the
program raises IndexError. The replacement restores the eager cases, on shapes where it can and with a traced
choice of gather index where the position decides. Route patch: eager code keeps the original.
"""

from __future__ import annotations

import torch

from ...kit import calls_original


@calls_original
def cache_dependant_input_preparation(original, self, input_ids, inputs_embeds, cache_position):
    if inputs_embeds is not None or input_ids.shape[1] < cache_position.shape[0]:
        return original(self, input_ids, inputs_embeds, cache_position)  # the embeddings paths: unchanged
    length, count = input_ids.shape[1], cache_position.shape[0]
    if length == count:  # the ids are the new tokens already (a shape test, known to export)
        return inputs_embeds, input_ids
    last = torch.arange(length - count, length, device=input_ids.device)  # what input_ids[:, -count:] keeps
    index = torch.where(cache_position[-1] >= length, last, cache_position)  # past the ids: the last tokens
    return inputs_embeds, input_ids[:, index]
