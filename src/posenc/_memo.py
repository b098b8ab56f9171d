"""Version counters for memoisation on tensors."""

from __future__ import annotations

import torch
from torch import Tensor


def version(t: Tensor) -> int | None:
    """``t._version``, or None when ``t`` must not be memoised: an inference tensor (made under
    ``torch.inference_mode``) keeps no version counter, so an in-place change to it cannot be
    detected; while Dynamo traces, neither can be read."""
    if torch.compiler.is_compiling() or t.is_inference():
        return None
    return t._version
