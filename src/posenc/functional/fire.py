"""FIRE: functional interpolation for relative positions (Li et al. 2023, arXiv:2310.04418)."""

from __future__ import annotations

from typing import Any

from ._xp import namespace
from .relative import relative_offsets


def fire_psi(x: Any, c: Any) -> Any:
    """FIRE's monotone transform ψ(x) = log(|c·x| + 1) (the paper's ψ(x) = log(cx + 1), c > 0;
    the absolute value as in its reference code keeps negative offsets and c finite).

    Shapes: x (...,) float, c scalar or 0-d array -> (...,).
    """
    xp = namespace(x)
    return xp.log1p(xp.abs(c * x))


def fire_distance(q_pos: Any, k_pos: Any, c: Any, threshold: Any, *, eps: float = 1e-6) -> Any:
    """Progressively interpolated distance ψ(i - j) / (ψ(max(L, i)) + eps), FIRE's MLP input.

    i is the query's position, j the key's, L the learnable ``threshold``: queries before L
    share the normaliser ψ(L), later ones map all their keys into [0, 1] (Li et al. 2023,
    progressive interpolation, as in the paper's appendix pseudocode).
    ``c`` and ``threshold`` are 0-d float arrays (the arithmetic runs in their dtype).
    Shapes: q_pos (..., Tq), k_pos (..., Tk) integer -> (..., Tq, Tk) in [0, 1] for |i - j| <= i.
    """
    xp = namespace(q_pos, k_pos, c, threshold)
    dtype = xp.result_type(c.dtype, threshold.dtype)
    offsets = xp.astype(relative_offsets(q_pos, k_pos), dtype)  # (..., Tq, Tk)
    i = xp.astype(q_pos, dtype)  # (..., Tq)
    normaliser = fire_psi(xp.maximum(i, threshold), c) + eps  # (..., Tq)
    return fire_psi(offsets, c) / normaliser[..., :, None]
