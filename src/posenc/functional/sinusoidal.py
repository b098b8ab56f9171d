"""Sinusoidal absolute position table (Vaswani et al. 2017, arXiv:1706.03762, sec. 3.5)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .._validate import check_even
from ._xp import device_of, namespace, np_xp, widest_int
from .frequencies import angles, rope_inv_freq


def sinusoidal_table(
    n_positions: Any, dim: int, *, base: float = 10000.0, xp: ModuleType | None = None
) -> Any:
    """Vaswani's table, sin and cos interleaved:

    PE[p, 2i] = sin(p / base^(2i/dim)),  PE[p, 2i+1] = cos(p / base^(2i/dim)).

    ``n_positions`` is an int N (positions 0..N-1, in namespace ``xp``, default NumPy) or an
    integer array of positions of any shape (its namespace is used). Computed in float64.
    Shapes: N -> (N, dim); pos (...,) -> (..., dim).
    Raises: ValueError for an odd ``dim``, a negative N, or base <= 0.
    """
    check_even(dim, "dim")
    if isinstance(n_positions, int):
        if n_positions < 0:
            raise ValueError(f"n_positions must be >= 0, got {n_positions}")
        xp = np_xp if xp is None else xp
        pos = xp.arange(n_positions, dtype=widest_int(xp))
    else:
        pos = n_positions
        xp = namespace(pos)
    inv_freq = rope_inv_freq(dim, base=base, xp=xp, device=device_of(pos))
    ang = angles(pos, inv_freq)  # (..., P)
    table = xp.stack([xp.sin(ang), xp.cos(ang)], axis=-1)  # (..., P, 2)
    return xp.reshape(table, (*ang.shape[:-1], dim))  # (..., dim), sin at even, cos at odd
