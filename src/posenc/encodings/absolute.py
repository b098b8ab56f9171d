"""Absolute additive encodings: a vector per position added to the token embedding."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from .._validate import (
    check_embed,
    check_nonnegative,
    values_checked,
)
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import LearnedConfig, SinusoidalConfig
from .context import Ctx, PositionContext


def _check_embed_inputs(x: Tensor, pos: Tensor, dim: int) -> Tensor:
    pos = check_embed(x, pos, dim)
    check_nonnegative(pos)
    return pos


@register("sinusoidal", family="additive", paper="Vaswani et al., arXiv:1706.03762", year=2017)
class Sinusoidal(PositionalEncoding):
    """Fixed sinusoidal table added to embeddings (Vaswani et al. 2017, sec. 3.5):

    x_p + scale·PE[p],  PE[p, 2i] = sin(p / base^(2i/C)),  PE[p, 2i+1] = cos(p / base^(2i/C)).
    An odd width C ends on a sine column (``PF.sinusoidal_table``: as XLM/DistilBERT do).
    The table is computed in float64 for the positions given and cast to x's dtype. ``scale``
    (1 in the paper) sets the table's size against the token embeddings: the paper scales tokens
    up by sqrt(C) instead; x-transformers scales the table by C^-1/2.
    """

    capabilities = Capabilities(embeds=True)
    config_class = SinusoidalConfig

    def prepare(self, q_pos: Tensor, k_pos: Tensor | None = None) -> PositionContext:
        check_nonnegative(q_pos)  # once per forward (keys were queries once)
        return PositionContext(q_pos, k_pos)

    def table(self, pos: Tensor) -> Tensor:
        """PE rows for positions (...,) -> (..., C), float64."""
        return PF.sinusoidal_table(pos, self.dim, base=self.base)

    def embed(self, x: Tensor, pos: Tensor, *, ctx: Ctx = None) -> Tensor:
        pos = pos if ctx is not None else _check_embed_inputs(x, pos, self.dim)
        pe = self.table(pos)  # (T, C) or (B, T, C), float64
        return x + (pe if self.scale == 1.0 else self.scale * pe).to(x.dtype)


@register("learned", family="additive", paper="Gehring et al., arXiv:1705.03122", year=2017)
class Learned(PositionalEncoding):
    """Learned absolute table (Gehring et al. 2017; GPT/BERT): x_p + W[p], W (max_len, C).

    Initialised N(0, 0.02²) as in GPT-2. Positions >= max_len have no row and raise.
    """

    capabilities = Capabilities(embeds=True)
    config_class = LearnedConfig
    config: LearnedConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.weight = nn.Parameter(torch.empty(self.max_len, self.dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.02)

    def embed(self, x: Tensor, pos: Tensor, *, ctx: Ctx = None) -> Tensor:
        pos = pos if ctx is not None else self._check_range(_check_embed_inputs(x, pos, self.dim))
        return x + self.weight[pos].to(x.dtype)  # (B, T, C)

    def prepare(self, q_pos: Tensor, k_pos: Tensor | None = None) -> PositionContext:
        self._check_range(q_pos)  # once per forward (keys were queries once)
        return PositionContext(q_pos, k_pos)

    def _check_range(self, pos: Tensor) -> Tensor:
        """pos, after checking every position has a row (where ``values_checked``)."""
        check_nonnegative(pos)
        if pos.numel() and values_checked(pos):
            self.config.check_rows(int(pos.min()), int(pos.max()))
        return pos
