"""Absolute tables: Vaswani et al. 2017, sec. 3.5."""

from __future__ import annotations

import math

import numpy as np


def sinusoidal(n_positions: int, dim: int, base: float = 10000.0) -> np.ndarray:
    """PE[p, 2i] = sin(p / base^(2i/dim)), PE[p, 2i+1] = cos(p / base^(2i/dim)), column by
    column (an odd dim's last column is the sine of its i = (dim - 1)/2)."""
    table = np.zeros((n_positions, dim))
    for p in range(n_positions):
        for c in range(dim):
            i = c // 2
            angle = p / base ** (2 * i / dim)
            table[p, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    return table
