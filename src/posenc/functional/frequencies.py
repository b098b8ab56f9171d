"""Frequencies and angles shared by sinusoidal tables and rotary encodings."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .._validate import (
    ANGLE_POSITION_LIMIT,
    check_even,
    check_position_range,
    check_positive_float,
    check_positive_int,
)
from ._xp import namespace, np_xp, widest_float


def rope_inv_freq(
    dim: int, *, base: float = 10000.0, xp: ModuleType | None = None, device: Any = None
) -> Any:
    """Inverse frequencies θ_i = base^(-2i/dim), i = 0 .. dim/2 - 1 (Su et al. 2021, eq. 15).

    The same series sets the sinusoidal table's wavelengths (Vaswani et al. 2017, sec. 3.5).
    Computed in float64 (float32 on JAX without x64; cast down by the caller), in namespace
    ``xp`` (default NumPy).
    Shapes: returns (dim/2,).
    Raises: ValueError for an odd/non-positive ``dim`` or a ``base`` <= 0.
    """
    check_even(dim, "dim")
    return inv_freq_series(dim, base=base, xp=xp, device=device)


def inv_freq_series(
    dim: int, *, base: float = 10000.0, xp: ModuleType | None = None, device: Any = None
) -> Any:
    """θ_i = base^(-2i/dim) for every even column 2i < dim: i = 0 .. ceil(dim/2) - 1, any
    width (an odd one has one more θ than it has pairs: a sinusoidal table's last, sine-only
    column). Float64 in ``xp`` (default NumPy). Shapes: returns (ceil(dim/2),).
    Raises: TypeError/ValueError for a ``dim`` that is not an int >= 1 or a ``base`` <= 0.
    """
    check_positive_int(dim, "dim")
    check_positive_float(base, "base")
    xp = np_xp if xp is None else xp
    exponent = xp.arange(0, dim, 2, dtype=widest_float(xp), device=device) / dim  # (P,)
    return 1.0 / (float(base) ** exponent)


def wavelengths(inv_freq: Any) -> Any:
    """Wavelength of each pair, λ_i = 2π / θ_i, in positions. Shapes: (P,) -> (P,)."""
    return 2 * 3.141592653589793 / inv_freq


def angles(pos: Any, inv_freq: Any) -> Any:
    """Rotation angles pos·θ_i, computed in float64 so large positions keep their digits.

    float32 ``pos * inv_freq`` loses ~pos·2^-24 rad (0.06 rad at pos 1e6); float64 keeps 1e-10.
    Supported positions: |pos| <= 2^40 (``ANGLE_POSITION_LIMIT``), where the float64 angle's
    error |pos|·θ·2^-53 stays below 2^-13 rad; past it RoPE scores and sinusoidal rows go
    silently wrong (shifted by 2^53 scores move by units, at 2^62 neighbouring rows are
    equal), so they are refused.
    Shapes: pos (...,) integer, inv_freq (P,) -> (..., P) float64 (float32: JAX without x64).
    Raises: ValueError for a position outside [-2^40, 2^40] (checked where values are free).
    """
    check_position_range(pos, ANGLE_POSITION_LIMIT)
    xp = namespace(pos, inv_freq)
    wide = widest_float(xp)
    return xp.astype(pos, wide)[..., None] * xp.astype(inv_freq, wide)
