"""Absolute additive encodings: a vector per position added to the token embedding."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .._validate import (
    check_nonnegative,
    values_checked,
)
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import LearnedConfig, SinusoidalConfig
from .flows import AbsoluteFlow, SinusoidalFlow


@register("sinusoidal", family="additive", paper="Vaswani et al., arXiv:1706.03762", year=2017)
class Sinusoidal(SinusoidalFlow, PositionalEncoding):
    """Fixed sinusoidal table added to embeddings (Vaswani et al. 2017, sec. 3.5):

    x_p + scale·PE[p],  PE[p, 2i] = sin(p / base^(2i/C)),  PE[p, 2i+1] = cos(p / base^(2i/C)).
    An odd width C ends on a sine column (``PF.sinusoidal_table``: as XLM/DistilBERT do).
    The table is computed in float64 for the positions given and cast to x's dtype. ``scale``
    (1 in the paper) sets the table's size against the token embeddings: the paper scales tokens
    up by sqrt(C) instead; x-transformers scales the table by C^-1/2.
    Shapes: ``embed(x, pos)``: x (B, T, C), pos (T,) | (B, T) int64 -> (B, T, C).
    """

    capabilities = Capabilities(embeds=True)
    config_class = SinusoidalConfig

    check_values = staticmethod(check_nonnegative)


@register("learned", family="additive", paper="Gehring et al., arXiv:1705.03122", year=2017)
class Learned(AbsoluteFlow, PositionalEncoding):
    """Learned absolute table (Gehring et al. 2017; GPT/BERT): x_p + W[p], W (max_len, C).

    Initialised N(0, 0.02²) as in GPT-2. Positions >= max_len have no row and raise.
    Shapes: ``embed(x, pos)``: x (B, T, C), pos (T,) | (B, T) int64 -> (B, T, C).
    """

    capabilities = Capabilities(embeds=True)
    config_class = LearnedConfig
    config: LearnedConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.weight = nn.Parameter(torch.empty(self.max_len, self.dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: W ~ N(0, 0.02²)."""
        nn.init.normal_(self.weight, std=0.02)

    def rows(self, pos: Tensor) -> Tensor:
        return self.weight[pos]  # (..., C)

    def check_values(self, pos: Tensor) -> None:
        """Every position has a row (checked where ``values_checked``).

        Raises: ValueError for a negative position or one >= max_len."""
        check_nonnegative(pos)  # so 0 bounds them below: one host read more, of the max
        if pos.numel() and values_checked(pos):
            self.config.check_rows(0, int(pos.max()))
