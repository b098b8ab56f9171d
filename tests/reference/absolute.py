"""Absolute tables: Vaswani et al. 2017, sec. 3.5."""

from __future__ import annotations

import math

import numpy as np


def sinusoidal(n_positions: int, dim: int, base: float = 10000.0) -> np.ndarray:
    """PE[p, 2i] = sin(p / base^(2i/dim)), PE[p, 2i+1] = cos(p / base^(2i/dim))."""
    table = np.zeros((n_positions, dim))
    for p in range(n_positions):
        for i in range(dim // 2):
            angle = p / base ** (2 * i / dim)
            table[p, 2 * i] = math.sin(angle)
            table[p, 2 * i + 1] = math.cos(angle)
    return table
