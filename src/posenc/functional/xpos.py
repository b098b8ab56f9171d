"""xPos: RoPE with an exponential decay (Sun et al. 2022, arXiv:2212.10554, sec. 3.2)."""

from __future__ import annotations

import math
from typing import Any

from .._validate import check_even, check_positive_float
from ._xp import device_of, namespace, widest_float


def _check(rotary_dim: int, scale_base: float, gamma: float) -> None:
    check_even(rotary_dim, "rotary_dim")
    check_positive_float(scale_base, "scale_base")
    check_positive_float(gamma, "gamma")


def xpos_scale(pos: Any, rotary_dim: int, *, scale_base: float = 512.0, gamma: float = 0.4) -> Any:
    """Per-pair scale ζ_i^(n / scale_base), ζ_i = (2i/d + γ) / (1 + γ), i = 0 .. d/2 - 1.

    Queries at n are scaled by ζ^(n/scale_base) and keys at m by ζ^(-m/scale_base), so
    q·k carries ζ^((n - m)/scale_base): a decay with distance that RoPE alone lacks. The
    torchscale code centres n and m on the sequence middle; the product is the same, and
    uncentred positions keep cached keys valid. float32 overflows past ~36k positions.
    Shapes: pos (...,) integer -> (..., d/2) float64.
    Raises: ValueError for an odd rotary_dim, scale_base <= 0 or gamma <= 0.
    Paper: Sun et al. 2022, arXiv:2212.10554, sec. 3.2.
    """
    _check(rotary_dim, scale_base, gamma)
    xp = namespace(pos)
    wide = widest_float(xp)  # float64 (float32 on JAX without x64)
    i2 = xp.arange(0, rotary_dim, 2, dtype=wide, device=device_of(pos))
    zeta = (i2 / rotary_dim + gamma) / (1.0 + gamma)  # (P,)
    power = xp.astype(pos, wide)[..., None] / float(scale_base)  # (..., 1)
    return zeta**power  # (..., P)


def xpos_max_position(
    rotary_dim: int, max_value: float, *, scale_base: float = 512.0, gamma: float = 0.4
) -> int:
    """The largest position xPos's scales can reach without overflow.

    Largest position n at which xPos's key scale ζ_0^(-n/scale_base) (ζ_0 = γ/(1 + γ), the
    fastest decay) stays 100x below ``max_value``, the largest number of the dtype it is written
    in (the query scale ζ_0^(n/scale_base) is then as far above 0; at -n the two swap): 34k
    positions in float32 and bfloat16, 2.6k in float16 (defaults). Raises: as ``xpos_scale``.
    Paper: Sun et al. 2022, arXiv:2212.10554, sec. 3.2.
    """
    _check(rotary_dim, scale_base, gamma)
    decay = -math.log(gamma / (1.0 + gamma))  # -ln ζ_0 > 0
    return int(scale_base * (math.log(max_value) - math.log(100.0)) / decay)


def check_xpos_range(
    largest: int,
    rotary_dim: int,
    max_value: float,
    dtype: str,
    *,
    scale_base: float = 512.0,
    gamma: float = 0.4,
) -> None:
    """Raise ValueError for a position past xPos's overflow limit.

    Raise ValueError when position ``largest`` (the one of largest magnitude) is past
    ±``xpos_max_position`` for a dtype of largest value ``max_value`` (named ``dtype``): keys
    past +limit or queries past -limit would overflow to inf and the scores turn NaN."""
    limit = xpos_max_position(rotary_dim, max_value, scale_base=scale_base, gamma=gamma)
    if abs(largest) > limit:
        raise ValueError(
            f"xPos scales keys by ζ^(-n/{scale_base:g}) and queries by ζ^(n/{scale_base:g}): "
            f"position {largest} overflows {dtype} (largest safe position {limit}, smallest "
            f"-{limit}); use a wider dtype or a larger scale_base"
        )
