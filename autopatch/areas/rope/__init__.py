"""RoPE: transformers' ``dynamic_rope_update`` (``rope_type="dynamic"``, 4.x ``"longrope"``) without a Python ``if``."""
