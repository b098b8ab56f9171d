"""Pictures of what an encoding attaches to each position (seed tutorials 003/004):
heatmap, cosine similarity, waveforms, dot product vs distance, embedding contamination.

Additive encodings show their table PE[p]; rotary ones show R_p u, a unit vector u = (1, 0)
in every rotated pair (0 in the features partial rotary passes through) turned to position p,
i.e. (cos pθ_i, sin pθ_i) in the encoding's layout. Encodings are probed in eval mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._validate import check_positive_int
from ..analysis.subjects import (
    evaluating,
    geometry_attr,
    head_shape,
    is_additive,
    is_rotary,
    resolve,
)
from ..analysis.table_checks import additive_table
from ..encodings.base import PositionalEncoding
from ._style import figure_axes, heatmap, outside_legend, styled, unsupported


def position_features(pe: PositionalEncoding | str, n_positions: int = 128) -> np.ndarray:
    """What the encoding attaches to positions 0..N-1: (N, C) table or (N, D) rotated unit.

    Raises: ValueError for encodings that neither add nor rotate (bias, relative, none), or
    n_positions < 1.
    """
    pe = resolve(pe)
    check_positive_int(n_positions, "n_positions")
    if is_additive(pe):
        return additive_table(pe, n_positions).numpy()
    if not is_rotary(pe):
        raise unsupported(
            pe,
            "attaches nothing to a position by itself",
            "an additive or rotary encoding (see bias_heatmaps for score biases)",
        )
    H, D = head_shape(pe)
    unit = torch.zeros(D, dtype=torch.float64)  # (D,) (1, 0) in each rotated pair
    unit[feature_pairs(pe, D)[0]] = 1.0
    x = unit.expand(1, H, n_positions, D)  # (B, H, T, D)
    pos = torch.arange(n_positions)
    with torch.no_grad(), evaluating(pe):
        rotated, _ = pe.rotate(x, x, pos, pos)
    return rotated[0, 0].numpy()


def feature_pairs(pe: PositionalEncoding, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (P,) of the first and second feature of each pair among ``width`` features:
    (2i, 2i + 1) when interleaved (and in additive tables), else (i, i + P); P = rotary_dim/2
    for partial rotary (the features past 2P pass through), else width/2."""
    if is_additive(pe):
        P, interleaved = width // 2, True
    else:
        P = int(geometry_attr(pe, "rotary_dim", width)) // 2
        interleaved = geometry_attr(pe, "layout", "half") == "interleaved"
    i = np.arange(P)
    return (2 * i, 2 * i + 1) if interleaved else (i, i + P)


@styled
def encoding_heatmap(
    pe: PositionalEncoding | str, *, n_positions: int = 128, ax: Axes | None = None
) -> Figure:
    """Heatmap of the position features, positions down, dimensions across."""
    pe = resolve(pe)
    data = position_features(pe, n_positions)
    fig, ax = figure_axes(ax)
    heatmap(ax, data, label="value")
    ax.set(xlabel="dimension", ylabel="position", title=f"{pe.name}: features per position")
    return fig


def cosine_similarity(features: np.ndarray) -> np.ndarray:
    """(N, F) -> (N, N) cosine similarity between rows."""
    unit = features / np.linalg.norm(features, axis=-1, keepdims=True)
    return unit @ unit.T


@styled
def similarity_matrix(
    pe: PositionalEncoding | str, *, n_positions: int = 64, ax: Axes | None = None
) -> Figure:
    """Cosine similarity between the features of every pair of positions."""
    pe = resolve(pe)
    sim = cosine_similarity(position_features(pe, n_positions))
    fig, ax = figure_axes(ax, (5.0, 4.2))
    heatmap(ax, sim, label="cosine similarity", vmin=-1.0, vmax=1.0)
    ax.set(xlabel="position", ylabel="position", title=f"{pe.name}: cosine similarity")
    return fig


