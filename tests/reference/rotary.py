"""RoPE written from Su et al. 2021 (arXiv:2104.09864), eq. 13-15, as explicit 2x2 rotations."""

from __future__ import annotations

import math

import numpy as np


def rope_vector(
    x: np.ndarray,
    position: int,
    *,
    base: float = 10000.0,
    layout: str = "half",
    rotary_dim: int | None = None,
) -> np.ndarray:
    """Rotate one vector x (D,) at ``position``: pair i turned by position * base^(-2i/d)."""
    D = x.shape[0]
    d = D if rotary_dim is None else rotary_dim
    out = np.array(x, dtype=np.float64)
    for i in range(d // 2):
        theta = position * base ** (-2 * i / d)
        a, b = (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)
        c, s = math.cos(theta), math.sin(theta)
        out[a] = x[a] * c - x[b] * s
        out[b] = x[a] * s + x[b] * c
    return out


def rope(x: np.ndarray, positions: np.ndarray, **kwargs: object) -> np.ndarray:
    """x (B, H, T, D), positions (T,) or (B, T) -> rotated (B, H, T, D)."""
    B, H, T, _ = x.shape
    pos = np.broadcast_to(positions, (B, T))
    out = np.empty(x.shape, dtype=np.float64)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                out[b, h, t] = rope_vector(x[b, h, t], int(pos[b, t]), **kwargs)  # type: ignore[arg-type]
    return out
