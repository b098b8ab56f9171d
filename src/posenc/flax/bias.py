"""Flax score biases of positions alone: torch's ``posenc.encodings.bias`` (ALiBi, T5, Kerple,
FIRE), same arguments and parameter names. ``bias(q_pos, k_pos)`` -> (B or 1, H, Tq, Tk) in
float32 or wider; the positions are checked unless a state comes with them (whoever made it
checked them) and taken as the widest signed int (i - j cannot wrap: uint8 0 - 1 = 255)."""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .. import functional as PF
from .._validate import as_4d, check_position_batches
from ..encodings import configs
from ..functional._xp import widest_int
from .base import PositionalEncoding, PositionState, check_positions, register, tables_dtype

Array = jax.Array


def bias_positions(q_pos: Array, k_pos: Array, ctx: PositionState | None) -> tuple[Array, Array]:
    """q_pos, k_pos checked (without a state) and as the widest signed int."""
    if ctx is None:
        q_pos, k_pos = check_positions(q_pos, "q_pos"), check_positions(k_pos, "k_pos")
        check_position_batches(q_pos, k_pos)
    wide = widest_int(jnp)
    return q_pos.astype(wide), k_pos.astype(wide)


@register(configs.ALiBiConfig)
class ALiBi(PositionalEncoding[PositionState]):
    """As torch's ``ALiBi`` (Press et al. 2021, arXiv:2108.12409): -m_h |i - j| (causal: the
    key's distance behind the query), the slopes m (H,) a float32 constant."""

    config: configs.ALiBiConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.slopes = np.asarray(self.config.slope_values(), dtype=np.float32)  # (H,)

    def bias(self, q_pos: Array, k_pos: Array, *, ctx: PositionState | None = None) -> Array:
        q_pos, k_pos = bias_positions(q_pos, k_pos, ctx)
        slopes = jnp.asarray(self.slopes)
        out = PF.alibi_bias(q_pos, k_pos, slopes, bidirectional=self.config.bidirectional)
        return as_4d(out)  # (B|1, H, Tq, Tk)


@register(configs.T5Config)
class T5Bias(PositionalEncoding[PositionState]):
    """As torch's ``T5Bias`` (Raffel et al. 2019, arXiv:1910.10683): W[bucket(j - i), h] of the
    table ``weight`` W (num_buckets, H) ~ N(0, init_std²), read in float32 or wider."""

    config: configs.T5Config

    def setup(self, rngs: nnx.Rngs) -> None:
        c = self.config
        shape = (c.num_buckets, c.n_heads)
        self.weight = nnx.Param(c.init_std * jax.random.normal(rngs.params(), shape))

    def bias(self, q_pos: Array, k_pos: Array, *, ctx: PositionState | None = None) -> Array:
        q_pos, k_pos = bias_positions(q_pos, k_pos, ctx)
        c = self.config
        buckets = PF.t5_relative_bucket(
            -PF.relative_offsets(q_pos, k_pos),  # key - query, T5's sign
            bidirectional=c.bidirectional,
            num_buckets=c.num_buckets,
            max_distance=c.max_distance,
        )  # (..., Tq, Tk)
        table = self.weight[...]
        values = table.astype(tables_dtype(table.dtype))[buckets]  # (..., Tq, Tk, H)
        return as_4d(jnp.moveaxis(values, -1, -3))  # (B|1, H, Tq, Tk)


def clamp_straight_through(x: Array, low: float, high: float | None = None) -> Array:
    """clamp(x, low, high) in value, identity in gradient, so a clamped parameter can
    recover."""
    return x + jax.lax.stop_gradient(jnp.clip(x, low, high) - x)


