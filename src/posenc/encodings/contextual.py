"""Contextual position encoding, CoPE (Golovneva et al. 2024, arXiv:2405.18719)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .. import functional as PF
from .._validate import check_positive_int, check_scores
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .context import PositionContext
from .rotary import check_qk


@register("cope", family="contextual", paper="Golovneva et al., arXiv:2405.18719", year=2024)
class CoPE(PositionalEncoding):
    """Positions counted by the context, not by tokens (Golovneva et al. 2024, sec. 3):

    g_ij = σ(z_ij),  p_ij = min(Σ_(t=j..i) g_it, n_positions - 1),
    z_ij += (1 - w) q_i·e[⌊p_ij⌋] + w q_i·e[⌈p_ij⌉],  w = p_ij - ⌊p_ij⌋,
    z the scaled, masked logits (masked gates are 0) and e (n_positions, D) learned and shared
    by heads, as in the paper's code (Appendix B). e starts N(0, 0.02²), not at the code's
    zeros, so positions matter from the first step. Meant for causal attention; positions ignore
    the position ids, so cached decoding equals the full forward.
    """

    capabilities = Capabilities(relative_terms=True)

    def __init__(self, *, head_dim: int, n_positions: int = 64) -> None:
        super().__init__()
        check_positive_int(head_dim, "head_dim")
        check_positive_int(n_positions, "n_positions", minimum=2)
        self.head_dim, self.n_positions = head_dim, n_positions
        self.pos_emb = nn.Parameter(torch.empty(n_positions, head_dim))  # e (P, D)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.pos_emb, std=0.02)

    def relative_logits(
        self,
        scores: Tensor,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: PositionContext | None = None,
    ) -> Tensor:
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"q/k must have head_dim={self.head_dim} features, got {q.shape[-1]}")
        if ctx is None:  # a context's positions were checked by whoever built it
            check_qk(q, k, q_pos, k_pos)
            check_scores(scores, q, k)
        work = torch.promote_types(scores.dtype, torch.float32)  # fractional counts need >= fp32
        positions = PF.cope_positions(scores.to(work), n_positions=self.n_positions)  # like scores
        per_position = q.to(work) @ self.pos_emb.to(work).T  # (B, H, Tq, P)
        return scores + PF.cope_interpolate(positions, per_position).to(scores.dtype)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, n_positions={self.n_positions}"
