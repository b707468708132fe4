"""torch symbolic-shape fixes (family ``torch``): broadcasting, min/max by range, **kwargs dynamic shapes, the
FakeTensor cache of 2.9-2.12, and the debugging aid ``torch.stop_if_static``."""
