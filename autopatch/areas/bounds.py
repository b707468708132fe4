"""Version bounds that several areas (and the export entry points) share. Torch-free: read at start-up."""

#: The torch releases the torch rows and the entry points were measured on (benchmarks/torch_release.sh: 2.9.1,
#: 2.13.0, 2.14.1, 2.15.0); fingerprints, not an upper bound, catch a newer release that rewrote a patched function.
TORCH = ("torch>=2.9",)

#: The rows inside torch.onnx's exporter: measured on 2.13.0, 2.14.1 and 2.15.0. On 2.9.1 its exporter differs
#: (other names, other decompositions) and their tests fail, so they are not installed there.
TORCH_ONNX = ("torch>=2.13",)
