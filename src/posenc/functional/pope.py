"""PoPE: polar-coordinate position embedding (Gopalakrishnan et al. 2025, arXiv:2509.10534)."""

from __future__ import annotations

from typing import Any

from .._validate import check_real_floating
from ._xp import namespace
from .rotary import rope_cos_sin


def softplus(x: Any) -> Any:
    """log(1 + e^x), computed stably as logaddexp(0, x). Shapes: any -> same."""
    xp = namespace(x)
    return xp.logaddexp(xp.zeros_like(x), x)


def pope_polar(x: Any, cos: Any, sin: Any) -> Any:
    """Polar features of x: magnitude μ_c = softplus(x_c), phase φ_c (the "what" and the "where").

    Component c becomes the complex number μ_c e^(iφ_c), stored as real parts then imaginary
    parts, so that for a query at phase tθ_c and a key at sθ_c + δ_c the dot product of the
    outputs is Re[q̃^H k̃] = Σ_c μ_qc μ_kc cos((s - t)θ_c + δ_c). Runs in the wider of x's and
    cos's dtypes; the result has x's dtype.
    Shapes: x (..., T, D); cos, sin broadcastable to (..., T, D) -> (..., T, 2D).
    Raises: TypeError for x without a real floating dtype; ValueError when the phases do not
    have D components.
    Paper: Gopalakrishnan et al. 2025, arXiv:2509.10534.
    """
    xp = namespace(x, cos, sin)
    check_real_floating(x, "x")
    for name, phase in (("cos", cos), ("sin", sin)):
        if phase.shape[-1] != x.shape[-1]:
            raise ValueError(
                f"PoPE needs one phase per feature: x has {x.shape[-1]}, "
                f"{name} has {phase.shape[-1]}"
            )
    work = xp.result_type(x.dtype, cos.dtype)
    mag = softplus(xp.astype(x, work))  # (..., T, D)
    return xp.astype(xp.concat([mag * cos, mag * sin], axis=-1), x.dtype)  # (..., T, 2D)


def pope_features(
    x: Any, pos: Any, inv_freq: Any, shift: Any = None, *, cos_sin: tuple[Any, Any] | None = None
) -> Any:
    """PoPE's features of q or k at phases pos·θ_c - shift_hc.

    ``pope_polar`` of x at phases pos·θ_c - shift_hc; cos and sin in float32 or x's wider
    dtype. ``shift``: the queries' phase bias δ, or None. ``cos_sin``: cos, sin of pos·θ
    (``rope_cos_sin(pos, inv_freq)``, float64: the widest float), made here when None; a
    model shares them by its layers. δ enters by angle subtraction in float64,
    cos(a - δ) = cos a cos δ + sin a sin δ, sin(a - δ) = sin a cos δ - cos a sin δ.
    Shapes: x (B, H, T, D), pos (T,) | (B, T), inv_freq θ (D,), shift (H, D), cos_sin (T, D) |
    (B, T, D) each -> (B, H, T, 2D).
    Paper: Gopalakrishnan et al. 2025, arXiv:2509.10534.
    """
    xp = namespace(x, pos)
    cos, sin = rope_cos_sin(pos, inv_freq) if cos_sin is None else cos_sin
    if cos.ndim == 3:
        cos, sin = xp.expand_dims(cos, axis=1), xp.expand_dims(sin, axis=1)  # (B, 1, T, D)
    if shift is not None:
        delta = xp.astype(shift, cos.dtype)[:, None, :]  # (H, 1, D)
        cos_d, sin_d = xp.cos(delta), xp.sin(delta)
        cos, sin = cos * cos_d + sin * sin_d, sin * cos_d - cos * sin_d  # (B|1, H, T, D)
    work = xp.result_type(x.dtype, xp.float32)
    return pope_polar(x, xp.astype(cos, work), xp.astype(sin, work))
