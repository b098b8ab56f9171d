"""Flax encodings that rewrite attention logits or values: Shaw, Transformer-XL and CoPE, as
torch's ``posenc.encodings.relative`` / ``contextual`` (same arguments and parameters)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from .. import functional as PF
from .._validate import check_positions_match, check_scores
from ..encodings import configs
from .base import (
    Ctx,
    PositionalEncoding,
    check_ndim,
    check_positions,
    check_qk,
    is_concrete,
    register,
)

Array = jax.Array


def _normal(rngs: nnx.Rngs, *shape: int) -> nnx.Param[Array]:
    return nnx.Param(0.02 * jax.random.normal(rngs.params(), shape))


class Relative(PositionalEncoding):
    """Checks of ``relative_logits``' inputs, skipped when a context comes with them."""

    def checked(
        self, scores: Array, q: Array, k: Array, q_pos: Array, k_pos: Array, ctx: Ctx
    ) -> tuple[Array, Array]:
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.head_dim)
            check_scores(scores, q, k)  # added to the scores, never broadcast
        return q_pos, k_pos


@register(configs.ShawConfig)
class Shaw(Relative):
    """As torch's ``Shaw``: ``key_table``, ``value_table`` (2K+1, D) ~ N(0, 0.02²)."""

    config: configs.ShawConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        rows = 2 * self.max_distance + 1
        self.key_table = _normal(rngs, rows, self.head_dim)  # (2K+1, D)
        self.value_table = _normal(rngs, rows, self.head_dim) if self.config.values else None

    def index(self, q_pos: Array, k_pos: Array) -> Array:
        """Table rows clip(j - i, -K, K) + K: (Tq, Tk) or (B, Tq, Tk)."""
        return PF.shaw_relative_index(q_pos, k_pos, max_distance=self.max_distance)

    def relative_logits(
        self, scores: Array, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: Ctx = None
    ) -> Array:
        q_pos, k_pos = self.checked(scores, q, k, q_pos, k_pos, ctx)
        table = self.key_table[...].astype(q.dtype)
        extra = PF.relative_key_logits(q, table, self.index(q_pos, k_pos))  # (B, H, Tq, Tk)
        return scores + extra / math.sqrt(self.head_dim)

    def relative_values(
        self, probs: Array, q_pos: Array, k_pos: Array, *, ctx: Ctx = None
    ) -> Array | None:
        if self.value_table is None:
            return None
        if ctx is None:
            check_ndim(probs, 4, "probs", "(B, H, Tq, Tk)")
            q_pos, k_pos = check_positions(q_pos, "q_pos"), check_positions(k_pos, "k_pos")
            check_positions_match(q_pos, probs.shape[0], probs.shape[2], "q_pos")
            check_positions_match(k_pos, probs.shape[0], probs.shape[3], "k_pos")
        return PF.relative_value_output(probs, self.value_table[...], self.index(q_pos, k_pos))


@register(configs.TransformerXLConfig)
class TransformerXL(Relative):
    """As torch's ``TransformerXL``: ``r_proj`` W_R (H·D, C), ``u``, ``v`` (H, D).
    ``PF.transformer_xl_terms`` sizes its table by the observed offset range, so positions must
    be concrete: this encoding runs eagerly, not under ``jax.jit``."""

    def setup(self, rngs: nnx.Rngs) -> None:
        H, D = self.n_heads, self.head_dim
        self.r_proj = _normal(rngs, H * D, self.dim)  # W_R (H*D, C)
        self.u, self.v = _normal(rngs, H, D), _normal(rngs, H, D)

    @property
    def jittable(self) -> bool:
        return False

    def relative_logits(
        self, scores: Array, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: Ctx = None
    ) -> Array:
        q_pos, k_pos = self.checked(scores, q, k, q_pos, k_pos, ctx)
        if q.shape[1] != self.n_heads:
            raise ValueError(f"q must have n_heads={self.n_heads} heads, got {q.shape[1]}")
        if not (is_concrete(q_pos) and is_concrete(k_pos)):
            raise ValueError(
                "transformer_xl sizes its relative table by the offsets present, so it needs "
                "concrete positions; call it outside jax.jit"
            )
        weights = {n: getattr(self, n)[...].astype(q.dtype) for n in ("r_proj", "u", "v")}
        terms = PF.transformer_xl_terms(q, k, q_pos, k_pos, base=self.base, **weights)
        return scores + terms / math.sqrt(self.head_dim)  # (B, H, Tq, Tk)


@register(configs.CoPEConfig)
class CoPE(Relative):
    """As torch's ``CoPE``: ``pos_emb`` e (n_positions, D) shared by heads."""

    def setup(self, rngs: nnx.Rngs) -> None:
        self.pos_emb = _normal(rngs, self.n_positions, self.head_dim)  # e (P, D)

    def relative_logits(
        self, scores: Array, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: Ctx = None
    ) -> Array:
        self.checked(scores, q, k, q_pos, k_pos, ctx)
        work = jnp.promote_types(scores.dtype, jnp.float32)  # fractional counts need >= fp32
        positions = PF.cope_positions(scores.astype(work), n_positions=self.n_positions)
        per_position = q.astype(work) @ self.pos_emb[...].astype(work).T  # (B, H, Tq, P)
        return scores + PF.cope_interpolate(positions, per_position).astype(scores.dtype)
