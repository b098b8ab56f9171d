"""Flax nnx encodings that rewrite attention logits or values: Shaw, Transformer-XL, CoPE, as
``posenc.encodings.relative`` / ``contextual`` (same parameter names, functional formulas)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from .. import functional as PF
from .._validate import (
    check_positions_match,
    check_positive_float,
    check_positive_int,
    check_scores,
)
from .base import PositionalEncoding, check_ndim, check_positions, is_concrete, register
from .encodings import check_qk

Array = jax.Array


def _check_head_dim(q: Array, head_dim: int) -> None:
    if q.shape[-1] != head_dim:
        raise ValueError(f"q/k must have head_dim={head_dim} features, got {q.shape[-1]}")


def _normal(rngs: nnx.Rngs, *shape: int) -> nnx.Param[Array]:
    return nnx.Param(0.02 * jax.random.normal(rngs.params(), shape))


@register("shaw", family="relative")
class Shaw(PositionalEncoding):
    """Shaw et al. 2018 (arXiv:1803.02155): e_ij = q_i·(k_j + a^K_ij)/√D, z_i = Σ_j α_ij (v_j +
    a^V_ij), a_ij = table[clip(j - i, -K, K) + K]; ``key_table``, ``value_table`` (2K+1, D)."""

    def __init__(
        self,
        *,
        head_dim: int,
        max_distance: int = 16,
        values: bool = True,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        check_positive_int(head_dim, "head_dim")
        check_positive_int(max_distance, "max_distance")
        if not isinstance(values, bool):
            raise TypeError(f"values must be a bool, got {type(values).__name__}")
        self.head_dim, self.max_distance = head_dim, max_distance
        rngs, rows = rngs or nnx.Rngs(0), 2 * max_distance + 1
        self.key_table = _normal(rngs, rows, head_dim)  # (2K+1, D)
        self.value_table = _normal(rngs, rows, head_dim) if values else None

    def index(self, q_pos: Array, k_pos: Array) -> Array:
        """Table rows clip(j - i, -K, K) + K: (Tq, Tk) or (B, Tq, Tk)."""
        return PF.shaw_relative_index(q_pos, k_pos, max_distance=self.max_distance)

    def relative_logits(
        self, scores: Array, q: Array, k: Array, q_pos: Array, k_pos: Array
    ) -> Array:
        _check_head_dim(q, self.head_dim)
        q_pos, k_pos = check_qk(q, k, q_pos, k_pos)
        check_scores(scores, q, k)  # added to the scores, never broadcast
        table = self.key_table[...].astype(q.dtype)
        extra = PF.relative_key_logits(q, table, self.index(q_pos, k_pos))  # (B, H, Tq, Tk)
        return scores + extra / math.sqrt(self.head_dim)

    def relative_values(self, probs: Array, q_pos: Array, k_pos: Array) -> Array | None:
        if self.value_table is None:
            return None
        check_ndim(probs, 4, "probs", "(B, H, Tq, Tk)")
        q_pos, k_pos = check_positions(q_pos, "q_pos"), check_positions(k_pos, "k_pos")
        check_positions_match(q_pos, probs.shape[0], probs.shape[2], "q_pos")
        check_positions_match(k_pos, probs.shape[0], probs.shape[3], "k_pos")
        return PF.relative_value_output(probs, self.value_table[...], self.index(q_pos, k_pos))


@register("transformer_xl", family="relative")
class TransformerXL(PositionalEncoding):
    """Transformer-XL (Dai et al. 2019, arXiv:1901.02860): A_ij = q_i·k_j + q_i·W_R R_(i-j) +
    u·k_j + v·W_R R_(i-j), over √D; ``r_proj`` W_R (H·D, C), ``u``, ``v`` (H, D).

    ``PF.transformer_xl_terms`` sizes its table by the observed offset range, so positions must
    be concrete: this encoding runs eagerly, not under ``jax.jit``.
    """

    def __init__(
        self,
        *,
        dim: int,
        n_heads: int,
        head_dim: int | None = None,
        base: float = 10000.0,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        check_positive_int(n_heads, "n_heads")
        PF.rope_inv_freq(dim, base=base)  # validates dim (even, > 0) and base
        head_dim = dim // n_heads if head_dim is None else head_dim
        check_positive_int(head_dim, "head_dim")
        check_positive_float(base, "base")
        self.dim, self.n_heads, self.head_dim, self.base = dim, n_heads, head_dim, float(base)
        rngs = rngs or nnx.Rngs(0)
        self.r_proj = _normal(rngs, n_heads * head_dim, dim)  # W_R (H*D, C)
        self.u, self.v = _normal(rngs, n_heads, head_dim), _normal(rngs, n_heads, head_dim)

    @property
    def jittable(self) -> bool:
        return False

    def relative_logits(
        self, scores: Array, q: Array, k: Array, q_pos: Array, k_pos: Array
    ) -> Array:
        _check_head_dim(q, self.head_dim)
        if q.shape[1] != self.n_heads:
            raise ValueError(f"q must have n_heads={self.n_heads} heads, got {q.shape[1]}")
        q_pos, k_pos = check_qk(q, k, q_pos, k_pos)
        check_scores(scores, q, k)
        if not (is_concrete(q_pos) and is_concrete(k_pos)):
            raise ValueError(
                "transformer_xl sizes its relative table by the offsets present, so it needs "
                "concrete positions; call it outside jax.jit"
            )
        terms = PF.transformer_xl_terms(
            q,
            k,
            q_pos,
            k_pos,
            base=self.base,
            r_proj=self.r_proj[...].astype(q.dtype),
            u=self.u[...].astype(q.dtype),
            v=self.v[...].astype(q.dtype),
        )  # (B, H, Tq, Tk)
        return scores + terms / math.sqrt(self.head_dim)


@register("cope", family="contextual")
class CoPE(PositionalEncoding):
    """CoPE (Golovneva et al. 2024, arXiv:2405.18719): p_ij = min(Σ_(t=j..i) σ(z_it), P - 1),
    z_ij += interpolated q_i·e[p_ij]; ``pos_emb`` e (n_positions, D) shared by heads."""

    def __init__(
        self, *, head_dim: int, n_positions: int = 64, rngs: nnx.Rngs | None = None
    ) -> None:
        check_positive_int(head_dim, "head_dim")
        check_positive_int(n_positions, "n_positions", minimum=2)
        self.head_dim, self.n_positions = head_dim, n_positions
        self.pos_emb = _normal(rngs or nnx.Rngs(0), n_positions, head_dim)  # e (P, D)

    def relative_logits(
        self, scores: Array, q: Array, k: Array, q_pos: Array, k_pos: Array
    ) -> Array:
        _check_head_dim(q, self.head_dim)
        check_qk(q, k, q_pos, k_pos)
        check_scores(scores, q, k)
        work = jnp.promote_types(scores.dtype, jnp.float32)  # fractional counts need >= fp32
        positions = PF.cope_positions(scores.astype(work), n_positions=self.n_positions)
        per_position = q.astype(work) @ self.pos_emb[...].astype(work).T  # (B, H, Tq, P)
        return scores + PF.cope_interpolate(positions, per_position).astype(scores.dtype)
