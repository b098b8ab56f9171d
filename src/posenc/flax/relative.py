"""Flax relative logit and value terms: torch's ``posenc.encodings.relative`` (Shaw,
Transformer-XL), same arguments and parameter names. ``relative_logits`` adds a term
(B, H, Tq, Tk) to the scaled, masked logits; inputs are checked unless a state comes with
them."""

from __future__ import annotations

import math

import jax
from flax import nnx

from .. import functional as PF
from .._validate import check_positions_match, check_real_floating, check_scores
from ..encodings import configs
from .base import (
    PositionalEncoding,
    PositionState,
    check_ndim,
    check_positions,
    is_concrete,
    register,
)

Array = jax.Array


def normal_param(rngs: nnx.Rngs, *shape: int, std: float = 0.02) -> nnx.Param[Array]:
    """A parameter of ``shape`` ~ N(0, std²)."""
    return nnx.Param(std * jax.random.normal(rngs.params(), shape))


@register(configs.ShawConfig)
class Shaw(PositionalEncoding[PositionState]):
    """As torch's ``Shaw`` (Shaw et al. 2018, arXiv:1803.02155): e_ij += q_i·a^K_ij / √D and
    z_i += Σ_j α_ij a^V_ij, a_ij the row clip(j - i, -K, K) + K of ``key_table``,
    ``value_table`` (2K+1, D) ~ N(0, init_std²) (no value table: no value term).

    Shapes: scores (B, H, Tq, Tk), q (B, H, Tq, D), k (B, H, Tk, D), probs (B, H, Tq, Tk)."""

    config: configs.ShawConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        c = self.config
        rows, std = 2 * c.max_distance + 1, c.init_std
        self.key_table = normal_param(rngs, rows, c.head_dim, std=std)  # (2K+1, D)
        self.value_table = normal_param(rngs, rows, c.head_dim, std=std) if c.values else None

    def index(self, q_pos: Array, k_pos: Array) -> Array:
        """Table rows clip(j - i, -K, K) + K: (Tq, Tk) or (B, Tq, Tk)."""
        return PF.shaw_relative_index(q_pos, k_pos, max_distance=self.config.max_distance)

    def relative_logits(
        self,
        scores: Array,
        q: Array,
        k: Array,
        q_pos: Array,
        k_pos: Array,
        *,
        ctx: PositionState | None = None,
    ) -> Array:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            check_scores(scores, q, k)
        scaled = q / math.sqrt(self.config.head_dim)  # scale the (B, H, Tq, D) factor
        table = self.key_table[...].astype(q.dtype)
        return scores + PF.relative_key_logits(scaled, table, self.index(q_pos, k_pos))

    def relative_values(
        self, probs: Array, q_pos: Array, k_pos: Array, *, ctx: PositionState | None = None
    ) -> Array | None:
        if self.value_table is None:
            return None
        if ctx is None:  # a state's positions were checked by whoever made it
            check_ndim(probs, 4, "probs", "(B, H, Tq, Tk)")
            check_real_floating(probs, "probs")
            q_pos, k_pos = check_positions(q_pos, "q_pos"), check_positions(k_pos, "k_pos")
            check_positions_match(q_pos, probs.shape[0], probs.shape[2], "q_pos")
            check_positions_match(k_pos, probs.shape[0], probs.shape[3], "k_pos")
        table = self.value_table[...]
        return PF.relative_value_output(probs, table, self.index(q_pos, k_pos))  # (B, H, Tq, D)


@register(configs.TransformerXLConfig)
class TransformerXL(PositionalEncoding[PositionState]):
    """As torch's ``TransformerXL`` (Dai et al. 2019, arXiv:1901.02860): A_ij += (q_i·W_R R_(i-j)
    + u·k_j + v·W_R R_(i-j)) / √D (``PF.transformer_xl_terms``), parameters ``r_proj`` W_R
    (H·D, C), ``u``, ``v`` (H, D). The terms size their table by the observed offset range, so
    positions must be concrete: this encoding runs eagerly, not under ``jax.jit``.

    Raises: ValueError for traced positions, or q / k without ``n_heads`` heads."""

    config: configs.TransformerXLConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        H, D = self.config.n_heads, self.head_dim
        self.r_proj = normal_param(rngs, H * D, self.config.dim)  # W_R (H*D, C)
        self.u, self.v = normal_param(rngs, H, D), normal_param(rngs, H, D)

    @property
    def jittable(self) -> bool:
        return False

    @property
    def head_dim(self) -> int:
        """D: the config's (dim // n_heads when not given)."""
        return self.config.head_dim or self.config.dim // self.config.n_heads

    def relative_logits(
        self,
        scores: Array,
        q: Array,
        k: Array,
        q_pos: Array,
        k_pos: Array,
        *,
        ctx: PositionState | None = None,
    ) -> Array:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            check_scores(scores, q, k)
        n_heads = self.config.n_heads
        for what, x in (("q", q), ("k (key heads repeated)", k)):
            if x.shape[1] != n_heads:
                raise ValueError(f"{what} must have n_heads={n_heads} heads, got {x.shape[1]}")
        if not (is_concrete(q_pos) and is_concrete(k_pos)):
            raise ValueError(
                "transformer_xl sizes its relative table by the offsets present, so it needs "
                "concrete positions; call it outside jax.jit"
            )
        scale = 1.0 / math.sqrt(self.head_dim)  # on the factors q, u, v, not the terms
        terms = PF.transformer_xl_terms(
            q * scale,
            k,
            q_pos,
            k_pos,
            r_proj=self.r_proj[...].astype(q.dtype),
            u=self.u[...].astype(q.dtype) * scale,
            v=self.v[...].astype(q.dtype) * scale,
            base=self.config.base,
        )  # (B, H, Tq, Tk), already divided by sqrt(D)
        return scores + terms
