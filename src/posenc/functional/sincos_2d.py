"""The 2-D sin-cos position table of MAE (He et al. 2022, arXiv:2111.06377; its released
``get_2d_sincos_pos_embed``), as ViTs without learned tables use it."""

from __future__ import annotations

from typing import Any

from .._validate import check_positive_int
from ._xp import device_of, namespace
from .frequencies import angles, rope_inv_freq


def sincos_2d_table(pos: Any, dim: int, *, base: float = 10000.0) -> Any:
    """MAE's fixed 2-D sin-cos table at grid positions (row, column).

    MAE's table at grid positions (row y, column x): half the features encode x, half y,
    each half sines then cosines,

        PE = [sin(x ω), cos(x ω), sin(y ω), cos(y ω)],  ω_i = base^(-i/(dim/4)), i < dim/4.

    The column comes first, as in MAE's code (its ``grid[0]`` holds the column: "w goes
    first"). Computed in float64 (float32: JAX without x64), in the positions' namespace.
    Shapes: pos (..., 2) integer -> (..., dim).
    Raises: ValueError unless dim is a positive multiple of 4 or base > 0.
    Paper: He et al. 2022, arXiv:2111.06377.
    """
    check_positive_int(dim, "dim")
    if dim % 4:
        raise ValueError(f"sincos_2d needs dim divisible by 4, got {dim}")
    xp = namespace(pos)
    omega = rope_inv_freq(dim // 2, base=base, xp=xp, device=device_of(pos))  # (dim/4,)
    halves = []
    for axis in (1, 0):  # x (column), then y (row)
        ang = angles(pos[..., axis], omega)  # (..., dim/4)
        halves += [xp.sin(ang), xp.cos(ang)]
    return xp.concat(halves, axis=-1)  # (..., dim)
