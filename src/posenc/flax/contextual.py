"""Flax CoPE (Golovneva et al. 2024, arXiv:2405.18719): torch's ``posenc.encodings.contextual``,
positions counted from the attention scores themselves."""

from __future__ import annotations

import jax
from flax import nnx

from .. import functional as PF
from .._validate import check_scores
from ..encodings import configs
from .base import PositionalEncoding, PositionState, register, tables_dtype
from .relative import normal_param

Array = jax.Array


@register(configs.CoPEConfig)
class CoPE(PositionalEncoding[PositionState]):
    """As torch's ``CoPE``: z_ij += (1 - w) q_i·e[⌊p_ij⌋] + w q_i·e[⌈p_ij⌉] for the contextual
    positions p_ij of the scores (``PF.cope_positions``), e ``pos_emb`` (n_positions, D) shared
    by heads, in float32 or the scores' wider dtype.

    Shapes: scores (B, H, Tq, Tk), q (B, H, Tq, D), k (B, H, Tk, D)."""

    config: configs.CoPEConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.pos_emb = normal_param(rngs, self.config.n_positions, self.config.head_dim)  # (P, D)

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
            self.check_qk(q, k, q_pos, k_pos)
            check_scores(scores, q, k)
        work = tables_dtype(scores.dtype)  # fractional counts need >= fp32
        positions = PF.cope_positions(scores.astype(work), n_positions=self.config.n_positions)
        per_position = q.astype(work) @ self.pos_emb[...].astype(work).T  # (B, H, Tq, P)
        return scores + PF.cope_interpolate(positions, per_position).astype(scores.dtype)
