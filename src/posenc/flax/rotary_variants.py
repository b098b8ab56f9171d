"""Flax nnx rotary variants xPos and PoPE, as ``posenc.encodings.xpos`` / ``pope`` (same
parameter names; formulas from ``posenc.functional``)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from .. import functional as PF
from .._validate import check_even, check_positive_float, check_positive_int
from ..functional import LAYOUTS, Layout
from .base import PositionalEncoding, extreme, register
from .encodings import check_qk

Array = jax.Array


def _check_head_dim(q: Array, head_dim: int) -> None:
    if q.shape[-1] != head_dim:
        raise ValueError(f"q/k must have head_dim={head_dim} features, got {q.shape[-1]}")


@register("xpos", family="rotary")
class XPos(PositionalEncoding):
    """xPos (Sun et al. 2022, arXiv:2212.10554): q_n -> ζ^(n/γ_s) ⊙ R_n q_n, k_m -> ζ^(-m/γ_s) ⊙
    R_m k_m, ζ_i = (2i/d + γ)/(1 + γ); ``scale_base`` γ_s, ``gamma`` γ, RoPE ``layout``/``partial``.
    """

    def __init__(
        self,
        *,
        head_dim: int,
        base: float = 10000.0,
        layout: Layout = "half",
        partial: float = 1.0,
        scale_base: float = 512.0,
        gamma: float = 0.4,
    ) -> None:
        check_even(head_dim, "head_dim")
        for value, what in ((base, "base"), (scale_base, "scale_base"), (gamma, "gamma")):
            check_positive_float(value, what)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.head_dim, self.base, self.layout = head_dim, float(base), layout
        self.partial, self.scale_base, self.gamma = float(partial), float(scale_base), float(gamma)
        self.rotary_dim = PF.rotary_dim(head_dim, self.partial)
        self.inv_freq64 = PF.rope_inv_freq(self.rotary_dim, base=self.base)  # (P,) NumPy

    def rotate_scaled(self, x: Array, pos: Array, sign: int) -> Array:
        """Rotate x (B, H, T, D) at positions (T,) or (B, T), scaled by ζ^(sign·pos/γ_s)."""
        cos, sin = PF.rope_cos_sin(pos, jnp.asarray(self.inv_freq64))  # (T, P) | (B, T, P)
        scale = PF.xpos_scale(
            sign * pos, self.rotary_dim, scale_base=self.scale_base, gamma=self.gamma
        )
        work = jnp.promote_types(x.dtype, jnp.float32)
        cos, sin = (cos * scale).astype(work), (sin * scale).astype(work)
        if cos.ndim == 3:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, P)
        return PF.apply_rope(x, cos, sin, layout=self.layout)

    def rotate(self, q: Array, k: Array, q_pos: Array, k_pos: Array) -> tuple[Array, Array]:
        _check_head_dim(q, self.head_dim)
        q_pos, k_pos = check_qk(q, k, q_pos, k_pos)
        ends = [extreme(p, which) for p in (q_pos, k_pos) for which in ("max", "min")]
        known = [e for e in ends if e is not None]  # concrete, non-empty positions
        floating = all(jnp.issubdtype(x.dtype, jnp.floating) for x in (q, k))  # else TypeError
        if known and floating:  # NaN scores past the dtype's range (either sign): say so
            for x in (q, k):
                PF.check_xpos_range(
                    max(known, key=abs),
                    self.rotary_dim,
                    float(jnp.finfo(x.dtype).max),
                    str(x.dtype),
                    scale_base=self.scale_base,
                    gamma=self.gamma,
                )
        return self.rotate_scaled(q, q_pos, 1), self.rotate_scaled(k, k_pos, -1)


@register("pope", family="rotary")
class PoPE(PositionalEncoding):
    """PoPE (Gopalakrishnan et al. 2025, arXiv:2509.10534): q̃_tc = softplus(q_tc) e^(i t θ_c),
    k̃_sc = softplus(k_sc) e^(i s θ_c), θ_c = base^(-c/D), as 2D real features; phase bias
    ``delta`` (H, D) clamped to [-2π, 0], applied as -δ on the query."""

    def __init__(
        self, *, head_dim: int, n_heads: int, base: float = 10000.0, phase_bias: bool = True
    ) -> None:
        check_positive_int(head_dim, "head_dim")
        check_positive_int(n_heads, "n_heads")
        check_positive_float(base, "base")
        if not isinstance(phase_bias, bool):
            raise TypeError(f"phase_bias must be a bool, got {type(phase_bias).__name__}")
        self.head_dim, self.n_heads, self.base = head_dim, n_heads, float(base)
        self.inv_freq64 = PF.rope_inv_freq(2 * head_dim, base=self.base)  # (D,) base^(-c/D)
        self.delta = nnx.Param(jnp.zeros((n_heads, head_dim))) if phase_bias else None

    def phase_bias(self) -> Array | None:
        """δ clamped to [-2π, 0], (H, D), or None. Gradient 1 on the closed interval as torch's
        ``clamp`` (``jnp.clip`` gives 1/2 at the ends, and δ starts at the end 0)."""
        if self.delta is None:
            return None
        delta = self.delta[...]
        inside = (delta >= -2 * math.pi) & (delta <= 0.0)
        return jnp.where(inside, delta, jnp.clip(delta, -2 * math.pi, 0.0))

    def polar(self, x: Array, pos: Array, shift: Array | None) -> Array:
        """x (B, H, T, D) at positions (T,) or (B, T) -> (B, H, T, 2D), phases pos·θ - shift."""
        phase = PF.angles(pos, jnp.asarray(self.inv_freq64))  # (T, D) | (B, T, D)
        phase = phase[:, None] if phase.ndim == 3 else phase  # (B, 1, T, D)
        if shift is not None:
            phase = phase - shift.astype(phase.dtype)[:, None, :]  # (B|1, H, T, D)
        work = jnp.promote_types(x.dtype, jnp.float32)
        return PF.pope_polar(x, jnp.cos(phase).astype(work), jnp.sin(phase).astype(work))

    def rotate(self, q: Array, k: Array, q_pos: Array, k_pos: Array) -> tuple[Array, Array]:
        _check_head_dim(q, self.head_dim)
        if q.shape[1] != self.n_heads:
            raise ValueError(f"q must have n_heads={self.n_heads} heads, got {q.shape[1]}")
        q_pos, k_pos = check_qk(q, k, q_pos, k_pos)
        return self.polar(q, q_pos, self.phase_bias()), self.polar(k, k_pos, None)
