"""Array-namespace resolution: one formula runs on NumPy, PyTorch and JAX arrays."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import array_api_compat
import array_api_compat.numpy as np_xp
import array_api_compat.torch as torch_xp
import torch

__all__ = ["namespace", "np_xp", "torch_xp"]


def namespace(*arrays: Any) -> ModuleType:
    """The array-API namespace of ``arrays``; torch tensors skip the (cached) lookup.

    The shortcut keeps ``torch.compile`` free of graph breaks from ``array_namespace``.
    """
    if all(isinstance(a, torch.Tensor) for a in arrays if a is not None):
        return torch_xp
    return array_api_compat.array_namespace(*(a for a in arrays if a is not None))
