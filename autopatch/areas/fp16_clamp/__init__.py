"""Control-flow rewriting (family ``rewrite``): encoder layers' float16 clamps behind a tensor condition become
``torch.cond``. The rewriter itself is ``autopatch.rewrite``."""
