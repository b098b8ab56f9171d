"""Flax RoPE and p-RoPE: torch's ``posenc.encodings.rotary`` (same arguments; no ``kernel``:
``PF.apply_rope`` rotates), and ``RotaryState``, the cos/sin tables of one forward that every
rotary encoding (these, the grid ones) makes in ``prepare`` and each layer reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from .. import functional as PF
from ..encodings import configs
from ..functional import Layout
from ..functional._xp import as_array_of
from .base import (
    DType,
    PositionalEncoding,
    PositionState,
    bounds,
    is_concrete,
    register,
    tables_dtype,
)

Array = jax.Array
#: cos, sin broadcastable to x (B, H, T, D): (T, P), (B, 1, T, P), or (B|1, H, T, P) per head.
Tables = tuple[Array, Array]


@struct.dataclass
class RotaryState(PositionState):
    """The positions of one forward and their rotation tables: ``q_tables`` at q_pos,
    ``k_tables`` at k_pos (the same arrays when k_pos is q_pos)."""

    q_tables: Tables
    k_tables: Tables

    def new_keys(self) -> RotaryState:
        """This forward's fresh keys sit at q_pos: their tables are the queries'."""
        return replace(self, k_pos=self.q_pos, k_tables=self.q_tables)


def as_tables(cos: Array, sin: Array, dtype: DType, per_head: bool = False) -> Tables:
    """cos, sin (..., T, P) in ``dtype``, broadcastable to x (B, H, T, D): (B, T, P) as
    (B, 1, T, P) unless ``per_head`` (they already hold a head axis)."""
    cos, sin = cos.astype(dtype), sin.astype(dtype)
    if cos.ndim == 3 and not per_head:  # (B, T, P) -> (B, 1, T, P)
        cos, sin = cos[:, None], sin[:, None]
    return cos, sin


def rotary_state(
    tables: Callable[[Array, DType], Tables],
    q_pos: Array,
    k_pos: Array | None,
    dtype: DType,
    axes: int,
) -> RotaryState:
    """The ``RotaryState`` of positions q_pos and k_pos (default q_pos): ``tables(pos, dtype)``
    of each, in float32 or the activations' wider ``dtype``, made once when they are one."""
    k_pos = q_pos if k_pos is None else k_pos
    work = tables_dtype(dtype)
    q_tables = tables(q_pos, work)
    k_tables = q_tables if k_pos is q_pos else tables(k_pos, work)
    return RotaryState(q_pos, k_pos, axes, q_tables, k_tables)


def rotate_pair(q: Array, k: Array, tq: Tables, tk: Tables, layout: Layout) -> tuple[Array, Array]:
    """q (B, H, Tq, D) turned by its tables ``tq``, k (B, Hkv, Tk, D) by ``tk``
    (``PF.apply_rope``, pairs as ``layout`` says)."""
    return PF.apply_rope(q, *tq, layout=layout), PF.apply_rope(k, *tk, layout=layout)


@register(configs.RoPEConfig)
class RoPE(PositionalEncoding[RotaryState]):
    """As torch's ``RoPE`` (Su et al. 2021, arXiv:2104.09864): q, k turned pair by pair by
    pos·θ, tables cos, sin times the scaling's attention factor. Frequencies are float64 NumPy
    constants; angles run in float64 under ``jax_enable_x64``, else float32 (exact to ~1e-6
    rad below ~10^4 positions). Dynamic scaling takes θ at the current length max(positions) +
    1, read on the host, so it needs concrete positions (not under ``jax.jit``).

    Shapes: q (B, H, Tq, D), k (B, Hkv, Tk, D), positions (T,) | (B, T)."""

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
            scaling = self.config.scaling
            method = None if scaling is None else scaling.method
            raise ValueError(
                f"dynamic RoPE scaling ({method!r}) needs concrete positions "
                "to read the current length; call it outside jax.jit"
            )
        return max((b[1] for p in positions if (b := bounds(p)) is not None), default=-1)

    def seq_len(self, *positions: Array) -> int | None:
        """max(positions) + 1 for dynamic scaling (what transformers uses), else None."""
        return self.max_position(*positions) + 1 if self.config.dynamic else None

    def frequencies(self, seq_len: int | None) -> tuple[np.ndarray, float]:
        """(inv_freq (P,) float64, attention_scaling) at the current length ``seq_len``."""
        scaling_config = self.config.scaling
        if not self.config.dynamic or seq_len is None or scaling_config is None:
            return self.inv_freq64, self.attention_scaling
        inv_freq, scaling = scaling_config.apply(self.default_inv_freq64, seq_len)
        return inv_freq, scaling

    def tables(self, pos: Array, dtype: DType, seq_len: int | None) -> Tables:
        """cos, sin of pos·θ (``PF.rope_cos_sin``, float64 angles) times the attention factor,
        in ``dtype``, for positions (T,) | (B, T) -> (T, P) | (B, 1, T, P)."""
        inv_freq, scale = self.frequencies(seq_len)
        cos, sin = PF.rope_cos_sin(pos, as_array_of(inv_freq, pos))  # (..., T, P)
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        return as_tables(cos, sin, dtype)

    def prepare(
        self,
        q_pos: Array,
        k_pos: Array | None = None,
        *,
        dtype: DType = jnp.float32,
        batch: int | None = None,
    ) -> RotaryState:
        seq_len = self.seq_len(q_pos, q_pos if k_pos is None else k_pos)
        tables = partial(self.tables, seq_len=seq_len)
        return rotary_state(tables, q_pos, k_pos, dtype, self.axes)

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: RotaryState | None = None
    ) -> tuple[Array, Array]:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            seq_len = self.seq_len(q_pos, k_pos)
            tq = self.tables(q_pos, tables_dtype(q.dtype), seq_len)
            tk = self.tables(k_pos, tables_dtype(k.dtype), seq_len)
        else:
            tq, tk = ctx.q_tables, ctx.k_tables
        return rotate_pair(q, k, tq, tk, self.config.layout)


@register(configs.PRoPEConfig)
class PRoPE(RoPE):
    """As torch's ``PRoPE`` (Barbero et al. 2024, arXiv:2410.06205): RoPE on p-RoPE's
    frequencies (``PF.p_rope_inv_freq``: the lowest frequencies set to zero)."""

    config: configs.PRoPEConfig
