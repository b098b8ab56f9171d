"""Flax RoPE on grid positions (T, A) | (B, T, A): torch's ``posenc.encodings.grid_rotary``
(rope_2d, rope_3d, rope_mixed) and ``mrope``, same arguments and parameters. Each pair turns
by angles of the positions in float64 (float32 without ``jax_enable_x64``); the cos/sin tables
of a forward are made once, in ``prepare`` (``RotaryState``)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .. import functional as PF
from ..encodings import configs
from ..functional._xp import as_array_of
from .base import DType, PositionalEncoding, register, tables_dtype
from .rotary import RotaryState, Tables, as_tables, rotary_state, rotate_pair

Array = jax.Array


class AxialRoPE(PositionalEncoding[RotaryState]):
    """As torch's ``AxialRoPE``: pair p turns by its axis's coordinate, pos[a(p)]·θ_p
    (``PF.axis_angles``; θ ``inv_freq64`` (P,) float64 and a ``axis_of_pair`` (P,) NumPy
    constants from the config's ``inv_freq()`` and ``pair_axes()``).

    Shapes: q (B, H, Tq, D), k (B, Hkv, Tk, D), positions (T, A) | (B, T, A)."""

    config: configs.AxialRoPEConfig | configs.MRoPEConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.inv_freq64: np.ndarray = self.config.inv_freq()  # (P,) float64
        self.axis_of_pair = np.asarray(self.config.pair_axes())  # (P,)

    def tables(self, pos: Array, dtype: DType) -> Tables:
        """cos, sin in ``dtype`` of every pair's angle at positions (T, A) | (B, T, A) ->
        (T, P) | (B, 1, T, P)."""
        axes = as_array_of(self.axis_of_pair, pos)
        angles = PF.axis_angles(pos, as_array_of(self.inv_freq64, pos), axes)  # (..., T, P)
        return as_tables(jnp.cos(angles), jnp.sin(angles), dtype)

    def prepare(
        self,
        q_pos: Array,
        k_pos: Array | None = None,
        *,
        dtype: DType = jnp.float32,
        batch: int | None = None,
    ) -> RotaryState:
        return rotary_state(self.tables, q_pos, k_pos, dtype, self.axes)

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: RotaryState | None = None
    ) -> tuple[Array, Array]:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            tq, tk = (
                self.tables(q_pos, tables_dtype(q.dtype)),
                self.tables(k_pos, tables_dtype(k.dtype)),
            )
        else:
            tq, tk = ctx.q_tables, ctx.k_tables
        return rotate_pair(q, k, tq, tk, self.config.layout)


@register(configs.AxialRoPEConfig)
class RoPE2D(AxialRoPE):
    """As torch's ``RoPE2D``: rows and columns each turn half the pairs."""


@register(configs.RoPE3DConfig)
class RoPE3D(AxialRoPE):
    """As torch's ``RoPE3D``: time, rows and columns each turn their section of the pairs."""


@register(configs.MRoPEConfig)
class MRoPE(AxialRoPE):
    """As torch's ``MRoPE`` (Qwen2-VL): RoPE's 1-D series, the pairs' sections per axis."""


@register(configs.RoPEMixedConfig)
class RoPEMixed(PositionalEncoding[RotaryState]):
    """As torch's ``RoPEMixed`` (Heo et al. 2024, arXiv:2403.13298): learned frequencies
    ``freqs`` F (H, 2, P) from phases φ_h ~ U(0, 2π) (``rngs``), angles Σ_a pos_a·F[h, a, p]
    (``PF.mixed_angles``) per head, so keys need the queries' heads.

    Shapes: q, k (B, H, T, D), positions (T, 2) | (B, T, 2).
    Raises: ValueError for keys or queries of another head count."""

    config: configs.RoPEMixedConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        c = self.config
        phases = 2 * math.pi * jax.random.uniform(rngs.params(), (c.n_heads,))
        init = PF.mixed_inv_freq(c.head_dim, phases, base=c.base)
        self.freqs = nnx.Param(jnp.asarray(init, dtype=jnp.float32))

    def tables(self, pos: Array, dtype: DType) -> Tables:
        """cos, sin in ``dtype`` of each head's angles at positions (T, 2) | (B, T, 2) ->
        (H, T, P) | (B, H, T, P)."""
        angles = PF.mixed_angles(pos, self.freqs[...])  # (..., H, T, P)
        return as_tables(jnp.cos(angles), jnp.sin(angles), dtype, per_head=True)

    def prepare(
        self,
        q_pos: Array,
        k_pos: Array | None = None,
        *,
        dtype: DType = jnp.float32,
        batch: int | None = None,
    ) -> RotaryState:
        return rotary_state(self.tables, q_pos, k_pos, dtype, self.axes)

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: RotaryState | None = None
    ) -> tuple[Array, Array]:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            tq, tk = (
                self.tables(q_pos, tables_dtype(q.dtype)),
                self.tables(k_pos, tables_dtype(k.dtype)),
            )
        else:
            tq, tk = ctx.q_tables, ctx.k_tables
        self.config.check_heads(q, k)
        return rotate_pair(q, k, tq, tk, self.config.layout)
