"""KERPLE: kernelized relative positional bias (Chi et al. 2022, arXiv:2205.09921)."""

from __future__ import annotations

from typing import Any, Literal

from .._validate import check_positive_float, check_positive_int
from ._xp import namespace
from .relative import relative_offsets

KerpleVariant = Literal["log", "power"]
KERPLE_VARIANTS: tuple[KerpleVariant, ...] = ("log", "power")


def check_kerple(
    *,
    n_heads: int,
    variant: str,
    eps: float,
    init_r1: float | None = None,
    init_r2: float | None = None,
) -> float | None:
    """Validate Kerple's settings; return r2's upper bound.

    Validate Kerple's settings (one check for the torch and Flax modules); returns r2's upper
    bound: 2 for the power kernel (|i - j|^r2 must stay conditionally positive definite), else None.

    Raises: ValueError naming the parameter and its allowed range.
    """
    check_positive_int(n_heads, "n_heads")
    if variant not in KERPLE_VARIANTS:
        raise ValueError(f"variant must be one of {KERPLE_VARIANTS}, got {variant!r}")
    check_positive_float(eps, "eps")
    if eps >= 1.0:
        raise ValueError(f"eps (the floor of r1, r2) must be in (0, 1), got {eps}")
    r2_max = 2.0 if variant == "power" else None
    for value, what, high in ((init_r1, "init_r1", None), (init_r2, "init_r2", r2_max)):
        if value is not None:
            check_positive_float(value, what)
            if high is not None and value > high:
                raise ValueError(f"{what} must be in (0, {high}] for {variant!r}, got {value}")
    return r2_max


def kerple_log(distance: Any, r1: Any, r2: Any) -> Any:
    """Logarithmic kernel bias -r1·log(1 + r2·d), r1, r2 > 0 per head (Chi et al. 2022).

    Shapes: distance (..., Tq, Tk) float, d = |i - j| >= 0; r1, r2 (H,) -> (..., H, Tq, Tk).
    """
    xp = namespace(distance, r1, r2)
    d = distance[..., None, :, :]  # (..., 1, Tq, Tk)
    return -r1[:, None, None] * xp.log1p(r2[:, None, None] * d)


def kerple_power(distance: Any, r1: Any, r2: Any) -> Any:
    """Power kernel bias -r1·d^r2, r1 > 0 and 0 < r2 <= 2 per head (Chi et al. 2022).

    r2 = 1 with r1 = ALiBi's slopes is ALiBi.
    Shapes: distance (..., Tq, Tk) float, d = |i - j| >= 0; r1, r2 (H,) -> (..., H, Tq, Tk).
    """
    xp = namespace(distance, r1, r2)
    d = distance[..., None, :, :]  # (..., 1, Tq, Tk)
    return -r1[:, None, None] * xp.pow(d, r2[:, None, None])


def kerple_bias(q_pos: Any, k_pos: Any, r1: Any, r2: Any, *, variant: KerpleVariant = "log") -> Any:
    """KERPLE bias of every query/key pair, d = |i - j| in r1's dtype (``kerple_log``/``_power``).

    The official code (chijames/KERPLE) applies it to causal attention, where d = i - j; the
    absolute value makes it finite and symmetric on every pair.
    Shapes: q_pos (..., Tq), k_pos (..., Tk) integer; r1, r2 (H,) -> (..., H, Tq, Tk).
    Raises: ValueError for a variant other than "log"/"power".
    Paper: Chi et al. 2022, arXiv:2205.09921.
    """
    if variant not in KERPLE_VARIANTS:
        raise ValueError(f"variant must be one of {KERPLE_VARIANTS}, got {variant!r}")
    xp = namespace(q_pos, k_pos, r1, r2)
    distance = xp.abs(xp.astype(relative_offsets(q_pos, k_pos), r1.dtype))  # (..., Tq, Tk)
    kernel = kerple_log if variant == "log" else kerple_power
    return kernel(distance, r1, r2)
