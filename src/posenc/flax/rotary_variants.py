"""Flax xPos and PoPE: torch's ``posenc.encodings.xpos`` / ``pope`` (same arguments and
parameters; formulas from ``posenc.functional``)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from .. import functional as PF
from ..encodings import configs
from .base import Ctx, PositionalEncoding, check_qk, extreme, register, shared_for

Array = jax.Array


@register(configs.XPosConfig)
class XPos(PositionalEncoding):
    """As torch's ``XPos``: RoPE scaled by ζ^(±pos/γ_s); tables and the range check once per
    forward through ``ctx``; the range is checked where positions are concrete."""

    config: configs.XPosConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.inv_freq64 = PF.rope_inv_freq(self.rotary_dim, base=self.base)  # (P,) NumPy

    def rotate_scaled(self, x: Array, pos: Array, sign: int, ctx: Ctx = None) -> Array:
        """Rotate x (B, H, T, D) at positions (T,) or (B, T), scaled by ζ^(sign·pos/γ_s)."""
        work = jnp.promote_types(x.dtype, jnp.float32)

        def tables() -> tuple[Array, Array]:
            cos, sin = PF.rope_cos_sin(pos, jnp.asarray(self.inv_freq64))  # (T, P) | (B, T, P)
            c = self.config
            scale = PF.xpos_scale(sign * pos, c.rotary_dim, scale_base=c.scale_base, gamma=c.gamma)
            cos, sin = (cos * scale).astype(work), (sin * scale).astype(work)
            return (cos[:, None], sin[:, None]) if cos.ndim == 3 else (cos, sin)  # (B, 1, T, P)

        cos, sin = shared_for(ctx, pos, ("xpos", sign, work), tables)
        return PF.apply_rope(x, cos, sin, layout=self.layout)

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: Ctx = None
    ) -> tuple[Array, Array]:
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.head_dim)
            self.check_range(q, k, q_pos, k_pos)
        else:  # once per forward and dtype: every layer meets the same positions
            key = ("xpos_range", q.dtype, k.dtype)
            ctx.shared(key, lambda: self.check_range(q, k, ctx.q_pos, ctx.k_pos))
        return self.rotate_scaled(q, q_pos, 1, ctx), self.rotate_scaled(k, k_pos, -1, ctx)

    def check_range(self, q: Array, k: Array, q_pos: Array, k_pos: Array) -> None:
        """As torch's: raise where the scaled q or k would overflow their dtype (concrete
        positions only)."""
        ends = [
            e for p in (q_pos, k_pos) for w in ("max", "min") if (e := extreme(p, w)) is not None
        ]
        if not ends or not all(jnp.issubdtype(x.dtype, jnp.floating) for x in (q, k)):
            return  # (non-floating: apply_rope's TypeError)
        for x in (q, k):
            c = self.config
            PF.check_xpos_range(
                max(ends, key=abs),
                c.rotary_dim,
                float(jnp.finfo(x.dtype).max),
                str(x.dtype),
                scale_base=c.scale_base,
                gamma=c.gamma,
            )


@register(configs.PoPEConfig)
class PoPE(PositionalEncoding):
    """As torch's ``PoPE``: phase bias ``delta`` (H, D) clamped to [-2π, 0], applied as -δ on
    the query."""

    config: configs.PoPEConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.inv_freq64 = PF.rope_inv_freq(2 * self.head_dim, base=self.base)  # (D,) base^(-c/D)
        delta = jnp.zeros((self.n_heads, self.head_dim))
        self.delta = nnx.Param(delta) if self.config.phase_bias else None

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

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: Ctx = None
    ) -> tuple[Array, Array]:
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.head_dim)
        if q.shape[1] != self.n_heads:
            raise ValueError(f"q must have n_heads={self.n_heads} heads, got {q.shape[1]}")
        return self.polar(q, q_pos, self.phase_bias()), self.polar(k, k_pos, None)
