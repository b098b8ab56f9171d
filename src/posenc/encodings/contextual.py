"""Contextual position encoding, CoPE (Golovneva et al. 2024, arXiv:2405.18719)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .. import functional as PF
from .._validate import check_scores
from ..functional._xp import at_least_float32
from ..registry import register
from .base import PositionalEncoding, check_qk
from .capabilities import Capabilities
from .configs import CoPEConfig
from .state import PositionState


@register("cope", family="contextual", paper="Golovneva et al., arXiv:2405.18719", year=2024)
class CoPE(PositionalEncoding[PositionState]):
    """Positions counted by the context, not by tokens (Golovneva et al. 2024, sec. 3):

    g_ij = σ(z_ij),  p_ij = min(Σ_(t=j..i) g_it, n_positions - 1),
    z_ij += (1 - w) q_i·e[⌊p_ij⌋] + w q_i·e[⌈p_ij⌉],  w = p_ij - ⌊p_ij⌋,
    z the scaled, masked logits (masked gates are 0) and e (n_positions, D) learned and shared
    by heads, as in the paper's code (Appendix B). e starts N(0, 0.02²), not at the code's
    zeros, so positions matter from the first step. Meant for causal attention; positions ignore
    the position ids, so cached decoding equals the full forward.
    Shapes: ``relative_logits(scores, q, k, q_pos, k_pos)``: scores (B, H, Tq, Tk), q (B, H, Tq, D),
    k (B, Hkv, Tk, D), q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) int64 -> (B, H, Tq, Tk).
    """

    capabilities = Capabilities(relative_terms=True)
    config_class = CoPEConfig
    config: CoPEConfig

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.pos_emb = nn.Parameter(torch.empty(self.n_positions, self.head_dim))  # e (P, D)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: e ~ N(0, 0.02²)."""
        nn.init.normal_(self.pos_emb, std=0.02)

    def relative_logits(
        self,
        scores: Tensor,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: PositionState | None = None,
    ) -> Tensor:
        """scores + (1 - w) q_i·e[⌊p_ij⌋] + w q_i·e[⌈p_ij⌉] for the contextual positions p_ij of
        the scores (``PF.cope_positions``), in float32 or the scores' wider dtype (inputs
        checked without ``ctx``).

        Shapes: scores (B, H, Tq, Tk), q (B, H, Tq, D), k (B, H, Tk, D) -> (B, H, Tq, Tk).
        Raises: ValueError/TypeError for inputs that do not fit (without ``ctx``).
        """
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.config.head_dim)
            check_scores(scores, q, k)
        work = at_least_float32(scores)  # fractional counts need >= fp32
        positions = PF.cope_positions(scores.to(work), n_positions=self.config.n_positions)
        per_position = q.to(work) @ self.pos_emb.to(work).T  # (B, H, Tq, P)
        return scores + PF.cope_interpolate(positions, per_position).to(scores.dtype)
