"""The lab report's figures: a task config's metric against evaluation length with bootstrap
interval bands, and a trained model's attention maps.

Both are full page width, with legends and colour bars outside the data and axes named by what
they show (the metric's own name, key and query positions).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator, NullLocator

from ..plots._style import outside_legend, styled
from .results import Panel

#: One colour per encoding (tab10 without its grey, which marks "did not learn").
COLOURS: tuple[str, ...] = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
COLOURS += ("#e377c2", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
METRIC_NAMES = {"exact_match": "exact match", "loss": "loss (nats per token)"}


@styled
def curve_figure(panel: Panel, encodings: Sequence[str]) -> Figure:
    """``panel``'s metric against evaluation length: per encoding the mean over its learned
    seeds, a band over the bootstrap 95% interval; the longest training length dashed, chance
    dotted. Encodings with no learned run are named in the legend, greyed, not drawn."""
    fig = Figure(figsize=(11.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    handles, labels = [], []
    for i, enc in enumerate(encodings):
        cells = {n: panel.cell(enc, n) for n in panel.lengths}
        pts = [(n, c.interval) for n, c in cells.items() if c.interval is not None]
        total = max(c.n_total for c in cells.values())
        learned = min(c.n_learned for c in cells.values())
        if not pts:
            handles.append(Line2D([], [], color="#b0b4bb", linestyle=":"))
            labels.append(f"{enc}: did not learn ({total} of {total} runs)")
            continue
        x = [n for n, _ in pts]
        colour, marker = COLOURS[i % len(COLOURS)], MARKERS[i % len(MARKERS)]
        (line,) = ax.plot(x, [iv.mean for _, iv in pts], color=colour, marker=marker)
        ax.fill_between(
            x,
            [iv.lo for _, iv in pts],
            [iv.hi for _, iv in pts],
            color=colour,
            alpha=0.15,
            linewidth=0,
        )
        handles.append(line)
        labels.append(enc if learned == total else f"{enc} ({learned} of {total} learned)")
    if not ax.lines:  # every encoding failed the gate
        ax.text(
            0.5, 0.5, "no run passed the gate", transform=ax.transAxes, ha="center", color="0.4"
        )
    handles.append(ax.axvline(panel.train_max, color="0.35", linestyle="--", linewidth=1))
    labels.append(f"longest training length ({panel.train_max})")
    if panel.chance is not None:
        handles.append(ax.axhline(panel.chance, color="0.35", linestyle=":", linewidth=1))
        guess = "uniform guess" if panel.metric == "loss" else "chance"
        labels.append(f"{guess} ({panel.chance:.2f})")
    xlabel = "position (end of bucket)" if panel.metric == "loss" else "evaluation length"
    ax.set(xlabel=xlabel, ylabel=METRIC_NAMES.get(panel.metric, panel.metric), title=panel.label)
    ax.set_xscale("log", base=2)  # 1x, 2x, 4x evenly spaced
    ax.set_xticks(panel.lengths, [str(n) for n in panel.lengths])
    ax.xaxis.set_minor_locator(NullLocator())
    if panel.metric != "loss":
        ax.set_ylim(-0.03, 1.03)
    outside_legend(ax, handles, labels)
    return fig


@styled
def attention_figure(
    maps: Sequence[Sequence[np.ndarray]], lengths: Sequence[int], title: str
) -> Figure:
    """Attention weights (T, T) per layer (rows) and evaluation length (columns), one colour
    scale with its colour bar; ticks are integer token positions."""
    n_layers = len(maps[0])
    fig = Figure(figsize=(11.0, 3.6 * n_layers + 0.6), layout="constrained")
    axes = fig.subplots(n_layers, len(lengths), squeeze=False)
    vmax = max(float(w.max()) for per_len in maps for w in per_len)
    for col, (n, per_len) in enumerate(zip(lengths, maps, strict=True)):
        for layer, weights in enumerate(per_len):
            ax = axes[layer][col]
            image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
            ax.set(
                title=f"layer {layer}, length {n}: {weights.shape[-1]} tokens",
                xlabel="key position",
                ylabel="query position",
            )
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(False)
    fig.colorbar(image, ax=axes, label="attention weight (mean over heads)", shrink=0.9)
    fig.suptitle(title)
    return fig
