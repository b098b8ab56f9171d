"""Absolute additive encodings: a vector per position added to the token embedding."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .. import functional as PF
from .._validate import check_embed, check_nonnegative, values_checked
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import LearnedConfig, SinusoidalConfig
from .state import PositionState


@register("sinusoidal", family="additive", paper="Vaswani et al., arXiv:1706.03762", year=2017)
class Sinusoidal(PositionalEncoding[PositionState]):
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
    config: SinusoidalConfig

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> PositionState:
        """The base state, the position values checked once per forward (every key was a
        query once). Raises: ValueError for a negative position."""
        check_nonnegative(q_pos)
        return super().prepare(q_pos, k_pos, dtype=dtype, offset_bounds=offset_bounds)

    def embed(self, x: Tensor, pos: Tensor, *, ctx: PositionState | None = None) -> Tensor:
        """x + scale·PE[pos] in x's dtype (x and pos checked without ``ctx``).

        Shapes: x (B, T, C), pos (T,) | (B, T) -> (B, T, C).
        Raises: ValueError for a negative position, and for inputs that do not fit.
        """
        if ctx is None:
            pos = check_embed(x, pos, self.config.dim, axes=self.config.axes)
            check_nonnegative(pos)
        return x + self.rows(pos).to(x.dtype)  # (B, T, C)

    def table(self, pos: Tensor) -> Tensor:
        """PE rows for positions (...,) -> (..., C), float64 (``PF.sinusoidal_table``)."""
        return PF.sinusoidal_table(pos, self.config.dim, base=self.config.base)

    def rows(self, pos: Tensor) -> Tensor:
        """scale·PE rows for positions (...,) -> (..., C), float64."""
        pe, scale = self.table(pos), self.config.scale
        return pe if scale == 1.0 else scale * pe


@register("learned", family="additive", paper="Gehring et al., arXiv:1705.03122", year=2017)
class Learned(PositionalEncoding[PositionState]):
    """Learned absolute table (Gehring et al. 2017; GPT/BERT): x_p + W[p], W (max_len, C).

    Initialised N(0, 0.02²) as in GPT-2. Positions >= max_len have no row and raise.
    Shapes: ``embed(x, pos)``: x (B, T, C), pos (T,) | (B, T) int64 -> (B, T, C).
    """

    capabilities = Capabilities(embeds=True)
    config_class = LearnedConfig
    config: LearnedConfig

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.weight = nn.Parameter(torch.empty(self.max_len, self.dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: W ~ N(0, 0.02²)."""
        nn.init.normal_(self.weight, std=0.02)

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> PositionState:
        """The base state, the position values checked once per forward (every key was a
        query once). Raises: ValueError for a position without a row."""
        self.check_values(q_pos)
        return super().prepare(q_pos, k_pos, dtype=dtype, offset_bounds=offset_bounds)

    def embed(self, x: Tensor, pos: Tensor, *, ctx: PositionState | None = None) -> Tensor:
        """x + W[pos] in x's dtype (x and pos checked without ``ctx``).

        Shapes: x (B, T, C), pos (T,) | (B, T) -> (B, T, C).
        Raises: ValueError for a position without a row, and for inputs that do not fit.
        """
        if ctx is None:
            pos = check_embed(x, pos, self.config.dim, axes=self.config.axes)
            self.check_values(pos)
        return x + self.rows(pos).to(x.dtype)  # (B, T, C)

    def rows(self, pos: Tensor) -> Tensor:
        """W's rows for positions (...,) -> (..., C)."""
        return self.weight[pos]  # (..., C)

    def check_values(self, pos: Tensor) -> None:
        """Every position has a row (checked where ``values_checked``).

        Raises: ValueError for a negative position or one >= max_len."""
        check_nonnegative(pos)  # so 0 bounds them below: one host read more, of the max
        if pos.numel() and values_checked(pos):
            self.config.check_rows(0, int(pos.max()))
