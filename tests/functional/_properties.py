"""Shared hypothesis settings, strategies and backends for the property tests.

Every property runs in float64. ``EPS`` is float64's machine epsilon (2^-52); tolerances in
the tests are written as a small multiple of it times the size of what was rounded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from posenc import functional as PF

EPS = float(np.finfo(np.float64).eps)  # 2.22e-16

#: array namespaces the functional API runs on: NumPy goes through the array-API formula,
#: torch through the eager kernel (``_rope_torch``), so both implementations are checked.
BACKENDS = ("numpy", "torch")


#: POSENC_HYPOTHESIS_SCALE=10 runs ten times the examples (a deeper, slower search).
SCALE = float(os.environ.get("POSENC_HYPOTHESIS_SCALE", "1"))


def fast(max_examples: int) -> Callable[[Any], Any]:
    """Bounded example count (times ``SCALE``), no deadline (2 shared cores), no example
    database (it would be written into the working tree); failures print a reproduction blob."""
    return settings(
        max_examples=max(1, round(max_examples * SCALE)),
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


def xp_of(backend: str) -> Any:
    return PF.np_xp if backend == "numpy" else PF.torch_xp


def to_backend(a: np.ndarray, backend: str) -> Any:
    return a if backend == "numpy" else torch.from_numpy(np.ascontiguousarray(a))


def to_numpy(a: Any) -> np.ndarray:
    return a.numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def float_arrays(shape: tuple[int, ...], bound: float = 100.0) -> st.SearchStrategy[np.ndarray]:
    """float64 arrays of ``shape`` with entries 0 or of magnitude in [1e-50, bound]: products
    of two entries stay above 1e-100, far from float64's underflow (2.2e-308), so relative
    error bounds hold (gradual underflow is not what these tests are about)."""
    magnitude = st.floats(1e-50, bound, allow_nan=False, allow_infinity=False, width=64)
    elements = st.one_of(st.just(0.0), magnitude, magnitude.map(lambda v: -v))
    return hnp.arrays(np.float64, shape, elements=elements)


#: RoPE / sinusoidal bases: from tiny (fast rotations) to long-context values (Llama 3: 5e5).
bases = st.floats(1.5, 1e6, allow_nan=False, allow_infinity=False)
