"""Pictures of what an encoding attaches to each position (seed tutorials 003/004):
heatmap (cropped, annotated, sine and cosine columns apart), cosine similarity, waveforms,
dot product vs distance, embedding contamination (over positions and per dimension).

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

from .._validate import check_positive_float, check_positive_int
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
from ._style import (
    check_index,
    figure_axes,
    heatmap,
    outside_legend,
    shared_scale,
    styled,
    unsupported,
)


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


def feature_roles(pe: PositionalEncoding, width: int) -> list[str]:
    """What each of ``width`` feature columns holds: "sin" or "cos" of its pair's angle, or ""
    (partial rotary's pass-through features). Additive tables hold sin at even columns and cos
    at odd ones (an odd width's last column a sine); rotary features are R_p (1, 0) =
    (cos, sin) in each pair."""
    roles = [""] * width
    first, second = feature_pairs(pe, width)
    sin_first = is_additive(pe)
    for a, b in zip(first, second, strict=True):
        roles[a], roles[b] = ("sin", "cos") if sin_first else ("cos", "sin")
    if sin_first and width % 2:
        roles[-1] = "sin"  # (``PF.sinusoidal_table``: the last column of an odd width)
    return roles


#: Most cells ``annotate`` writes values into (the seed tutorial's table is 11 x 11).
ANNOTATE_MAX_CELLS = 32 * 32


@styled
def encoding_heatmap(
    pe: PositionalEncoding | str,
    *,
    n_positions: int = 128,
    n_dims: int | None = None,
    annotate: bool = False,
    split: bool = False,
    ax: Axes | None = None,
) -> Figure:
    """Heatmap of the position features, positions down, dimensions across.

    ``n_positions`` and ``n_dims`` crop it to the first rows and columns; ``annotate`` writes
    each value (two decimals) in its cell and names each column's sin or cos above it (the seed
    tutorial's 11 x 11 table: ``n_positions=11, n_dims=11, annotate=True``); ``split`` draws
    the sine columns and the cosine columns in two panels on one colour scale (pass-through
    features of partial rotary in neither).

    Raises: ValueError for a crop outside the table, annotating more than
    ``ANNOTATE_MAX_CELLS`` cells, or ``split`` with ``ax`` (it draws two panels).
    """
    pe = resolve(pe)
    data = position_features(pe, n_positions)
    roles = feature_roles(pe, data.shape[1])
    if n_dims is not None:
        check_positive_int(n_dims, "n_dims")
        check_index(n_dims - 1, data.shape[1], "n_dims - 1")
    cols = np.arange(data.shape[1] if n_dims is None else n_dims)
    if annotate and len(data) * len(cols) > ANNOTATE_MAX_CELLS:
        raise ValueError(
            f"annotate writes at most {ANNOTATE_MAX_CELLS} values, got {len(data)} x "
            f"{len(cols)}; crop with n_positions and n_dims"
        )
    title = f"{pe.name}: features per position"
    if split:
        if ax is not None:
            raise ValueError("split draws two panels (sine, cosine columns): pass no ax")
        fig = Figure(figsize=(9.0, 4.0), layout="constrained")
        axes = list(fig.subplots(1, 2))
        groups = [cols[[roles[c] == role for c in cols]] for role in ("sin", "cos")]
        shared_scale(axes, [data[:, g] for g in groups], label="value", aspect="auto")
        for a, g, role in zip(axes, groups, ("sin", "cos"), strict=True):
            a.set(title=f"{role} columns", xlabel="dimension")
            a.set_xticks(range(len(g)), [str(c) for c in g])  # the columns' own indices
        axes[0].set_ylabel("position")
        fig.suptitle(title)
    else:
        fig, ax = figure_axes(ax)
        heatmap(ax, data[:, cols], label="value")
        ax.set(xlabel="dimension", ylabel="position", title=title)
        axes, groups = [ax], [cols]
    if annotate:
        vmax = float(np.abs(data[:, cols]).max()) or 1.0
        for a, g in zip(axes, groups, strict=True):
            _annotate(a, data[:, g], vmax)
            if not split:  # sin/cos above each column (the split panels say it in the title)
                top = a.secondary_xaxis("top")
                top.set_xticks(range(len(g)), [roles[c] for c in g])
                top.tick_params(length=0)
    return fig


def _annotate(ax: Axes, data: np.ndarray, vmax: float) -> None:
    """Each value of ``data`` (rows, cols) written in its cell, white on strong colours."""
    for (r, c), value in np.ndenumerate(data):
        colour = "white" if abs(value) > 0.6 * vmax else "black"
        ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7, color=colour)


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


def _spread_dims(pe: PositionalEncoding, width: int, both: bool = False) -> tuple[int, ...]:
    """Four features from pairs spread over the faster half of the spectrum (the slow half is
    flat over a few hundred positions): first feature of pairs 0, P/6, P/3, P/2 (``both``: and
    the second of each)."""
    first, second = feature_pairs(pe, width)
    pairs = sorted({round(len(first) * f) for f in (0.0, 1 / 6, 1 / 3, 1 / 2)})
    picked = [int(first[i]) for i in pairs] + ([int(second[i]) for i in pairs] if both else [])
    return tuple(sorted(picked))


@styled
def dimension_waveforms(
    pe: PositionalEncoding | str,
    *,
    dims: Sequence[int] | None = None,
    n_positions: int = 128,
    split: bool = False,
    ax: Axes | None = None,
) -> Figure:
    """Selected feature dimensions as functions of the position (default: four pairs from
    fast to slow). ``split``: sine columns and cosine columns in two panels, one above the
    other (default: both features of the four pairs), as in the seed tutorial.

    Raises: ValueError for a dimension outside the features, or ``split`` with ``ax``.
    """
    pe = resolve(pe)
    data = position_features(pe, n_positions)
    dims = _spread_dims(pe, data.shape[1], both=split) if dims is None else dims
    bad = [d for d in dims if not 0 <= d < data.shape[1]]
    if bad:
        raise ValueError(f"dims must lie in 0..{data.shape[1] - 1}, got {bad}")
    if not split:
        fig, ax = figure_axes(ax, (7.0, 3.6))
        panels = [(ax, list(dims), "")]
    elif ax is not None:
        raise ValueError("split draws two panels (sine, cosine columns): pass no ax")
    else:
        roles = feature_roles(pe, data.shape[1])
        fig = Figure(figsize=(7.0, 5.4), layout="constrained")
        axes = fig.subplots(2, 1, sharex=True)
        panels = [
            (a, [d for d in dims if roles[d] == r], r)
            for a, r in zip(axes, ("sin", "cos"), strict=True)
        ]
    for a, chosen, role in panels:
        for d in chosen:
            a.plot(np.arange(len(data)), data[:, d], label=f"dim {d}")
        a.set(
            ylabel="value",
            title=f"{pe.name}: {role + ' columns' if role else 'selected dimensions'}",
        )
        if chosen:
            outside_legend(a)
    panels[-1][0].set_xlabel("position")
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


def _token(width: int, token_scale: float, seed: int) -> np.ndarray:
    """A token embedding e ~ N(0, token_scale² I) of ``width`` features, drawn with ``seed``."""
    check_positive_float(token_scale, "token_scale")
    return token_scale * np.random.default_rng(seed).standard_normal(width)


def contamination_stats(
    pe: PositionalEncoding | str,
    n_positions: int = 128,
    seed: int = 0,
    token_scale: float = 1.0,
) -> dict[str, np.ndarray]:
    """Norms of a token embedding e ~ N(0, token_scale² I), of PE[p], of e + PE[p], and the
    angle (degrees) between e and e + PE[p], for p = 0..N-1 (seed 003, section 10).

    About arctan(|PE[p]| / (token_scale·sqrt(C))) for a C-wide e nearly orthogonal to PE[p]:
    the seed tutorial's setting (token_scale 0.5, C = 128, p = 0, |PE[0]| = 8) gives 54.7° on
    average over draws, 52.1° for seed 0 (the tutorial printed 52.12° for its own draw).

    Raises: ValueError for an encoding that adds nothing to embeddings, n_positions < 1 or a
    token_scale that is not a finite number > 0.
    """
    pe = resolve(pe)
    check_positive_int(n_positions, "n_positions")
    if not is_additive(pe):
        raise unsupported(pe, "adds nothing to token embeddings", "an additive encoding")
    table = additive_table(pe, n_positions).numpy()  # (N, C)
    e = _token(table.shape[1], token_scale, seed)  # (C,)
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
    pe: PositionalEncoding | str,
    *,
    n_positions: int = 128,
    token_scale: float = 1.0,
    seed: int = 0,
    ax: Axes | None = None,
) -> Figure:
    """How much adding PE[p] moves a token embedding e ~ N(0, token_scale² I): norms (left)
    and angle (right axis)."""
    pe = resolve(pe)
    stats = contamination_stats(pe, n_positions, seed, token_scale)
    fig, ax = figure_axes(ax, (7.0, 3.6))
    pos = np.arange(len(stats["angle"]))
    for key in ("token", "position", "combined"):
        ax.plot(pos, stats[key], label=f"||{key}||")
    title = f"{pe.name}: token embedding (scale {token_scale:g}) + PE[p]"
    ax.set(xlabel="position", ylabel="norm", title=title)
    twin = ax.twinx()
    twin.plot(pos, stats["angle"], color="black", linestyle="--", label="angle(e, e + PE)")
    twin.set_ylabel("angle (degrees)")
    twin.grid(False)
    handles, labels = ax.get_legend_handles_labels()
    more, more_labels = twin.get_legend_handles_labels()
    # one legend for both axes, right of the twin's tick labels and axis label
    outside_legend(twin, [*handles, *more], [*labels, *more_labels], beyond_labels=True)
    return fig


@styled
def contamination_dims(
    pe: PositionalEncoding | str,
    *,
    position: int = 0,
    n_dims: int = 20,
    token_scale: float = 1.0,
    seed: int = 0,
    ax: Axes | None = None,
) -> Figure:
    """Per dimension: a token embedding e ~ N(0, token_scale² I), PE[position] and their sum,
    as bars over the first ``n_dims`` features (seed 003, section 10), with the angle between
    e and e + PE in the title (the e of ``contamination`` for the same seed and scale).

    Raises: ValueError as ``contamination_stats``, or for a position or n_dims outside the
    table.
    """
    pe = resolve(pe)
    check_positive_int(position, "position", minimum=0)
    stats = contamination_stats(pe, position + 1, seed, token_scale)
    table = additive_table(pe, position + 1).numpy()  # (position + 1, C)
    if len(table) <= position:
        raise ValueError(f"position must lie in 0..{len(table) - 1} (the table), got {position}")
    check_positive_int(n_dims, "n_dims")
    check_index(n_dims - 1, table.shape[1], "n_dims - 1")
    e = _token(table.shape[1], token_scale, seed)
    bars = {"token e": e, f"PE[{position}]": table[position], "e + PE": e + table[position]}
    fig, ax = figure_axes(ax, (8.0, 3.6))
    x, width = np.arange(n_dims), 0.27
    for i, (label, values) in enumerate(bars.items()):
        ax.bar(x + (i - 1) * width, values[:n_dims], width, label=label)
    angle = float(stats["angle"][position])
    ax.set(
        xlabel="dimension",
        ylabel="value",
        title=f"{pe.name}: e + PE[{position}], angle(e, e + PE) = {angle:.1f}°",
    )
    ax.set_xticks(x)
    outside_legend(ax)
    return fig
