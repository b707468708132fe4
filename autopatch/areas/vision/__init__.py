"""Vision-language models: placeholder masks and image features without data-dependent guards (Llava's family,
Idefics, SmolVLM...)."""
