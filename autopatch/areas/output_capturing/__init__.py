"""transformers 5.x output capturing (``capture_outputs``): its hooks installed before an export traces."""
