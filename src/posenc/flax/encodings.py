"""Flax nnx versions of NoPE, Sinusoidal, Learned and RoPE: same names, parameters and hooks as
``posenc.encodings`` (nope, absolute, rotary); the formulas are ``posenc.functional``'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .. import functional as PF
from .._validate import (
    check_even,
    check_positions_match,
    check_positive_float,
    check_positive_int,
    check_qk_agree,
)
from ..extension.config import ScalingConfig, scaling_config
from ..functional import LAYOUTS, Layout
from .base import (
    PositionalEncoding,
    check_ndim,
    check_positions,
    extreme,
    is_concrete,
    register,
)

Array = jax.Array
KV_POLICIES = ("reference", "rerotate")


def _check_embed_inputs(x: Array, pos: Any, dim: int) -> Array:
    check_ndim(x, 3, "x", "(B, T, C)")
    if x.shape[-1] != dim:
        raise ValueError(f"x must have C = dim = {dim} features, got {x.shape[-1]}")
    pos = check_positions(pos)
    check_positions_match(pos, x.shape[0], x.shape[1], "pos")
    low = extreme(pos, "min")
    if low is not None and low < 0:
        raise ValueError(f"positions must be >= 0 for an absolute encoding, got min {low}")
    return pos


@register("nope", family="none")
class NoPE(PositionalEncoding):
    """No position information (Kazemnejad et al. 2023, arXiv:2305.19466): identity hooks."""

    def __init__(self) -> None:
        pass


@register("sinusoidal", family="additive")
class Sinusoidal(PositionalEncoding):
    """x_p + scale·PE[p], PE[p, 2i] = sin(p / base^(2i/C)), PE[p, 2i+1] = cos(p / base^(2i/C))
    (Vaswani et al. 2017, arXiv:1706.03762; ``scale`` 1 there, as the torch module). Table in
    the widest float JAX allows, cast to x's."""

    def __init__(self, *, dim: int, base: float = 10000.0, scale: float = 1.0) -> None:
        check_even(dim, "dim")
        check_positive_float(base, "base")
        check_positive_float(scale, "scale")
        self.dim, self.base, self.scale = dim, float(base), float(scale)

    def table(self, pos: Array) -> Array:
        """PE rows for positions (...,) -> (..., C)."""
        return PF.sinusoidal_table(pos, self.dim, base=self.base)

    def embed(self, x: Array, pos: Array) -> Array:
        pos = _check_embed_inputs(x, pos, self.dim)
        pe = self.table(pos)  # (T, C) or (B, T, C)
        return x + (pe if self.scale == 1.0 else self.scale * pe).astype(x.dtype)  # (B, T, C)


@register("learned", family="additive")
class Learned(PositionalEncoding):
    """Learned absolute table x_p + W[p], W (max_len, C) ~ N(0, 0.02²) (Gehring et al. 2017,
    arXiv:1705.03122). Positions outside 0..max_len - 1 raise; under ``jax.jit`` a host check
    raises (it runs only then), and their rows are NaN, never a clamped or wrapped row."""

    def __init__(self, *, dim: int, max_len: int = 512, rngs: nnx.Rngs | None = None) -> None:
        check_positive_int(dim, "dim")
        check_positive_int(max_len, "max_len")
        self.dim, self.max_len = dim, max_len
        key = (rngs or nnx.Rngs(0)).params()
        self.weight = nnx.Param(0.02 * jax.random.normal(key, (max_len, dim)))

    def embed(self, x: Array, pos: Array) -> Array:
        pos = _check_embed_inputs(x, pos, self.dim)
        highest = extreme(pos, "max")
        if highest is not None:
            _check_in_table(extreme(pos, "min"), highest, self.max_len)
        elif pos.size:  # traced: a host check that runs only when a position is outside
            low, high = pos.min(), pos.max()
            jax.lax.cond(
                (low < 0) | (high >= self.max_len),
                lambda: jax.debug.callback(_check_in_table, low, high, self.max_len),
                lambda: None,
            )
        index = jnp.where(pos < 0, self.max_len, pos)  # negatives would wrap, not fill
        # rows outside the table are NaN, never a clamped or wrapped row
        rows = jnp.take(self.weight[...], index, axis=0, mode="fill", fill_value=jnp.nan)
        return x + rows.astype(x.dtype)  # (B, T, C)


def _check_in_table(low: Any, high: Any, max_len: int) -> None:
    low, high = int(low), int(high)
    if high >= max_len or low < 0:
        p, side = (high, "past") if high >= max_len else (low, "before")
        raise ValueError(
            f"position {p} is {side} the learned table (max_len={max_len}, "
            f"valid positions 0..{max_len - 1})"
        )


