"""Vision-language models that pack every image's patches into one sequence (Qwen2-VL and its kin, on 5.23 and
in 4.57's sources)."""
