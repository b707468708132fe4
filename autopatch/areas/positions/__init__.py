"""Learned position embeddings whose position ids a model counts from the attention mask."""
