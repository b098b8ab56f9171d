"""Pictures of frequencies and rotations (Su et al. 2021, arXiv:2104.09864; seed 003):
wavelength per pair, the M_k block structure, one pair's rotation, q·k vs distance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import functional as PF
from .._validate import check_positive_int
from ..analysis.subjects import evaluating, head_shape, is_rotary, resolve
from ..analysis.table_checks import sinusoid_like
from ..encodings.base import PositionalEncoding
from ._style import (
    SEQUENTIAL,
    check_index,
    figure_axes,
    heatmap,
    outside_legend,
    overlay,
    styled,
    unsupported,
)
from .tables import feature_pairs, position_features


def inv_freq_of(pe: PositionalEncoding | str) -> np.ndarray:
    """θ_i of an encoding with frequencies: its ``inv_freq`` buffer, or base^(-2i/dim) for
    every even column 2i < dim of a table (an odd width's last, sine-only column included:
    ceil(dim/2) frequencies, ``PF.inv_freq_series``).

    Raises: ValueError for encodings without frequencies (learned tables, biases).
    """
    pe = resolve(pe)
    inv_freq = getattr(pe, "inv_freq", None)
    if isinstance(inv_freq, torch.Tensor):
        return inv_freq.double().cpu().numpy()
    table_pe: Any = pe
    if hasattr(table_pe, "base") and hasattr(table_pe, "dim"):
        return np.asarray(PF.inv_freq_series(table_pe.dim, base=table_pe.base))
    raise unsupported(pe, "has no frequencies", "an inv_freq buffer or base and dim")


@styled
def wavelengths(
    encodings: Sequence[PositionalEncoding | str],
    *,
    train_len: int | None = 2048,
    ax: Axes | None = None,
) -> Figure:
    """Wavelength 2π/θ_i of each dimension pair (log scale), with the training length marked:
    pairs above the line never complete a turn within it. Pairs that do not turn at all
    (θ_i = 0, p-RoPE) have no finite wavelength: the legend counts them."""
    fig, ax = figure_axes(ax, (6.0, 3.8))
    series = []
    for pe in map(resolve, encodings):
        lam = np.asarray(PF.wavelengths(inv_freq_of(pe)))  # (P,), inf where θ_i = 0
        turning = np.isfinite(lam)
        still = int((~turning).sum())
        label = pe.name if not still else f"{pe.name} ({still} of {len(lam)} pairs not rotated)"
        series.append((label, np.arange(len(lam))[turning], lam[turning]))
    overlay(ax, series, marker="o", markersize=3)
    if train_len is not None:
        ax.axhline(train_len, color="gray", linestyle=":", label=f"train length {train_len}")
    ax.set_yscale("log")
    ax.set(
        xlabel="pair index i",
        ylabel="wavelength 2π/θ_i (positions)",
        title="Wavelength per dimension pair",
    )
    outside_legend(ax)
    return fig


@styled
def shift_matrix_blocks(
    pe: PositionalEncoding | str, *, k: int = 5, n_dims: int = 16, ax: Axes | None = None
) -> Figure:
    """M_k, the block-diagonal rotation with PE[p + k] = M_k PE[p] (first n_dims dimensions;
    ``PF.shift_matrix``). An odd width's last column, a sine alone, has no shift map: M_k
    spans the dim - 1 paired columns (n_dims is capped there).

    Raises: ValueError for an encoding other than a fixed sinusoidal table (Vaswani's (sin, cos)
    pairs), or n_dims < 1.
    """
    pe = resolve(pe)
    check_positive_int(n_dims, "n_dims")
    if not sinusoid_like(pe):
        raise unsupported(
            pe,
            "has no sinusoidal table PE[p] shifted by M_k",
            "a fixed additive table with base and dim (sinusoidal)",
        )
    table_pe: Any = pe
    M = PF.shift_matrix(k, table_pe.dim, base=table_pe.base)[:n_dims, :n_dims]  # (2P, 2P) crop
    fig, ax = figure_axes(ax, (5.0, 4.2))
    heatmap(ax, M, label="entry of M_k")
    ax.set(
        xlabel="input dimension",
        ylabel="output dimension",
        title=f"{pe.name}: M_{k} is block-diagonal (2x2 rotations)",
    )
    return fig


@styled
def rotation_pair(
    pe: PositionalEncoding | str,
    *,
    pair: int | None = None,
    n_positions: int = 32,
    ax: Axes | None = None,
) -> Figure:
    """Where one pair of the unit vector lands at positions 0..N-1: points on a circle
    (default: the pair turning about 3/4 of a circle over the N positions)."""
    pe = resolve(pe)
    data = position_features(pe, n_positions)  # (N, D)
    first, second = feature_pairs(pe, data.shape[1])  # rotated pairs: rotary_dim/2 when partial
    pair = _readable_pair(pe, n_positions, len(first)) if pair is None else pair
    check_index(pair, len(first), "pair")
    a, b = data[:, first[pair]], data[:, second[pair]]
    fig, ax = figure_axes(ax, (4.6, 4.2))
    ax.plot(a, b, color="lightgray", zorder=1)
    points = ax.scatter(a, b, c=np.arange(n_positions), cmap=SEQUENTIAL, zorder=2)
    fig.colorbar(points, ax=ax, label="position")
    r = 1.1 * float(np.hypot(a, b).max())
    ax.set(xlim=(-r, r), ylim=(-r, r))
    ax.set_aspect("equal")
    ax.set(
        xlabel="first feature of the pair",
        ylabel="second feature of the pair",
        title=f"{pe.name}: pair {pair} across positions",
    )
    return fig


def _readable_pair(pe: PositionalEncoding, n_positions: int, n_pairs: int) -> int:
    """The pair whose angle grows closest to 1.5π over the positions (pair 0 if unknown)."""
    try:
        inv_freq = inv_freq_of(pe)[:n_pairs]
    except ValueError:
        return 0
    return int(np.argmin(np.abs(inv_freq * (n_positions - 1) - 1.5 * np.pi)))


def qk_by_distance(pe: PositionalEncoding | str, n_distances: int = 256) -> np.ndarray:
    """<R_d q, R_0 k> for q = k = all-ones and a key d = 0..N-1 positions in the past (the
    long-range decay of Su et al., sec. 3.4.3; xPos decays further): (N,).

    Raises: ValueError for an encoding that does not rotate q and k, or n_distances < 1.
    """
    pe = resolve(pe)
    check_positive_int(n_distances, "n_distances")
    if not is_rotary(pe):
        raise unsupported(pe, "does not rotate q and k", "a rotary encoding")
    H, D = head_shape(pe)
    ones = torch.ones(1, H, n_distances, D, dtype=torch.float64)  # (B, H, T, D)
    with torch.no_grad(), evaluating(pe):
        q, k = pe.rotate(
            ones, ones, torch.arange(n_distances), torch.zeros(n_distances, dtype=torch.long)
        )
    return (q * k).sum(-1)[0, 0].numpy()


@styled
def qk_vs_distance(
    encodings: Sequence[PositionalEncoding | str],
    *,
    n_distances: int = 256,
    ax: Axes | None = None,
) -> Figure:
    """Score <R_m q, R_n k> of all-ones q and k against the distance m - n to a past key."""
    fig, ax = figure_axes(ax, (6.0, 3.6))
    d = np.arange(n_distances)
    overlay(ax, [(pe.name, d, qk_by_distance(pe, n_distances)) for pe in map(resolve, encodings)])
    ax.set(
        xlabel="distance m - n (key in the past)",
        ylabel="<R_m q, R_n k>",
        title="Rotary score vs distance (q = k = 1)",
    )
    outside_legend(ax)
    return fig
