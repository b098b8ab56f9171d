"""Flax grid encodings: torch's rope_2d, rope_3d, mrope, rope_mixed, sincos_2d and learned_2d
(``posenc.encodings.grid_rotary``, ``mrope``, ``grid_tables``): same arguments, parameters and
hooks, positions (T, A) | (B, T, A)."""

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
from ..encodings.flows import AxialFlow, GridFlow, Sincos2DFlow
from .base import (
    PositionalEncoding,
    register,
)
from .encodings import Rotary, Table

Array = jax.Array


class GridRotary(GridFlow, Rotary):
    """As torch's ``GridRotary`` (``posenc.encodings.flows.GridFlow``)."""


class AxialRoPE(AxialFlow, GridRotary):
    """As torch's ``AxialRoPE``: θ and the pairs' axes NumPy constants."""

    config: configs.AxialRoPEConfig | configs.MRoPEConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.inv_freq64 = self.config.inv_freq()  # (P,) float64 NumPy
        self.axis_of_pair = np.asarray(self.config.pair_axes())  # (P,)


@register(configs.AxialRoPEConfig)
class RoPE2D(AxialRoPE):
    """As torch's ``RoPE2D``."""


@register(configs.RoPE3DConfig)
class RoPE3D(AxialRoPE):
    """As torch's ``RoPE3D``."""


@register(configs.MRoPEConfig)
class MRoPE(AxialRoPE):
    """As torch's ``MRoPE``."""


@register(configs.RoPEMixedConfig)
class RoPEMixed(GridRotary):
    """As torch's ``RoPEMixed``: ``freqs`` (H, 2, P) from phases φ_h ~ U(0, 2π) (``rngs``)."""

    config: configs.RoPEMixedConfig
    per_head = True

    def setup(self, rngs: nnx.Rngs) -> None:
        phases = 2 * math.pi * jax.random.uniform(rngs.params(), (self.n_heads,))
        init = PF.mixed_inv_freq(self.head_dim, phases, base=self.base)
        self.freqs = nnx.Param(jnp.asarray(init, dtype=jnp.float32))

    def angles(self, pos: Array) -> Array:
        return PF.mixed_angles(pos, self.freqs[...])  # (..., H, T, P)


@register(configs.Sincos2DConfig)
class Sincos2D(Sincos2DFlow, PositionalEncoding):
    """As torch's ``Sincos2D``: rows at any grid positions."""


@register(configs.Learned2DConfig)
class Learned2D(Table):
    """As torch's ``Learned2D``, W ``weight`` (rows·columns, C)."""

    config: configs.Learned2DConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        rows, cols = self.config.grid
        self.weight = nnx.Param(
            self.config.init_std * jax.random.normal(rngs.params(), (rows * cols, self.dim))
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
