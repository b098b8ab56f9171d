"""Contextual position encoding, CoPE (Golovneva et al. 2024, arXiv:2405.18719)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import CoPEConfig
from .flows import CoPEFlow


@register("cope", family="contextual", paper="Golovneva et al., arXiv:2405.18719", year=2024)
class CoPE(CoPEFlow, PositionalEncoding):
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

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.pos_emb = nn.Parameter(torch.empty(self.n_positions, self.head_dim))  # e (P, D)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: e ~ N(0, 0.02²)."""
        nn.init.normal_(self.pos_emb, std=0.02)
