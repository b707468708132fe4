"""transformers' own exporters (5.x ``transformers.exporters``): their leaf order and names, and eager's sliding
layers inside them."""
