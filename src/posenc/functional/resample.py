"""Resampling a position table laid out on a grid to another grid (a ViT read at another
resolution), as timm's ``resample_abs_pos_embed`` does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from .._validate import check_positive_int, check_real_floating

ResampleMode = Literal["bicubic", "bilinear", "nearest"]
RESAMPLE_MODES: tuple[ResampleMode, ...] = ("bicubic", "bilinear", "nearest")


def check_grid(grid: Sequence[int], what: str) -> tuple[int, int]:
    """``grid`` as (rows, columns) of positive ints. Raises: TypeError/ValueError."""
    if isinstance(grid, str) or not isinstance(grid, Sequence) or len(grid) != 2:
        raise ValueError(f"{what} must be (rows, columns), got {grid!r}")
    for n in grid:
        check_positive_int(n, f"each size of {what}")
    return int(grid[0]), int(grid[1])


def resample_table(
    table: Any,
    old_grid: Sequence[int],
    new_grid: Sequence[int],
    *,
    mode: ResampleMode = "bicubic",
    antialias: bool = True,
) -> Any:
    """A grid position table interpolated to another grid (timm's resampling).

    The table's rows, one per cell of ``old_grid`` (h, w) in raster order, interpolated as
    an image of C channels to ``new_grid`` (h', w'): ``F.interpolate`` with
    align_corners=False and, for bilinear and bicubic, ``antialias`` (used when shrinking).
    This is timm's ``resample_abs_pos_embed`` (its default: bicubic, antialias) without
    prefix tokens; it computes in float32 or the table's wider dtype.

    Shapes: table (..., h·w, C) -> (..., h'·w', C), in its dtype. A torch tensor gives a
    tensor; another array (NumPy, JAX) a NumPy array.
    Raises: TypeError for a table without a real floating dtype; ValueError for a mode other
    than bicubic/bilinear/nearest, antialias with nearest, grids that are not two positive
    ints, or a table without h·w rows.
    Paper: Dosovitskiy et al. 2021, arXiv:2010.11929, sec. 3.2
    (2-D interpolation of the pre-trained table).
    """
    if mode not in RESAMPLE_MODES:
        raise ValueError(f"mode must be one of {RESAMPLE_MODES}, got {mode!r}")
    if antialias and mode == "nearest":
        raise ValueError("antialias applies to bilinear and bicubic; pass antialias=False")
    h, w = check_grid(old_grid, "old_grid")
    nh, nw = check_grid(new_grid, "new_grid")
    check_real_floating(table, "table")
    if table.ndim < 2 or table.shape[-2] != h * w:
        raise ValueError(
            f"table must have shape (..., h·w, C) = (..., {h * w}, C) for old_grid {(h, w)}, "
            f"got {tuple(table.shape)}"
        )
    is_torch = isinstance(table, torch.Tensor)
    x = table if is_torch else torch.from_numpy(np.asarray(table, dtype=np.float64))
    lead, C = x.shape[:-2], x.shape[-1]
    work = torch.promote_types(x.dtype, torch.float32)
    grid = x.to(work).reshape(-1, h, w, C).permute(0, 3, 1, 2)  # (N, C, h, w)
    smooth = {"antialias": antialias} if mode != "nearest" else {}
    align = {"align_corners": False} if mode != "nearest" else {}
    out = F.interpolate(grid, size=(nh, nw), mode=mode, **align, **smooth)  # (N, C, h', w')
    out = out.permute(0, 2, 3, 1).reshape(*lead, nh * nw, C).to(x.dtype)
    return out if is_torch else out.numpy()
