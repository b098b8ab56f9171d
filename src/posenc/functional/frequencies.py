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


def p_rope_inv_freq(
    dim: int,
    p: float,
    *,
    base: float = 10000.0,
    xp: ModuleType | None = None,
    device: Any = None,
) -> Any:
    """p-RoPE's frequencies: RoPE's with the lowest share set to 0.

    p-RoPE's frequencies (Barbero et al. 2024, arXiv:2410.06205, sec. 6): RoPE's
    θ_i = base^(-2i/dim) for the ⌊p·dim/2⌋ highest, θ_i = 0 (pair i not rotated) for the rest.

    p = 1 is RoPE, p = 0 rotates nothing (NoPE). The kept count is ``int(p * dim // 2)``, as
    transformers' ``proportional`` rope type (Gemma 4) computes it with p its
    ``partial_rotary_factor``. Float64 in ``xp`` (default NumPy).
    Shapes: returns (dim/2,).
    Raises: ValueError for an odd/non-positive ``dim``, a ``base`` <= 0 or p outside [0, 1].
    """
    if isinstance(p, bool) or not isinstance(p, int | float):
        raise TypeError(f"p must be a float in [0, 1], got {type(p).__name__}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p (the share of frequencies kept) must be in [0, 1], got {p}")
    inv_freq = rope_inv_freq(dim, base=base, xp=xp, device=device)  # (dim/2,)
    xp = namespace(inv_freq)
    kept = int(p * dim // 2)
    index = xp.arange(dim // 2, device=device)
    return xp.where(index < kept, inv_freq, xp.zeros_like(inv_freq))


def inv_freq_series(
    dim: int, *, base: float = 10000.0, xp: ModuleType | None = None, device: Any = None
) -> Any:
    """The sinusoidal / RoPE frequency series θ_i = base^(-2i/dim).

    θ_i = base^(-2i/dim) for every even column 2i < dim: i = 0 .. ceil(dim/2) - 1, any
    width (an odd one has one more θ than it has pairs: a sinusoidal table's last, sine-only
    column). Float64 in ``xp`` (default NumPy). Shapes: returns (ceil(dim/2),).
    Raises: TypeError/ValueError for a ``dim`` that is not an int >= 1 or a ``base`` <= 0.
    Paper: Vaswani et al. 2017, arXiv:1706.03762, sec. 3.5; RoPE's, Su et al. 2021,
    arXiv:2104.09864.
    """
    check_positive_int(dim, "dim")
    check_positive_float(base, "base")
    xp = np_xp if xp is None else xp
    exponent = xp.arange(0, dim, 2, dtype=widest_float(xp), device=device) / dim  # (P,)
    return 1.0 / (float(base) ** exponent)


def wavelengths(inv_freq: Any) -> Any:
    """Wavelength λ_i = 2π / θ_i of each rotary pair, in positions.

    Wavelength of each pair, λ_i = 2π / θ_i, in positions; infinite for a pair that does not
    turn (θ_i = 0: p-RoPE's dropped frequencies). Shapes: (P,) -> (P,).
    Paper: Vaswani et al. 2017, arXiv:1706.03762, sec. 3.5; RoPE's, Su et al. 2021,
    arXiv:2104.09864.
    """
    xp = namespace(inv_freq)
    turns = inv_freq > 0
    safe = xp.where(turns, inv_freq, xp.ones_like(inv_freq))
    return xp.where(turns, 2 * 3.141592653589793 / safe, xp.full_like(inv_freq, float("inf")))


def angles(pos: Any, inv_freq: Any) -> Any:
    """Rotation angles pos·θ_i, computed in float64 so large positions keep their digits.

    float32 ``pos * inv_freq`` loses ~pos·2^-24 rad (0.06 rad at pos 1e6); float64 keeps 1e-10.
    Supported positions: |pos| <= 2^40 (``ANGLE_POSITION_LIMIT``), where the float64 angle's
    error |pos|·θ·2^-53 stays below 2^-13 rad; past it RoPE scores and sinusoidal rows go
    silently wrong (shifted by 2^53 scores move by units, at 2^62 neighbouring rows are
    equal), so they are refused.
    Shapes: pos (...,) integer, inv_freq (P,) -> (..., P) float64 (float32: JAX without x64).
    Raises: ValueError for a position outside [-2^40, 2^40] (checked where values are free).
    Paper: Vaswani et al. 2017, arXiv:1706.03762, sec. 3.5; RoPE's, Su et al. 2021,
    arXiv:2104.09864.
    """
    check_position_range(pos, ANGLE_POSITION_LIMIT)
    xp = namespace(pos, inv_freq)
    wide = widest_float(xp)
    return xp.astype(pos, wide)[..., None] * xp.astype(inv_freq, wide)
