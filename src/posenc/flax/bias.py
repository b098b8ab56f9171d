"""Flax nnx score-bias encodings: ALiBi, T5, Kerple, FIRE, as ``posenc.encodings.bias``.

Each ``bias(q_pos, k_pos)`` is (B or 1, H, Tq, Tk) in float32 (or wider), from positions alone;
the formulas are ``posenc.functional``'s, the parameters carry the torch modules' names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .. import functional as PF
from .._validate import as_4d, check_position_batches, check_positive_float, check_positive_int
from ..functional import KerpleVariant
from ..functional._xp import widest_int
from .base import PositionalEncoding, check_positions, register

Array = jax.Array


def check_bias_positions(q_pos: Any, k_pos: Any) -> tuple[Array, Array]:
    """q_pos (Tq,) | (B, Tq) and k_pos (Tk,) | (B, Tk) with batches 1 or equal; returns them as
    the widest signed int (torch: int64), so i - j cannot wrap around (uint8: 0 - 1 = 255)."""
    q_pos, k_pos = check_positions(q_pos, "q_pos"), check_positions(k_pos, "k_pos")
    check_position_batches(q_pos, k_pos)
    wide = widest_int(jnp)
    return q_pos.astype(wide), k_pos.astype(wide)


def work_dtype(*arrays: Array) -> Any:
    """float32, or the widest dtype among ``arrays`` if wider."""
    return jnp.result_type(jnp.float32, *(a.dtype for a in arrays))


@register("alibi", family="bias")
class ALiBi(PositionalEncoding):
    """Linear biases -m_h·(i - j) (Press et al. 2022, arXiv:2108.12409); ``symmetric``:
    -m_h·|i - j|. Slopes ``PF.alibi_slopes`` or custom, a float32 constant."""

    def __init__(
        self, *, n_heads: int, symmetric: bool = False, slopes: Sequence[float] | None = None
    ) -> None:
        check_positive_int(n_heads, "n_heads")
        if not isinstance(symmetric, bool):
            raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
        if slopes is None:
            values = PF.alibi_slopes(n_heads)
        else:
            if len(slopes) != n_heads:
                raise ValueError(f"slopes must hold n_heads={n_heads} values, got {len(slopes)}")
            for m in slopes:
                check_positive_float(m, "each ALiBi slope")
            values = np.asarray([float(m) for m in slopes])
        self.n_heads, self.symmetric = n_heads, symmetric
        self.slopes = np.asarray(values, dtype=np.float32)  # (H,)

    def bias(self, q_pos: Array, k_pos: Array) -> Array:
        q_pos, k_pos = check_bias_positions(q_pos, k_pos)
        slopes = jnp.asarray(self.slopes)
        return as_4d(PF.alibi_bias(q_pos, k_pos, slopes, symmetric=self.symmetric))


@register("t5", family="bias")
class T5Bias(PositionalEncoding):
    """T5 bias W[bucket(j - i), h] (Raffel et al. 2020, arXiv:1910.10683); W (num_buckets, H)
    ~ N(0, init_std²), buckets from ``PF.t5_relative_bucket``."""

    def __init__(
        self,
        *,
        n_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = False,
        init_std: float = 0.02,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        check_positive_int(n_heads, "n_heads")
        PF.check_t5_buckets(
            bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
        )
        check_positive_float(init_std, "init_std")
        self.n_heads, self.num_buckets, self.max_distance = n_heads, num_buckets, max_distance
        self.bidirectional, self.init_std = bidirectional, float(init_std)
        key = (rngs or nnx.Rngs(0)).params()
        self.weight = nnx.Param(init_std * jax.random.normal(key, (num_buckets, n_heads)))

    def buckets(self, q_pos: Array, k_pos: Array) -> Array:
        """Integer bucket (..., Tq, Tk) of each key-minus-query offset."""
        return PF.t5_relative_bucket(
            -PF.relative_offsets(q_pos, k_pos),
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )

    def bias(self, q_pos: Array, k_pos: Array) -> Array:
        q_pos, k_pos = check_bias_positions(q_pos, k_pos)
        table = self.weight[...]
        values = table.astype(work_dtype(table))[self.buckets(q_pos, k_pos)]  # (..., Tq, Tk, H)
        return as_4d(jnp.moveaxis(values, -1, -3))  # (B|1, H, Tq, Tk)


def clamp_straight_through(x: Array, low: float, high: float | None = None) -> Array:
    """clamp(x, low, high) in value, identity in gradient."""
    return x + jax.lax.stop_gradient(jnp.clip(x, low, high) - x)


@register("kerple", family="bias")
class Kerple(PositionalEncoding):
    """KERPLE (Chi et al. 2022, arXiv:2205.09921), d = |i - j|: "log" -r1·log(1 + r2·d),
    "power" -r1·d^r2; r1, r2 learned per head, clamped (straight-through) to r1 >= eps and
    r2 >= eps ("log") or eps <= r2 <= 2 ("power")."""

    def __init__(
        self,
        *,
        n_heads: int,
        variant: KerpleVariant = "log",
        eps: float = 1e-2,
        init_r1: float | None = None,
        init_r2: float | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        self.r2_max = PF.check_kerple(
            n_heads=n_heads, variant=variant, eps=eps, init_r1=init_r1, init_r2=init_r2
        )
        self.n_heads, self.variant, self.eps = n_heads, variant, float(eps)
        scales = (2.0, 1.0) if variant == "log" else (1.0, 2.0)
        rngs = rngs or nnx.Rngs(0)
        r1, r2 = (
            jnp.full((n_heads,), init)
            if init is not None
            else jax.random.uniform(rngs.params(), (n_heads,), maxval=scale)
            for init, scale in zip((init_r1, init_r2), scales, strict=True)
        )
        self.r1, self.r2 = nnx.Param(r1), nnx.Param(r2)

    def kernel_parameters(self) -> tuple[Array, Array]:
        """r1, r2 (H,) clamped to their ranges, float32 or wider."""
        dtype = work_dtype(self.r1[...])
        r1 = clamp_straight_through(self.r1[...].astype(dtype), self.eps)
        r2 = clamp_straight_through(self.r2[...].astype(dtype), self.eps, self.r2_max)
        return r1, r2

    def bias(self, q_pos: Array, k_pos: Array) -> Array:
        q_pos, k_pos = check_bias_positions(q_pos, k_pos)
        r1, r2 = self.kernel_parameters()
        return as_4d(PF.kerple_bias(q_pos, k_pos, r1, r2, variant=self.variant))


def _torch_linear(n_in: int, n_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    """nnx.Linear initialised like torch.nn.Linear: kernel and bias ~ U(±1/√n_in)."""
    bound = 1.0 / math.sqrt(n_in)

    def uniform(key: Array, shape: Sequence[int], dtype: Any = jnp.float32) -> Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return nnx.Linear(n_in, n_out, kernel_init=uniform, bias_init=uniform, rngs=rngs)


@register("fire", family="bias")
class FIRE(PositionalEncoding):
    """FIRE (Li et al. 2023, arXiv:2310.04418): b_h(i, j) = f_θ(ψ(i - j) / ψ(max(L, i)))_h,
    ψ(x) = log(c·|x| + 1), f_θ = ``mlp_out``(relu(``mlp_in``(·))); c and L = |s·init_threshold|
    learned. The MLP runs in float32 or wider."""

    def __init__(
        self,
        *,
        n_heads: int,
        hidden: int = 32,
        init_c: float = 0.1,
        init_threshold: float = 512.0,
        eps: float = 1e-6,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        check_positive_int(n_heads, "n_heads")
        check_positive_int(hidden, "hidden")
        for value, what in ((init_c, "init_c"), (init_threshold, "init_threshold"), (eps, "eps")):
            check_positive_float(value, what)
        self.n_heads, self.hidden = n_heads, hidden
        self.init_c, self.init_threshold, self.eps = float(init_c), float(init_threshold), eps
        rngs = rngs or nnx.Rngs(0)
        self.mlp_in = _torch_linear(1, hidden, rngs)
        self.mlp_out = _torch_linear(hidden, n_heads, rngs)
        self.c = nnx.Param(jnp.asarray(self.init_c))
        self.threshold_scale = nnx.Param(jnp.asarray(1.0))

    @property
    def threshold(self) -> Array:
        """The learned threshold L = |s·init_threshold| (0-d), in float32 or wider."""
        scale = self.threshold_scale[...]
        return jnp.abs(scale.astype(work_dtype(scale)) * self.init_threshold)

    def bias(self, q_pos: Array, k_pos: Array) -> Array:
        q_pos, k_pos = check_bias_positions(q_pos, k_pos)
        dtype = work_dtype(self.c[...], self.mlp_in.kernel[...])
        c, threshold = self.c[...].astype(dtype), self.threshold.astype(dtype)
        x = PF.fire_distance(q_pos, k_pos, c, threshold, eps=self.eps)  # (..., Tq, Tk)
        b_in, b_out = self.mlp_in.bias, self.mlp_out.bias
        assert b_in is not None and b_out is not None  # _torch_linear gives both a bias
        w1, b1 = self.mlp_in.kernel[0].astype(dtype), b_in[...].astype(dtype)  # (hidden,)
        w2, b2 = self.mlp_out.kernel[...].T.astype(dtype), b_out[...].astype(dtype)  # (H, hidden)
        out = PF.fire_mlp(x, *PF.fire_mlp_pieces(w1, b1, w2, b2))  # (H, ..., Tq, Tk)
        return as_4d(jnp.moveaxis(out, 0, -3))  # (B|1, H, Tq, Tk)