def _spread_dims(pe: PositionalEncoding, width: int) -> tuple[int, ...]:
    """Four features from pairs spread over the faster half of the spectrum (the slow half is
    flat over a few hundred positions): first feature of pairs 0, P/6, P/3, P/2."""
    first, _ = feature_pairs(pe, width)
    pairs = sorted({round(len(first) * f) for f in (0.0, 1 / 6, 1 / 3, 1 / 2)})
    return tuple(int(first[i]) for i in pairs)


@styled
def dimension_waveforms(
    pe: PositionalEncoding | str,
    *,
    dims: Sequence[int] | None = None,
    n_positions: int = 128,
    ax: Axes | None = None,
) -> Figure:
    """Selected feature dimensions as functions of the position (default: four pairs from
    fast to slow)."""
    pe = resolve(pe)
    data = position_features(pe, n_positions)
    dims = _spread_dims(pe, data.shape[1]) if dims is None else dims
    bad = [d for d in dims if not 0 <= d < data.shape[1]]
    if bad:
        raise ValueError(f"dims must lie in 0..{data.shape[1] - 1}, got {bad}")
    fig, ax = figure_axes(ax, (7.0, 3.6))
    for d in dims:
        ax.plot(np.arange(len(data)), data[:, d], label=f"dim {d}")
    ax.set(xlabel="position", ylabel="value", title=f"{pe.name}: selected dimensions")
    outside_legend(ax)
    return fig


@styled
def dot_vs_distance(
    pe: PositionalEncoding | str, *, n_positions: int = 512, ax: Axes | None = None
) -> Figure:
    """Dot product of the features at position 0 and at distance d, against d."""
    pe = resolve(pe)
    data = position_features(pe, n_positions)
    fig, ax = figure_axes(ax, (6.0, 3.6))
    ax.plot(np.arange(len(data)), data @ data[0])
    ax.set(xlabel="distance d", ylabel="PE[0] · PE[d]", title=f"{pe.name}: dot product vs distance")
    return fig


def contamination_stats(
    pe: PositionalEncoding | str, n_positions: int = 128, seed: int = 0
) -> dict[str, np.ndarray]:
    """Norms of a token embedding e ~ N(0, 1), of PE[p], of e + PE[p], and the angle
    (degrees) between e and e + PE[p], for p = 0..N-1 (seed 003, section 10).

    Raises: ValueError for an encoding that adds nothing to embeddings, or n_positions < 1.
    """
    pe = resolve(pe)
    check_positive_int(n_positions, "n_positions")
    if not is_additive(pe):
        raise unsupported(pe, "adds nothing to token embeddings", "an additive encoding")
    table = additive_table(pe, n_positions).numpy()  # (N, C)
    e = np.random.default_rng(seed).standard_normal(table.shape[1])  # (C,)
    mixed = e + table
    cos = mixed @ e / (np.linalg.norm(mixed, axis=-1) * np.linalg.norm(e))
    return {
        "token": np.full(len(table), np.linalg.norm(e)),
        "position": np.linalg.norm(table, axis=-1),
        "combined": np.linalg.norm(mixed, axis=-1),
        "angle": np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))),
    }


@styled
def contamination(
    pe: PositionalEncoding | str, *, n_positions: int = 128, ax: Axes | None = None
) -> Figure:
    """How much adding PE[p] moves a token embedding: norms (left) and angle (right axis)."""
    pe = resolve(pe)
    stats = contamination_stats(pe, n_positions)
    fig, ax = figure_axes(ax, (7.0, 3.6))
    pos = np.arange(len(stats["angle"]))
    for key in ("token", "position", "combined"):
        ax.plot(pos, stats[key], label=f"||{key}||")
    ax.set(xlabel="position", ylabel="norm", title=f"{pe.name}: token embedding + PE[p]")
    twin = ax.twinx()
    twin.plot(pos, stats["angle"], color="black", linestyle="--", label="angle(e, e + PE)")
    twin.set_ylabel("angle (degrees)")
    twin.grid(False)
    handles, labels = ax.get_legend_handles_labels()
    more, more_labels = twin.get_legend_handles_labels()
    # one legend for both axes, right of the twin's tick labels and axis label
    outside_legend(twin, [*handles, *more], [*labels, *more_labels], beyond_labels=True)
    return fig
