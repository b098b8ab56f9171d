"""Flax NoPE, Sinusoidal, Learned and RoPE: torch's ``posenc.encodings`` nope, absolute and
rotary (same arguments, parameters and hooks; formulas from ``posenc.functional``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .. import functional as PF
from .._validate import check_positions_match, check_real_floating
from ..encodings import configs
from .base import (
    Ctx,
    PositionalEncoding,
    PositionContext,
    check_ndim,
    check_positions,
    check_qk,
    extreme,
    is_concrete,
    register,
    shared_for,
)

Array = jax.Array


@register(configs.EncodingConfig)
class NoPE(PositionalEncoding):
    """As torch's ``NoPE``: identity hooks."""


class Absolute(PositionalEncoding):
    """An additive table: ``embed`` checks x and positions unless a context (``prepare``,
    which checks the positions' values once) comes with them."""

    def prepare(self, q_pos: Array, k_pos: Array | None = None) -> PositionContext:
        self.check_values(q_pos)
        return super().prepare(q_pos, k_pos)

    def check_values(self, pos: Array) -> None:
        low = extreme(pos, "min")
        if low is not None and low < 0:
            raise ValueError(f"positions must be >= 0 for an absolute encoding, got min {low}")

    def embed(self, x: Array, pos: Array, *, ctx: Ctx = None) -> Array:
        if ctx is None:
            check_ndim(x, 3, "x", "(B, T, C)")
            check_real_floating(x, "x")
            if x.shape[-1] != self.dim:
                raise ValueError(f"x must have C = dim = {self.dim} features, got {x.shape[-1]}")
            pos = check_positions(pos)
            check_positions_match(pos, x.shape[0], x.shape[1], "pos")
            self.check_values(pos)
        return x + self.rows(pos).astype(x.dtype)  # (B, T, C)

    def rows(self, pos: Array) -> Array:
        """The table's rows for positions (...,) -> (..., C)."""
        raise NotImplementedError


@register(configs.SinusoidalConfig)
class Sinusoidal(Absolute):
    """As torch's ``Sinusoidal``; the table in the widest float JAX allows, cast to x's."""

    def rows(self, pos: Array) -> Array:
        pe = PF.sinusoidal_table(pos, self.dim, base=self.base)
        return pe if self.scale == 1.0 else self.scale * pe


@register(configs.LearnedConfig)
class Learned(Absolute):
    """As torch's ``Learned``, W ``weight`` (max_len, C). Under ``jax.jit`` a host check raises
    for a position outside the table (it runs only then), and its row is NaN, never a clamped
    or wrapped row."""

    def setup(self, rngs: nnx.Rngs) -> None:
        self.weight = nnx.Param(0.02 * jax.random.normal(rngs.params(), (self.max_len, self.dim)))

    def check_values(self, pos: Array) -> None:
        if (high := extreme(pos, "max")) is not None:
            _check_in_table(extreme(pos, "min"), high, self.max_len)
        elif pos.size:  # traced: a host check that runs only when a position is outside
            ends = pos.min(), pos.max()
            jax.lax.cond(
                (ends[0] < 0) | (ends[1] >= self.max_len),
                lambda: jax.debug.callback(_check_in_table, *ends, self.max_len),
                lambda: None,
            )

    def rows(self, pos: Array) -> Array:
        index = jnp.where(pos < 0, self.max_len, pos)  # negatives would wrap, not fill
        return jnp.take(self.weight[...], index, axis=0, mode="fill", fill_value=jnp.nan)


def _check_in_table(low: Any, high: Any, max_len: int) -> None:
    low, high = int(low), int(high)
    if high >= max_len or low < 0:
        p, side = (high, "past") if high >= max_len else (low, "before")
        raise ValueError(
            f"position {p} is {side} the learned table (max_len={max_len}, "
            f"valid positions 0..{max_len - 1})"
        )


@register(configs.RoPEConfig)
class RoPE(PositionalEncoding):
    """As torch's ``RoPE`` (no ``kernel``): frequencies are float64 NumPy constants; angles
    run in float64 under ``jax_enable_x64``, else float32 (exact to ~1e-6 rad below ~10^4
    positions); cos/sin shared by the layers of a forward through ``ctx``. Dynamic scaling
    reads max(pos), so it needs concrete positions (not under ``jax.jit``)."""

    config: configs.RoPEConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.default_inv_freq64, self.inv_freq64, self.attention_scaling = (
            self.config.scaled_inv_freq()
        )  # (P,) float64 NumPy

    @property
    def jittable(self) -> bool:
        return not self.config.dynamic

    def frequencies(self, seq_len: int | None = None) -> tuple[np.ndarray, float]:
        """As torch's: (inv_freq (P,) float64, attention_scaling) at the length ``seq_len``."""
        if not self.config.dynamic or seq_len is None:
            return self.inv_freq64, self.attention_scaling
        inv_freq, scale = self.scaling.apply(self.default_inv_freq64, seq_len)
        return np.asarray(inv_freq), scale

    def seq_len(self, *positions: Array) -> int | None:
        """As torch's: max(positions) + 1 for dynamic scaling, else None."""
        if not self.config.dynamic:
            return None
        if not all(is_concrete(p) for p in positions):
            raise ValueError(
                f"dynamic RoPE scaling ({self.scaling.method!r}) needs concrete positions to "
                "read the current length; call it outside jax.jit"
            )
        return max((e for p in positions if (e := extreme(p, "max")) is not None), default=-1) + 1

    def rotate_one(
        self, x: Array, pos: Array, seq_len: int | None = None, ctx: Ctx = None
    ) -> Array:
        """Rotate x (B, H, T, D) at positions (T,) or (B, T) (dynamic scaling at ``seq_len``)."""
        work = jnp.promote_types(x.dtype, jnp.float32)

        def tables() -> tuple[Array, Array]:
            inv_freq, scale = self.frequencies(seq_len)
            cos, sin = PF.rope_cos_sin(pos, jnp.asarray(inv_freq))  # (T, P) | (B, T, P)
            cos, sin = (cos * scale).astype(work), (sin * scale).astype(work)
            return (cos[:, None], sin[:, None]) if cos.ndim == 3 else (cos, sin)  # (B, 1, T, P)

        cos, sin = shared_for(ctx, pos, ("rope", work, seq_len), tables)
        return PF.apply_rope(x, cos, sin, layout=self.layout)

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: Ctx = None
    ) -> tuple[Array, Array]:
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.head_dim)
        seq_len = self.seq_len(q_pos, k_pos)
        return self.rotate_one(q, q_pos, seq_len, ctx), self.rotate_one(k, k_pos, seq_len, ctx)
