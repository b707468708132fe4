"""State-space models and model-local caches: selective scans, gated delta rules and lightning attention as
torch scans, one-token decode paths, and cache code that takes ``len()`` of a tensor."""
