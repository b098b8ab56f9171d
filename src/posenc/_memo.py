"""Version counters for memoisation on tensors."""

from __future__ import annotations

from torch import Tensor


def version(t: Tensor) -> int | None:
    """``t._version``, or None for an inference tensor (made under ``torch.inference_mode``),
    which keeps no version counter: an in-place change to it cannot be detected, so callers
    must not serve a memo on its identity alone."""
    return None if t.is_inference() else t._version
