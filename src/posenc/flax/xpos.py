"""Flax xPos (Sun et al. 2022, arXiv:2212.10554): torch's ``posenc.encodings.xpos``, RoPE with
queries scaled by ζ^(pos/γ_s) and keys by ζ^(-pos/γ_s) (``PF.xpos_scale``), so q·k decays as
ζ^((n - m)/γ_s) with the distance."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
from flax import nnx, struct

from .. import functional as PF
from ..encodings import configs
from ..functional._xp import as_array_of
from .base import DType, PositionalEncoding, bounds, register, tables_dtype
from .rotary import RotaryState, Tables, as_tables, rotate_pair

Array = jax.Array


@struct.dataclass
class XPosState(RotaryState):
    """``RotaryState`` with the scaled tables (queries' at q_pos, keys' at k_pos) and
    ``fresh_k_tables``: the keys' scaling at q_pos, for this forward's own keys."""

    fresh_k_tables: Tables

    def new_keys(self) -> XPosState:
        """This forward's fresh keys sit at q_pos, scaled as keys."""
        return replace(self, k_pos=self.q_pos, k_tables=self.fresh_k_tables)


@register(configs.XPosConfig)
class XPos(PositionalEncoding[XPosState]):
    """As torch's ``XPos``: RoPE scaled by ζ^(±pos/γ_s), θ ``inv_freq`` (P,) float64 NumPy. The
    scaled q or k must fit their dtype: checked where positions are concrete, once per forward
    in ``prepare`` (for the activations' dtype), or per call without a state.

    Shapes: q (B, H, Tq, D), k (B, Hkv, Tk, D), positions (T,) | (B, T).
    Raises: ValueError where ζ^(±pos/γ_s) overflows q's or k's dtype."""

    config: configs.XPosConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.inv_freq = PF.rope_inv_freq(self.config.rotary_dim, base=self.config.base)  # (P,)

    def check_range(self, q_pos: Array, k_pos: Array, q_dtype: DType, k_dtype: DType) -> None:
        """As torch's: raise where the scaled q or k would overflow their dtype (concrete
        positions only; non-floating q/k: ``apply_rope``'s TypeError)."""
        ends = [e for p in (q_pos, k_pos) if (b := bounds(p)) is not None for e in b[::-1]]
        if not ends or not all(jnp.issubdtype(d, jnp.floating) for d in (q_dtype, k_dtype)):
            return
        limits = [(float(jnp.finfo(d).max), str(jnp.dtype(d))) for d in (q_dtype, k_dtype)]
        self.config.check_range(ends, limits)

    def tables(self, pos: Array, sign: int, dtype: DType) -> Tables:
        """ζ^(sign·pos/γ_s) cos, sin of pos·θ (float64 angles) in ``dtype``, for positions
        (T,) | (B, T) -> (T, P) | (B, 1, T, P)."""
        c = self.config
        cos, sin = PF.rope_cos_sin(pos, as_array_of(self.inv_freq, pos))
        scale = PF.xpos_scale(sign * pos, c.rotary_dim, scale_base=c.scale_base, gamma=c.gamma)
        return as_tables(cos * scale, sin * scale, dtype)

    def prepare(
        self,
        q_pos: Array,
        k_pos: Array | None = None,
        *,
        dtype: DType = jnp.float32,
        batch: int | None = None,
    ) -> XPosState:
        k_pos = q_pos if k_pos is None else k_pos
        self.check_range(q_pos, k_pos, dtype, dtype)  # once: every layer meets these positions
        work = tables_dtype(dtype)
        fresh = self.tables(q_pos, -1, work)
        k_tables = fresh if k_pos is q_pos else self.tables(k_pos, -1, work)
        return XPosState(q_pos, k_pos, self.axes, self.tables(q_pos, 1, work), k_tables, fresh)

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: XPosState | None = None
    ) -> tuple[Array, Array]:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            self.check_range(q_pos, k_pos, q.dtype, k.dtype)
            tq = self.tables(q_pos, 1, tables_dtype(q.dtype))
            tk = self.tables(k_pos, -1, tables_dtype(k.dtype))
        else:
            tq, tk = ctx.q_tables, ctx.k_tables
        return rotate_pair(q, k, tq, tk, self.config.layout)
