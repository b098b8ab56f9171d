"""Flax additive encodings: torch's ``posenc.encodings.absolute`` (sinusoidal, learned) and
``grid_tables`` (sincos_2d, learned_2d), same arguments and parameters. ``embed`` adds the
table's rows at the positions to token embeddings x (B, T, C), in x's dtype; unless a state
comes with them, x and the positions are checked, and their values where they are concrete
(outside ``jax.jit``); ``prepare`` checks the values once per forward."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .. import functional as PF
from ..encodings import configs
from .base import (
    DType,
    PositionalEncoding,
    PositionState,
    bounds,
    on_host_if,
    register,
)

Array = jax.Array


def check_nonnegative(pos: Array) -> None:
    """Raise for negative concrete positions (an absolute table has no row for them)."""
    if (b := bounds(pos)) is not None and b[0] < 0:
        raise ValueError(f"positions must be >= 0 for an absolute encoding, got min {b[0]}")


@register(configs.SinusoidalConfig)
class Sinusoidal(PositionalEncoding[PositionState]):
    """As torch's ``Sinusoidal``: x + scale·PE[p] (Vaswani et al. 2017, arXiv:1706.03762), the
    table ``PF.sinusoidal_table`` in the widest float JAX allows, cast to x's dtype.

    Shapes: x (B, T, C), pos (T,) | (B, T). Raises: ValueError for negative positions."""

    config: configs.SinusoidalConfig
    embeds = True

    def prepare(
        self,
        q_pos: Array,
        k_pos: Array | None = None,
        *,
        dtype: DType = jnp.float32,
        batch: int | None = None,
    ) -> PositionState:
        check_nonnegative(q_pos)  # every key was a query once
        return PositionState(q_pos, q_pos if k_pos is None else k_pos, self.axes)

    def embed(self, x: Array, pos: Array, *, ctx: PositionState | None = None) -> Array:
        if ctx is None:
            pos = self.check_embed(x, pos)
            check_nonnegative(pos)
        c = self.config
        pe = PF.sinusoidal_table(pos, c.dim, base=c.base)  # (..., C)
        return x + (pe if c.scale == 1.0 else c.scale * pe).astype(x.dtype)  # (B, T, C)


@register(configs.Sincos2DConfig)
class Sincos2D(PositionalEncoding[PositionState]):
    """As torch's ``Sincos2D``: x + scale·PE[p] for MAE's 2-D table (``PF.sincos_2d_table``;
    He et al. 2021, arXiv:2111.06377) at any grid positions.

    Shapes: x (B, T, C), pos (T, 2) | (B, T, 2)."""

    config: configs.Sincos2DConfig
    embeds = True

    def embed(self, x: Array, pos: Array, *, ctx: PositionState | None = None) -> Array:
        if ctx is None:
            pos = self.check_embed(x, pos)
        c = self.config
        pe = PF.sincos_2d_table(pos, c.dim, base=c.base)  # (..., C)
        return x + (pe if c.scale == 1.0 else c.scale * pe).astype(x.dtype)  # (B, T, C)


class Table(PositionalEncoding[PositionState]):
    """A learned table W (n_0·n_1···, C) over the coordinates 0..n_a - 1 of each axis
    (``box``), rows in row-major order: x + W[p]. Its config's ``check_rows(*mins_and_maxes)``
    raises for a position outside it; under ``jax.jit`` that check runs on the host when a
    position is outside, and its row is NaN, never a clamped or wrapped row."""

    config: configs.LearnedConfig | configs.Learned2DConfig
    embeds = True
    weight: nnx.Param[Array]

    @property
    def box(self) -> tuple[int, ...]:
        """The number of coordinates along each axis."""
        raise NotImplementedError

    def prepare(
        self,
        q_pos: Array,
        k_pos: Array | None = None,
        *,
        dtype: DType = jnp.float32,
        batch: int | None = None,
    ) -> PositionState:
        self.check_values(q_pos)  # every key was a query once
        return PositionState(q_pos, q_pos if k_pos is None else k_pos, self.axes)

    def embed(self, x: Array, pos: Array, *, ctx: PositionState | None = None) -> Array:
        if ctx is None:
            pos = self.check_embed(x, pos)
            self.check_values(pos)
        return x + self.rows(pos).astype(x.dtype)  # (B, T, C)

    def coordinates(self, pos: Array) -> list[Array]:
        """Each axis's coordinate of positions (...,) | (..., A)."""
        return [pos] if self.axes == 1 else [pos[..., a] for a in range(self.axes)]

    def check_values(self, pos: Array) -> None:
        """Raise for positions the table has no row for (a host callback under ``jax.jit``)."""
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
        """W's rows at positions (...,) | (..., A) -> (..., C); NaN outside the table."""
        coords = self.coordinates(pos)
        inside = jnp.all(
            jnp.stack([(c >= 0) & (c < n) for c, n in zip(coords, self.box, strict=True)]), 0
        )
        index = jnp.ravel_multi_index(tuple(coords), self.box, mode="clip")
        index = jnp.where(inside, index, math.prod(self.box))  # outside: the NaN row
        return jnp.take(self.weight[...], index, axis=0, mode="fill", fill_value=jnp.nan)


@register(configs.LearnedConfig)
class Learned(Table):
    """As torch's ``Learned``, W ``weight`` (max_len, C) ~ N(0, 0.02²)."""

    config: configs.LearnedConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        shape = (self.config.max_len, self.config.dim)
        self.weight = nnx.Param(0.02 * jax.random.normal(rngs.params(), shape))

    @property
    def box(self) -> tuple[int, ...]:
        return (self.config.max_len,)


@register(configs.Learned2DConfig)
class Learned2D(Table):
    """As torch's ``Learned2D``, W ``weight`` (rows·columns, C) ~ N(0, init_std²)."""

    config: configs.Learned2DConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        rows, cols = self.config.grid
        self.weight = nnx.Param(
            self.config.init_std * jax.random.normal(rngs.params(), (rows * cols, self.config.dim))
        )

    @property
    def box(self) -> tuple[int, ...]:
        return tuple(self.config.grid)

    def resample_(
        self, grid: Sequence[int], *, mode: PF.ResampleMode = "bicubic", antialias: bool = True
    ) -> Learned2D:
        """As torch's: W interpolated in place to ``grid`` (``PF.resample_table``)."""
        new = PF.check_grid(grid, "grid")
        table = PF.resample_table(
            np.asarray(self.weight[...]), self.config.grid, new, mode=mode, antialias=antialias
        )
        self.weight = nnx.Param(jnp.asarray(table, dtype=self.weight[...].dtype))
        self.config = replace(self.config, grid=new)
        return self
