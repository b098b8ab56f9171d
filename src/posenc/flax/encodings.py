"""Flax NoPE, Sinusoidal, Learned, RoPE, xPos and PoPE: torch's ``posenc.encodings`` nope,
absolute, rotary, xpos and pope (same arguments, parameters and hooks)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from .. import functional as PF
from ..encodings import configs
from ..encodings.flows import (
    AbsoluteFlow,
    PoPEFlow,
    QueryTemperatureFlow,
    RoPEFlow,
    SinusoidalFlow,
    XPosFlow,
)
from .base import (
    PositionalEncoding,
    bounds,
    is_concrete,
    on_host_if,
    register,
)

Array = jax.Array


@register(configs.EncodingConfig)
class NoPE(PositionalEncoding):
    """As torch's ``NoPE``: identity hooks."""


@register(configs.NoPETemperatureConfig)
class NoPETemperature(QueryTemperatureFlow, PositionalEncoding):
    """As torch's ``NoPETemperature``: NoPE with Llama 4's query temperature."""


class Absolute(AbsoluteFlow, PositionalEncoding):
    """An additive table on positions of ``axes`` axes (``posenc.encodings.flows``); the
    values are checked where they are concrete (outside ``jax.jit``)."""

    def check_values(self, pos: Array) -> None:
        """Raise for positions the table has no row for (default: negative ones)."""
        if (b := bounds(pos)) is not None and b[0] < 0:
            raise ValueError(f"positions must be >= 0 for an absolute encoding, got min {b[0]}")


@register(configs.SinusoidalConfig)
class Sinusoidal(SinusoidalFlow, Absolute):
    """As torch's ``Sinusoidal``; the table in the widest float JAX allows, cast to x's."""


class Table(Absolute):
    """A learned table W (n_0·n_1···, C) over the coordinates 0..n_a - 1 of each axis
    (``box``), rows in row-major order; its config's ``check_rows(*mins_and_maxes)`` raises
    for a position outside it. Under ``jax.jit`` that check runs on the host when a position
    is outside, and its row is NaN, never a clamped or wrapped row."""

    config: configs.LearnedConfig | configs.Learned2DConfig

    @property
    def box(self) -> tuple[int, ...]:
        """The number of coordinates along each axis."""
        raise NotImplementedError

    def coordinates(self, pos: Array) -> list[Array]:
        return [pos] if self.axes == 1 else [pos[..., a] for a in range(self.axes)]

    def check_values(self, pos: Array) -> None:
        coords = self.coordinates(pos)
        found = [bounds(c) for c in coords]
        if None not in found:
            self.config.check_rows(*(e for b in found if b is not None for e in b))
        elif pos.size:  # traced: a host check that runs only when a position is outside
            ends = [e for c in coords for e in (c.min(), c.max())]
            pairs = zip(ends[::2], ends[1::2], self.box, strict=True)
            outside = jnp.any(jnp.stack([(low < 0) | (high >= n) for low, high, n in pairs]))
            on_host_if(outside, self.config.check_rows, *ends)

    def rows(self, pos: Array) -> Array:
        coords = self.coordinates(pos)
        inside = jnp.all(
            jnp.stack([(c >= 0) & (c < n) for c, n in zip(coords, self.box, strict=True)]), 0
        )
        index = jnp.ravel_multi_index(tuple(coords), self.box, mode="clip")
        index = jnp.where(inside, index, math.prod(self.box))  # outside: the NaN row
        return jnp.take(self.weight[...], index, axis=0, mode="fill", fill_value=jnp.nan)


@register(configs.LearnedConfig)
class Learned(Table):
    """As torch's ``Learned``, W ``weight`` (max_len, C)."""

    config: configs.LearnedConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.weight = nnx.Param(0.02 * jax.random.normal(rngs.params(), (self.max_len, self.dim)))

    @property
    def box(self) -> tuple[int, ...]:
        return (self.max_len,)


class Rotary(PositionalEncoding):
    """Flax's side of the rotary flows (``posenc.encodings.flows``): cos, sin tables applied
    by ``PF.apply_rope``."""

    def wrap_tables(self, cos: Array, sin: Array) -> tuple[Array, Array]:
        return cos, sin

    def apply_tables(self, x: Array, tables: tuple[Array, Array], inplace: bool = False) -> Array:
        return PF.apply_rope(x, *tables, layout=self.layout, inplace=inplace)

    def rotate_pair(
        self, q: Array, k: Array, tq: tuple[Array, Array], tk: tuple[Array, Array], inplace: bool
    ) -> tuple[Array, Array]:
        return self.apply_tables(q, tq, inplace), self.apply_tables(k, tk, inplace)


@register(configs.RoPEConfig)
class RoPE(RoPEFlow, Rotary):
    """As torch's ``RoPE`` (no ``kernel``): frequencies are float64 NumPy constants; angles
    run in float64 under ``jax_enable_x64``, else float32 (exact to ~1e-6 rad below ~10^4
    positions). Dynamic scaling reads max(pos), so it needs concrete positions (not under
    ``jax.jit``)."""

    config: configs.RoPEConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.default_inv_freq64, self.inv_freq64, self.attention_scaling = (
            self.config.scaled_inv_freq()
        )  # (P,) float64 NumPy

    @property
    def jittable(self) -> bool:
        return not self.config.dynamic

    def max_position(self, *positions: Array) -> int:
        """max(positions), -1 for none, read on the host. Raises: ValueError under
        ``jax.jit``."""
        if not all(is_concrete(p) for p in positions):
            raise ValueError(
                f"dynamic RoPE scaling ({self.scaling.method!r}) needs concrete positions to "
                "read the current length; call it outside jax.jit"
            )
        return max((b[1] for p in positions if (b := bounds(p)) is not None), default=-1)


@register(configs.PRoPEConfig)
class PRoPE(RoPE):
    """As torch's ``PRoPE``: RoPE on p-RoPE's frequencies (``PF.p_rope_inv_freq``)."""

    config: configs.PRoPEConfig


@register(configs.XPosConfig)
class XPos(XPosFlow, Rotary):
    """As torch's ``XPos``: RoPE scaled by ζ^(±pos/γ_s); tables and the range check once per
    forward through ``ctx``; the range is checked where positions are concrete."""

    config: configs.XPosConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.inv_freq = PF.rope_inv_freq(self.rotary_dim, base=self.base)  # (P,) NumPy

    def check_range(self, q: Array, k: Array, q_pos: Array, k_pos: Array) -> None:
        """As torch's: raise where the scaled q or k would overflow their dtype (concrete
        positions only; non-floating q/k: ``apply_rope``'s TypeError)."""
        ends = [e for p in (q_pos, k_pos) if (b := bounds(p)) is not None for e in b[::-1]]
        if not ends or not all(jnp.issubdtype(x.dtype, jnp.floating) for x in (q, k)):
            return
        limits = [(float(jnp.finfo(x.dtype).max), str(x.dtype)) for x in (q, k)]
        self.config.check_range(ends, limits)


@register(configs.PoPEConfig)
class PoPE(PoPEFlow, PositionalEncoding):
    """As torch's ``PoPE``: phase bias ``delta`` (H, D) clamped to [-2π, 0], applied as -δ on
    the query."""

    config: configs.PoPEConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.inv_freq = PF.rope_inv_freq(2 * self.head_dim, base=self.base)  # (D,) base^(-c/D)
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
