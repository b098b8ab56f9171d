"""Flax encodings acting on attention scores, as torch's ``posenc.encodings.bias``, ``relative``
and ``contextual`` (same arguments and parameter names): score biases ALiBi, T5, Kerple and FIRE
(``bias(q_pos, k_pos)`` (B or 1, H, Tq, Tk) in float32 or wider, from positions alone) and the
logit/value rewrites of Shaw, Transformer-XL and CoPE."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .. import functional as PF
from ..encodings import configs
from ..encodings.flows import (
    BiasFlow,
    CoPEFlow,
    KerpleFlow,
    ShawFlow,
    T5Flow,
    TransformerXLFlow,
)
from ..functional._xp import at_least_float32
from .base import (
    Ctx,
    PositionalEncoding,
    is_concrete,
    register,
)

Array = jax.Array


@register(configs.ALiBiConfig)
class ALiBi(BiasFlow, PositionalEncoding):
    """As torch's ``ALiBi``; the slopes a float32 constant."""

    config: configs.ALiBiConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.slopes = np.asarray(self.config.slope_values(), dtype=np.float32)  # (H,)

    def formula(self, q_pos: Array, k_pos: Array) -> Array:
        slopes = jnp.asarray(self.slopes)
        return PF.alibi_bias(q_pos, k_pos, slopes, bidirectional=self.bidirectional)


@register(configs.T5Config)
class T5Bias(T5Flow, PositionalEncoding):
    """As torch's ``T5Bias``: W ``weight`` (num_buckets, H) ~ N(0, init_std²)."""

    def setup(self, rngs: nnx.Rngs) -> None:
        shape = (self.num_buckets, self.n_heads)
        self.weight = nnx.Param(self.init_std * jax.random.normal(rngs.params(), shape))

    def lookup(self, table: Array, index: Array) -> Array:
        return table[index]


@register(configs.KerpleConfig)
class Kerple(KerpleFlow, PositionalEncoding):
    """As torch's ``Kerple``: r1, r2 (H,) learned, clamped with a straight-through gradient."""

    stop_gradient = staticmethod(jax.lax.stop_gradient)

    def setup(self, rngs: nnx.Rngs) -> None:
        self.r1, self.r2 = (
            nnx.Param(
                jnp.full((self.n_heads,), init)
                if init is not None
                else jax.random.uniform(rngs.params(), (self.n_heads,), maxval=scale)
            )
            for init, scale in zip((self.init_r1, self.init_r2), self.init_scales, strict=True)
        )


def _torch_linear(n_in: int, n_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    """nnx.Linear initialised like torch.nn.Linear: kernel and bias ~ U(±1/√n_in)."""
    bound = 1.0 / math.sqrt(n_in)
    uniform = partial(jax.random.uniform, minval=-bound, maxval=bound)
    return nnx.Linear(n_in, n_out, kernel_init=uniform, bias_init=uniform, rngs=rngs)


@register(configs.FIREConfig)
class FIRE(BiasFlow, PositionalEncoding):
    """As torch's ``FIRE``: ``mlp_in``, ``mlp_out``, c and the threshold scale learned; the MLP
    runs in float32 or wider."""

    def setup(self, rngs: nnx.Rngs) -> None:
        self.mlp_in = _torch_linear(1, self.hidden, rngs)
        self.mlp_out = _torch_linear(self.hidden, self.n_heads, rngs)
        self.c = nnx.Param(jnp.asarray(self.init_c))
        self.threshold_scale = nnx.Param(jnp.asarray(1.0))

    @property
    def threshold(self) -> Array:
        """The learned threshold L = |s·init_threshold| (0-d), in float32 or wider."""
        scale = self.threshold_scale[...]
        return jnp.abs(scale.astype(at_least_float32(scale)) * self.init_threshold)

    def formula(self, q_pos: Array, k_pos: Array) -> Array:
        dtype = at_least_float32(self.c[...], self.mlp_in.kernel[...])
        c, threshold = self.c[...].astype(dtype), self.threshold.astype(dtype)
        x = PF.fire_distance(
            q_pos, k_pos, c, threshold, eps=self.eps, bidirectional=self.bidirectional
        )
        b_in, b_out = self.mlp_in.bias, self.mlp_out.bias
        assert b_in is not None and b_out is not None  # _torch_linear gives both a bias
        w1, b1 = self.mlp_in.kernel[0].astype(dtype), b_in[...].astype(dtype)  # (hidden,)
        w2, b2 = self.mlp_out.kernel[...].T.astype(dtype), b_out[...].astype(dtype)  # (H, hidden)
        out = PF.fire_mlp(x, *PF.fire_mlp_pieces(w1, b1, w2, b2))  # (H, ..., Tq, Tk)
        return jnp.moveaxis(out, 0, -3)


def _normal(rngs: nnx.Rngs, *shape: int, std: float = 0.02) -> nnx.Param[Array]:
    return nnx.Param(std * jax.random.normal(rngs.params(), shape))


@register(configs.ShawConfig)
class Shaw(ShawFlow, PositionalEncoding):
    """As torch's ``Shaw``: ``key_table``, ``value_table`` (2K+1, D) ~ N(0, init_std²)."""

    config: configs.ShawConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        rows, std = 2 * self.max_distance + 1, self.config.init_std
        self.key_table = _normal(rngs, rows, self.head_dim, std=std)  # (2K+1, D)
        values = self.config.values
        self.value_table = _normal(rngs, rows, self.head_dim, std=std) if values else None


@register(configs.TransformerXLConfig)
class TransformerXL(TransformerXLFlow, PositionalEncoding):
    """As torch's ``TransformerXL``: ``r_proj`` W_R (H·D, C), ``u``, ``v`` (H, D).
    ``PF.transformer_xl_terms`` sizes its table by the observed offset range, so positions must
    be concrete: this encoding runs eagerly, not under ``jax.jit``."""

    jittable = False

    def setup(self, rngs: nnx.Rngs) -> None:
        H, D = self.n_heads, self.head_dim
        self.r_proj = _normal(rngs, H * D, self.dim)  # W_R (H*D, C)
        self.u, self.v = _normal(rngs, H, D), _normal(rngs, H, D)

    def position_rows(self, q_pos: Array, k_pos: Array, dtype: Any, ctx: Ctx) -> None:
        """None: the rows are made per call, from concrete positions."""
        if not (is_concrete(q_pos) and is_concrete(k_pos)):
            raise ValueError(
                "transformer_xl sizes its relative table by the offsets present, so it needs "
                "concrete positions; call it outside jax.jit"
            )


@register(configs.CoPEConfig)
class CoPE(CoPEFlow, PositionalEncoding):
    """As torch's ``CoPE``: ``pos_emb`` e (n_positions, D) shared by heads."""

    def setup(self, rngs: nnx.Rngs) -> None:
        self.pos_emb = _normal(rngs, self.n_positions, self.head_dim)  # e (P, D)
