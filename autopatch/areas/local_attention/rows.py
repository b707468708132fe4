"""The rows of this area. Encoders whose attention is local to a sliding window plus a few global tokens, computed
from chunks of a text padded to a multiple of the window: Longformer and LED's encoder.
"""

from __future__ import annotations

from ...spec import PatchSpec

ROWS = (
    PatchSpec(
        id="transformers.local_attention.longformer_band",
        family="transformers",
        trigger="transformers.models.longformer.modeling_longformer",
        target="LongformerSelfAttention.forward",
        mode="route",
        replacement="autopatch.areas.local_attention.longformer:longformer_band",
        requires=("transformers>=4.56",),
        fingerprints=("d801cfaf131b", "065f1d7b340c"),  # 5.23.0, 4.57.6
        reason="Longformer's window attention reads its scores from overlapping chunks (view + as_strided, whose "
        "contiguity checks guard on the chunk count being 1 as traced), divides sizes with torch.div (a tensor read "
        "back as a size: 'Could not guard on data-dependent expression Eq(u1, 1)') and branches on whether any "
        "token is global (data). The same window by index, for any length, the global columns always there (an "
        "unused one has probability exactly 0).",
    ),
    PatchSpec(
        id="transformers.local_attention.longformer_unpadded",
        family="transformers",
        trigger="transformers.models.longformer.modeling_longformer",
        target="LongformerModel._pad_to_window_size",
        mode="route",
        replacement="autopatch.areas.local_attention.longformer:longformer_unpadded",
        requires=("transformers>=4.56",),
        fingerprints=("8471778c2477",),  # 4.57.6, 5.23.0
        needs=("transformers.local_attention.longformer_band",),
        reason="Longformer pads the text to a multiple of attention_window behind `if padding_len > 0`: a guard on "
        "the length, so a program takes only lengths padded as traced. With the band attention, which takes any "
        "length, nothing is padded: a padded token is a masked key (probability exactly 0) and a query cut from the "
        "output, so every real token's values are upstream's.",
    ),
    PatchSpec(
        id="transformers.local_attention.led_band",
        family="transformers",
        trigger="transformers.models.led.modeling_led",
        target="LEDEncoderSelfAttention.forward",
        mode="route",
        replacement="autopatch.areas.local_attention.longformer:longformer_band",
        requires=("transformers>=4.56",),
        fingerprints=("88237b4877b4", "efa0f14c18eb"),  # 5.23.0, 4.57.6
        reason="LED's encoder attention is a copy of Longformer's: the same chunks, torch.div of sizes and branch "
        "on global tokens; the same window by index.",
    ),
    PatchSpec(
        id="transformers.local_attention.led_unpadded",
        family="transformers",
        trigger="transformers.models.led.modeling_led",
        target="LEDEncoder._pad_to_window_size",
        mode="route",
        replacement="autopatch.areas.local_attention.longformer:led_unpadded",
        requires=("transformers>=4.56",),
        fingerprints=("ec674afed64e",),  # 4.57.6, 5.23.0
        needs=("transformers.local_attention.led_band",),
        reason="LED's encoder pads to a multiple of attention_window and unpads its output behind `if padding_len "
        "> 0` (guards on the length); with the band attention nothing is padded, as for Longformer.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step).
SUMMARIES = (
    (
        ("transformers.local_attention.longformer_band", "transformers.local_attention.longformer_unpadded",
         "transformers.local_attention.led_band", "transformers.local_attention.led_unpadded"),
        "Longformer's and LED's encoders padded the text to a multiple of the window and read the window's scores "
        "from strided chunks (guards on the length and the chunk count), with sizes divided by `torch.div` and a "
        "branch on whether any token is global: the window by index for any length, the global columns always "
        "there, no padding (a padded token's probability is exactly 0).",
    ),
)
