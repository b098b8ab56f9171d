"""Flax PoPE (Gopalakrishnan et al. 2025, arXiv:2509.10534): torch's ``posenc.encodings.pope``,
queries and keys as polar features (``PF.pope_features``), queries at phases pos·θ - δ, keys at
pos·θ."""

from __future__ import annotations

import math
from dataclasses import replace

import jax
import jax.numpy as jnp
from flax import nnx, struct

from .. import functional as PF
from ..encodings import configs
from ..functional._xp import as_array_of
from .base import DType, PositionalEncoding, PositionState, register

Array = jax.Array


@struct.dataclass
class PoPEState(PositionState):
    """The positions of one forward and cos, sin of pos·θ (float64 angles, (T, D) | (B, T, D))
    at q_pos (``q_cos_sin``) and at k_pos (``k_cos_sin``; the same arrays when k_pos is q_pos);
    each layer applies its own δ."""

    q_cos_sin: tuple[Array, Array]
    k_cos_sin: tuple[Array, Array]

    def new_keys(self) -> PoPEState:
        """This forward's fresh keys sit at q_pos: their tables are the queries'."""
        return replace(self, k_pos=self.q_pos, k_cos_sin=self.q_cos_sin)


@register(configs.PoPEConfig)
class PoPE(PositionalEncoding[PoPEState]):
    """As torch's ``PoPE``: θ ``inv_freq`` (D,) base^(-c/D), phase bias ``delta`` (H, D)
    clamped to [-2π, 0], applied as -δ on the query.

    Shapes: q (B, H, Tq, D), k (B, Hkv, Tk, D), positions (T,) | (B, T) -> q, k (..., 2D).
    Raises: ValueError for q without ``n_heads`` heads."""

    config: configs.PoPEConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        c = self.config
        self.inv_freq = PF.rope_inv_freq(2 * c.head_dim, base=c.base)  # (D,) base^(-c/D)
        delta = jnp.zeros((c.n_heads, c.head_dim))
        self.delta = nnx.Param(delta) if c.phase_bias else None

    def phase_bias(self) -> Array | None:
        """δ clamped to [-2π, 0], (H, D), or None. Gradient 1 on the closed interval as torch's
        ``clamp`` (``jnp.clip`` gives 1/2 at the ends, and δ starts at the end 0)."""
        if self.delta is None:
            return None
        delta = self.delta[...]
        inside = (delta >= -2 * math.pi) & (delta <= 0.0)
        return jnp.where(inside, delta, jnp.clip(delta, -2 * math.pi, 0.0))

    def cos_sin(self, pos: Array) -> tuple[Array, Array]:
        """cos, sin of pos·θ (``PF.rope_cos_sin``) for positions (T,) | (B, T) -> (..., D)."""
        cos_sin: tuple[Array, Array] = PF.rope_cos_sin(pos, as_array_of(self.inv_freq, pos))
        return cos_sin

    def prepare(
        self,
        q_pos: Array,
        k_pos: Array | None = None,
        *,
        dtype: DType = jnp.float32,
        batch: int | None = None,
    ) -> PoPEState:
        k_pos = q_pos if k_pos is None else k_pos
        q_cos_sin = self.cos_sin(q_pos)
        k_cos_sin = q_cos_sin if k_pos is q_pos else self.cos_sin(k_pos)
        return PoPEState(q_pos, k_pos, self.axes, q_cos_sin, k_cos_sin)

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: PoPEState | None = None
    ) -> tuple[Array, Array]:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            q_cos_sin, k_cos_sin = self.cos_sin(q_pos), self.cos_sin(k_pos)
        else:
            q_pos, k_pos, q_cos_sin, k_cos_sin = ctx.q_pos, ctx.k_pos, ctx.q_cos_sin, ctx.k_cos_sin
        n_heads = self.config.n_heads
        if q.shape[1] != n_heads:
            raise ValueError(f"q must have n_heads={n_heads} heads, got {q.shape[1]}")
        inv_freq = as_array_of(self.inv_freq, q_pos)
        fq = PF.pope_features(q, q_pos, inv_freq, self.phase_bias(), cos_sin=q_cos_sin)
        fk = PF.pope_features(k, k_pos, inv_freq, None, cos_sin=k_cos_sin)
        return fq, fk  # (B, H|Hkv, T, 2D)
