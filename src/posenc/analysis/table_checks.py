"""Checks on additive tables PE (N, C): bounded, unique, shifted by a block rotation, decaying
similarity (Vaswani et al. 2017, arXiv:1706.03762, sec. 3.5; seed tutorial 003)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import Tensor

from .. import functional as PF
from ..encodings.base import PositionalEncoding
from .result import check, largest_rise
from .subjects import (
    D_MODEL,
    evaluating,
    geometry_attr,
    is_additive,
    is_parameter_free,
    is_sequence,
    probe_positions,
)


def additive_table(pe: PositionalEncoding, n_positions: int = 1024) -> Tensor:
    """The vectors ``pe.embed`` adds at positions 0..N-1 (capped at ``pe.max_len``), or for a
    grid encoding at N cells of a grid in raster order (``probe_positions``; capped at a
    learned table's cells), in eval mode (randomized positions sample only in training): (N, C)."""
    n = min(n_positions, getattr(pe, "max_len", n_positions))
    grid = getattr(pe, "grid", None)
    if grid is not None:  # a learned grid: the square of cells it holds
        side = min(grid)
        n = min(n, side * side)
    dim = geometry_attr(pe, "dim", D_MODEL)
    zeros = torch.zeros(1, n, dim, dtype=torch.float64)
    with torch.no_grad(), evaluating(pe):
        return pe.embed(zeros, probe_positions(pe, n))[0].double()  # (N, C)


def unit_table(pe: PositionalEncoding, n_positions: int = 1024) -> Tensor:
    """``additive_table`` without the encoding's ``scale`` (x + scale·PE gives PE): (N, C)."""
    return additive_table(pe, n_positions) / float(geometry_attr(pe, "scale", 1.0))


def _fixed_table(pe: PositionalEncoding) -> bool:
    return is_additive(pe) and is_parameter_free(pe)


def sinusoid_like(pe: PositionalEncoding) -> bool:
    """A fixed additive table of 1-D positions with ``base`` and ``dim``: Vaswani's sinusoids."""
    return _fixed_table(pe) and is_sequence(pe) and hasattr(pe, "base") and hasattr(pe, "dim")


@check("table_bounded", applies=_fixed_table, tolerance=1.0 + 1e-12)
def table_bounded(pe: PositionalEncoding) -> tuple[float, str]:
    """Every entry of the table stays in [-1, 1], however far the position (the table PE
    before the encoding's ``scale``)."""
    table = unit_table(pe, 8192)
    peak = float(table.abs().max())
    return peak, f"max |PE[p, c]| over {table.shape[0]} positions = {peak:.6f}"


@check("table_unique_rows", applies=is_additive, tolerance=1e-3, comparison=">=")
def table_unique_rows(pe: PositionalEncoding) -> tuple[float, str]:
    """Every position gets its own vector: min ||PE[p] - PE[q]|| over p != q is well above 0
    (PE before the encoding's ``scale``; grid encodings: every cell of a grid)."""
    table = unit_table(pe)
    dist = torch.cdist(table, table)  # (N, N)
    dist.fill_diagonal_(float("inf"))
    closest = float(dist.min())
    return closest, f"{table.shape[0]} rows; closest pair at distance {closest:.3e}"


@check("table_shift_is_rotation", applies=sinusoid_like, tolerance=1e-12)
def table_shift_is_rotation(pe: PositionalEncoding) -> tuple[float, str]:
    """PE[p + k] = M_k PE[p] with M_k the block rotation by k·θ_i (``PF.shift_matrix``; seed
    003: ~1e-15). An odd width's last column, a sine without its cosine, has no such map: the
    check covers the dim - 1 paired columns and says so."""
    table = additive_table(pe)  # (N, C)
    table_pe: Any = pe
    paired = table.shape[1] - table.shape[1] % 2  # 2P columns
    errs = []
    for k in (1, 5, 100):
        M = torch.from_numpy(PF.shift_matrix(k, table_pe.dim, base=table_pe.base))  # (2P, 2P)
        shifted = table[:-k, :paired] @ M.T  # (N - k, 2P)
        errs.append(float((shifted - table[k:, :paired]).abs().max()))
    detail = "k = 1, 5, 100: max |M_k PE[p] - PE[p+k]| " + ", ".join(f"{e:.1e}" for e in errs)
    if paired < table.shape[1]:
        detail += f" (odd width: columns 0..{paired - 1}; column {paired} is a sine alone)"
    return max(errs), detail


#: Largest ratio θ_i/θ_(i+1) = base^(2/C) between consecutive pairs for which Σ_i cos(d·θ_i)
#: averages out over octaves of d (C >= 22 at base 10^4; below, single pairs ripple through).
DENSE_RATIO = 2.5


def _dense_sinusoid(pe: PositionalEncoding) -> bool:
    table_pe: Any = pe
    return sinusoid_like(pe) and table_pe.base ** (2 / table_pe.dim) <= DENSE_RATIO


@check("table_dot_decays", applies=_dense_sinusoid, tolerance=1e-12)
def table_dot_decays(pe: PositionalEncoding) -> tuple[float, str]:
    """PE[0]·PE[d] = Σ_i cos(d·θ_i) decays with d on average: octave-bin means never rise and
    the last bin is below half of PE[0]·PE[0]. Error = largest rise + how far the last bin
    misses the half.

    Over d < π/(2·θ_min) (the slowest pair's quarter turn, at most 4096): past it the sum
    swings back up towards 0 (base 100: from d ≈ 160 on). For frequencies dense enough to
    average only, base^(2/C) <= 2.5: with fewer pairs per octave the sum ripples up and down."""
    table_pe: Any = pe
    inv_freq = PF.inv_freq_series(table_pe.dim, base=table_pe.base, xp=PF.torch_xp)  # (ceil(C/2),)
    quarter_turn = math.pi / (2 * float(inv_freq.min()))
    table = additive_table(pe, int(min(4096, max(16, quarter_turn))) + 1)
    dots = table @ table[0]  # (N,)
    edges = [0, *(2**j for j in range(dots.shape[0].bit_length()))]
    means = [float(dots[lo:hi].mean()) for lo, hi in itertools.pairwise(edges) if hi <= len(dots)]
    rise = largest_rise(means) / means[0]
    miss = max(0.0, means[-1] / means[0] - 0.5)
    detail = "octave means / PE0·PE0: " + " ".join(f"{m / means[0]:.2f}" for m in means)
    return rise + miss, detail