def check_qk(q: Array, k: Array, q_pos: Any, k_pos: Any) -> tuple[Array, Array]:
    """Validate q (B, H, Tq, D), k (B, Hkv, Tk, D) and their positions (T,) or (B, T)."""
    check_ndim(q, 4, "q", "(B, H, Tq, D)")
    check_ndim(k, 4, "k", "(B, Hkv, Tk, D)")
    q_pos, k_pos = check_positions(q_pos, "q_pos"), check_positions(k_pos, "k_pos")
    check_qk_agree(q, k, q_pos, k_pos)
    return q_pos, k_pos


@register("rope", family="rotary")
class RoPE(PositionalEncoding):
    """Rotary embedding (Su et al. 2021, arXiv:2104.09864): pair i of q_m, k_n rotated by m·θ_i,
    n·θ_i, θ_i = base^(-2i/d), so <R_m q, R_n k> = <q, R_(n-m) k>. ``layout``, ``partial``,
    ``scaling`` (a ``posenc.extension`` method) and ``kv_policy`` as the torch RoPE.

    Frequencies are float64 NumPy constants; angles run in float64 under ``jax_enable_x64``,
    else float32 (exact to ~1e-6 rad below ~10^4 positions). Dynamic scaling reads max(pos),
    so it needs concrete positions (not under ``jax.jit``).
    """

    def __init__(
        self,
        *,
        head_dim: int,
        base: float = 10000.0,
        layout: Layout = "half",
        partial: float = 1.0,
        scaling: ScalingConfig | Mapping[str, Any] | None = None,
        kv_policy: str = "reference",
    ) -> None:
        check_even(head_dim, "head_dim")
        check_positive_float(base, "base")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if kv_policy not in KV_POLICIES:
            raise ValueError(f"kv_policy must be one of {KV_POLICIES}, got {kv_policy!r}")
        self.head_dim, self.base, self.layout = head_dim, float(base), layout
        self.partial, self.kv_policy = float(partial), kv_policy
        self.rotary_dim = PF.rotary_dim(head_dim, self.partial)
        self.default_inv_freq64 = PF.rope_inv_freq(self.rotary_dim, base=self.base)  # (P,)
        self.scaling = None if scaling is None else scaling_config(scaling)
        self.inv_freq64, self.attention_scaling = (
            (self.default_inv_freq64, 1.0)
            if self.scaling is None
            else self.scaling.apply(self.default_inv_freq64)
        )

    @property
    def jittable(self) -> bool:
        return self.scaling is None or not self.scaling.dynamic

    def frequencies(self, *positions: Array) -> tuple[np.ndarray, float]:
        """(inv_freq (P,) float64, attention_scaling), at length max(positions) + 1 if dynamic."""
        if self.scaling is None or not self.scaling.dynamic:
            return self.inv_freq64, self.attention_scaling
        if not all(is_concrete(p) for p in positions):
            raise ValueError(
                f"dynamic RoPE scaling ({self.scaling.method!r}) needs concrete positions to "
                "read the current length; call it outside jax.jit"
            )
        seq_len = max(extreme(p, "max") or 0 for p in positions) + 1
        inv_freq, scale = self.scaling.apply(self.default_inv_freq64, seq_len)
        return np.asarray(inv_freq), scale

    def rotate_one(self, x: Array, pos: Array, freqs: tuple[np.ndarray, float]) -> Array:
        """Rotate x (B, H, T, D) at positions (T,) or (B, T) with ``freqs`` = (inv_freq, scale)."""
        inv_freq, scale = freqs
        work = jnp.promote_types(x.dtype, jnp.float32)
        cos, sin = PF.rope_cos_sin(pos, jnp.asarray(inv_freq))  # (T, P) | (B, T, P)
        cos, sin = (cos * scale).astype(work), (sin * scale).astype(work)
        if cos.ndim == 3:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, P)
        return PF.apply_rope(x, cos, sin, layout=self.layout)

    def rotate(self, q: Array, k: Array, q_pos: Array, k_pos: Array) -> tuple[Array, Array]:
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"q/k must have head_dim={self.head_dim} features, got {q.shape[-1]}")
        q_pos, k_pos = check_qk(q, k, q_pos, k_pos)
        freqs = self.frequencies(q_pos, k_pos)
        return self.rotate_one(q, q_pos, freqs), self.rotate_one(k, k_pos, freqs)
