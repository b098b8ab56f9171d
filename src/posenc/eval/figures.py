"""Figures of the evaluations: loss by position (one curve per length) and the passkey grid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._files import atomic_open, atomic_write
from ..plots._style import figure_axes, heatmap, outside_legend, overlay, styled
from .passkey import PasskeyResult
from .perplexity import PerplexityResult


@styled
def perplexity_figure(result: PerplexityResult, *, ax: Axes | None = None) -> Figure:
    """Mean next-token loss against the position in the window (bucket middles), one curve
    per window length, each labelled with its perplexity."""
    fig, ax = figure_axes(ax, (6.4, 4.0))
    curves = []
    for r in result.lengths:
        kept = [b for b in r.buckets if b.count]
        middle = np.array([(b.start + b.end - 1) / 2 for b in kept])
        curves.append((f"L = {r.length} (ppl {r.ppl:.3g})", middle, [b.loss for b in kept]))
    overlay(ax, curves, marker="o", markersize=3)
    ax.set(
        xlabel="position in the window",
        ylabel="mean next-token loss (nats)",
        title=f"{result.model}: loss by position",
    )
    outside_legend(ax)
    return fig


@styled
def passkey_figure(result: PasskeyResult, *, ax: Axes | None = None) -> Figure:
    """Accuracy of each (depth, length) cell as a heatmap, values written in the cells."""
    fig, ax = figure_axes(ax, (1.2 + 0.9 * len(result.lengths), 1.2 + 0.6 * len(result.depths)))
    acc = np.array(result.accuracy)  # (depths, lengths)
    heatmap(ax, acc, label="accuracy", signed=False, vmin=0.0, vmax=1.0)
    for (i, j), value in np.ndenumerate(acc):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="w" if value < 0.6 else "k")
    ax.set_xticks(range(len(result.lengths)), [str(n) for n in result.lengths])
    ax.set_yticks(range(len(result.depths)), [f"{d:g}" for d in result.depths])
    ax.set(xlabel="prompt length (tokens)", ylabel="needle depth", title=f"{result.model}: passkey")
    return fig


def save(result: PerplexityResult | PasskeyResult, out: str | Path) -> tuple[Path, Path]:
    """Write ``out/ppl.json`` + ``ppl.png`` or ``out/passkey.json`` + ``passkey.png``;
    returns the two paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(result, PerplexityResult):
        stem, fig = "ppl", perplexity_figure(result)
    else:
        stem, fig = "passkey", passkey_figure(result)
    data, image = out / f"{stem}.json", out / f"{stem}.png"
    atomic_write(data, json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n")
    with atomic_open(image, "wb") as f:
        fig.savefig(f, format="png")
    return data, image