@register(configs.KerpleConfig)
class Kerple(PositionalEncoding[PositionState]):
    """As torch's ``Kerple`` (Chi et al. 2022, arXiv:2205.09921; ``PF.kerple_bias``): r1, r2
    (H,) learned, clamped to their ranges with a straight-through gradient."""

    config: configs.KerpleConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        c = self.config
        self.r1, self.r2 = (
            nnx.Param(
                jnp.full((c.n_heads,), init)
                if init is not None
                else jax.random.uniform(rngs.params(), (c.n_heads,), maxval=scale)
            )
            for init, scale in zip((c.init_r1, c.init_r2), c.init_scales, strict=True)
        )

    def kernel_parameters(self) -> tuple[Array, Array]:
        """r1, r2 (H,) clamped to their ranges, in float32 or wider."""
        c, r1, r2 = self.config, self.r1[...], self.r2[...]
        dtype = tables_dtype(r1.dtype)
        r1 = clamp_straight_through(r1.astype(dtype), c.eps)
        r2 = clamp_straight_through(r2.astype(dtype), c.eps, c.r2_max)
        return r1, r2

    def bias(self, q_pos: Array, k_pos: Array, *, ctx: PositionState | None = None) -> Array:
        q_pos, k_pos = bias_positions(q_pos, k_pos, ctx)
        r1, r2 = self.kernel_parameters()
        return as_4d(PF.kerple_bias(q_pos, k_pos, r1, r2, variant=self.config.variant))


def torch_linear(n_in: int, n_out: int, rngs: nnx.Rngs, *, use_bias: bool = True) -> nnx.Linear:
    """nnx.Linear initialised like torch.nn.Linear: kernel and bias ~ U(±1/√n_in)."""
    bound = 1.0 / math.sqrt(n_in)
    uniform = partial(jax.random.uniform, minval=-bound, maxval=bound)
    return nnx.Linear(
        n_in, n_out, use_bias=use_bias, kernel_init=uniform, bias_init=uniform, rngs=rngs
    )


@register(configs.FIREConfig)
class FIRE(PositionalEncoding[PositionState]):
    """As torch's ``FIRE`` (Li et al. 2023, arXiv:2310.04418): an MLP of the normalised
    distance (``PF.fire_distance``, ``PF.fire_mlp``); ``mlp_in``, ``mlp_out``, c and the
    threshold scale learned; the MLP runs in float32 or wider."""

    config: configs.FIREConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        c = self.config
        self.mlp_in = torch_linear(1, c.hidden, rngs)
        self.mlp_out = torch_linear(c.hidden, c.n_heads, rngs)
        self.c = nnx.Param(jnp.asarray(c.init_c))
        self.threshold_scale = nnx.Param(jnp.asarray(1.0))

    @property
    def threshold(self) -> Array:
        """The learned threshold L = |s·init_threshold| (0-d), in float32 or wider."""
        scale = self.threshold_scale[...]
        return jnp.abs(scale.astype(tables_dtype(scale.dtype)) * self.config.init_threshold)

    def bias(self, q_pos: Array, k_pos: Array, *, ctx: PositionState | None = None) -> Array:
        q_pos, k_pos = bias_positions(q_pos, k_pos, ctx)
        cfg = self.config
        dtype = jnp.result_type(jnp.float32, self.c[...].dtype, self.mlp_in.kernel[...].dtype)
        c, threshold = self.c[...].astype(dtype), self.threshold.astype(dtype)
        x = PF.fire_distance(
            q_pos, k_pos, c, threshold, eps=cfg.eps, bidirectional=cfg.bidirectional
        )
        b_in, b_out = self.mlp_in.bias, self.mlp_out.bias
        assert b_in is not None and b_out is not None  # torch_linear gives both a bias
        w1, b1 = self.mlp_in.kernel[0].astype(dtype), b_in[...].astype(dtype)  # (hidden,)
        w2, b2 = self.mlp_out.kernel[...].T.astype(dtype), b_out[...].astype(dtype)  # (H, hidden)
        out = PF.fire_mlp(x, *PF.fire_mlp_pieces(w1, b1, w2, b2))  # (H, ..., Tq, Tk)
        return as_4d(jnp.moveaxis(out, 0, -3))  # (B|1, H, Tq, Tk)
