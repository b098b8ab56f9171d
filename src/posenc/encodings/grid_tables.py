"""Additive position tables on image grids: a vector per (row, column) added to each patch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor, nn

from .. import functional as PF
from .._validate import check_embed, values_checked
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import Learned2DConfig, Sincos2DConfig
from .state import PositionState


@register("sincos_2d", family="additive", paper="He et al., arXiv:2111.06377", year=2022)
class Sincos2D(PositionalEncoding[PositionState]):
    """MAE's fixed 2-D sin-cos table added to patch embeddings.

    MAE's fixed 2-D sin-cos table added to patch embeddings (He et al. 2022, released code
    ``get_2d_sincos_pos_embed``): at grid position (y, x) (row, column),

        PE = [sin(x ω), cos(x ω), sin(y ω), cos(y ω)],  ω_i = base^(-i/(C/4)), i < C/4,

    the column first as in MAE. Computed in float64 for the positions given (any grid size,
    so a larger grid needs no resampling) and cast to x's dtype; positions (T, 2) | (B, T, 2).
    ``scale`` (1 in MAE) multiplies the table, as ``sinusoidal``'s: x + scale·PE.
    Shapes: ``embed(x, pos)``: x (B, T, C), pos (T, 2) | (B, T, 2) int64 -> (B, T, C).
    """

    capabilities = Capabilities(embeds=True)
    config_class = Sincos2DConfig
    config: Sincos2DConfig

    def embed(self, x: Tensor, pos: Tensor, *, ctx: PositionState | None = None) -> Tensor:
        """x + scale·PE[pos] in x's dtype (x and pos checked without ``ctx``).

        Shapes: x (B, T, C), pos (T, 2) | (B, T, 2) -> (B, T, C).
        Raises: ValueError/TypeError for inputs that do not fit (without ``ctx``).
        """
        if ctx is None:
            pos = check_embed(x, pos, self.config.dim, axes=self.config.axes)
        return x + self.rows(pos).to(x.dtype)  # (B, T, C)

    def table(self, pos: Tensor) -> Tensor:
        """PE rows for positions (..., 2) -> (..., C), float64 (``PF.sincos_2d_table``)."""
        return PF.sincos_2d_table(pos, self.config.dim, base=self.config.base)

    def rows(self, pos: Tensor) -> Tensor:
        """scale·PE rows for positions (..., 2) -> (..., C), float64."""
        pe, scale = self.table(pos), self.config.scale
        return pe if scale == 1.0 else scale * pe


@register("learned_2d", family="additive", paper="Dosovitskiy et al., arXiv:2010.11929", year=2021)
class Learned2D(PositionalEncoding[PositionState]):
    """A learned position table over a grid of patches (ViT).

    A learned table over a grid of ``grid`` = (rows, columns) patches, as ViT's position
    embedding (Dosovitskiy et al. 2021): x + W[y·columns + x] at grid position (y, x), W
    (rows·columns, C) initialised N(0, init_std²) (0.02, ViT's), rows in raster order.
    ``resample_(new_grid)`` interpolates W to another grid (bicubic with antialias, as timm's
    ``resample_abs_pos_embed``: ``posenc.functional.resample_table``); positions outside the
    grid raise.
    Shapes: ``embed(x, pos)``: x (B, T, C), pos (T, 2) | (B, T, 2) int64 -> (B, T, C).
    """

    capabilities = Capabilities(embeds=True)
    config_class = Learned2DConfig
    config: Learned2DConfig

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        rows, cols = self.config.grid
        self.weight = nn.Parameter(torch.empty(rows * cols, self.dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: W ~ N(0, init_std²)."""
        nn.init.normal_(self.weight, std=self.config.init_std)

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> PositionState:
        """The base state, the position values checked once per forward (every key was a
        query once). Raises: ValueError for a position off the grid."""
        self.check_values(q_pos)
        return super().prepare(q_pos, k_pos, dtype=dtype, offset_bounds=offset_bounds)

    def embed(self, x: Tensor, pos: Tensor, *, ctx: PositionState | None = None) -> Tensor:
        """x + W[y·columns + x] in x's dtype (x and pos checked without ``ctx``).

        Shapes: x (B, T, C), pos (T, 2) | (B, T, 2) -> (B, T, C).
        Raises: ValueError for a position off the grid, and for inputs that do not fit.
        """
        if ctx is None:
            pos = check_embed(x, pos, self.config.dim, axes=self.config.axes)
            self.check_values(pos)
        return x + self.rows(pos).to(x.dtype)  # (B, T, C)

    def rows(self, pos: Tensor) -> Tensor:
        """W's rows for positions (..., 2) -> (..., C), raster order."""
        return self.weight[pos[..., 0] * self.config.grid[1] + pos[..., 1]]  # raster order

    def resample_(
        self, grid: Sequence[int], *, mode: PF.ResampleMode = "bicubic", antialias: bool = True
    ) -> Learned2D:
        """Interpolate W in place to ``grid`` (rows, columns) (``resample_table``); returns
        self. The parameter is replaced: rebuild an optimizer that held the old one.

        Raises: TypeError/ValueError for a ``grid`` that is not two ints >= 1."""
        new = PF.check_grid(grid, "grid")
        with torch.no_grad():
            table = PF.resample_table(
                self.weight, self.config.grid, new, mode=mode, antialias=antialias
            )
        self.weight = nn.Parameter(table, requires_grad=self.weight.requires_grad)
        self.config = replace(self.config, grid=new)
        self.__dict__["grid"] = new
        return self

    def check_values(self, pos: Tensor) -> None:
        """Every position lies on the grid (checked where ``values_checked``).

        Raises: ValueError for a position off the grid."""
        if pos.numel() and values_checked(pos):
            y, x = pos[..., 0], pos[..., 1]
            self.config.check_rows(y.min(), y.max(), x.min(), x.max())
