"""The lab report's figures: a task config's metric against evaluation length with bootstrap
interval bands, and a trained model's attention maps.

Both are full page width, with legends and colour bars outside the data and axes named by what
they show (the metric's own name, key and query positions).

The extend suite's figures (``loss_by_position``, ``streaming``, ``passkey_grids``):

Figures of the extension lab: loss by position per method (training-free and fine-tuned
side by side, one row per length), the streaming curves, and the passkey grids.

Every curve is the mean over seeds with its 95% bootstrap band; the dashed vertical line is
the training context L.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator, NullLocator

from ..plots._style import LINESTYLES, outside_legend, styled
from .config import ExtendConfig
from .results import ExtendKey, ExtendResults, Panel
from .stats import bootstrap_interval

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


# --- the extend suite's figures ------------------------------------------------------------------

#: Display names of the methods and comparison models.
EXTEND_LABELS = {
    "none": "no change",
    "linear": "PI (linear)",
    "ntk": "NTK",
    "dynamic": "dynamic NTK",
    "yarn": "YaRN",
    "llama3": "Llama 3",
    "longrope": "LongRoPE",
    "alibi": "ALiBi",
    "nope": "NoPE",
    "fire": "FIRE",
    "window": "window attention",
    "sinks": "window + sinks",
}
#: The comparison encodings' colours, apart from the methods' cycle.
BASELINE_COLOURS = {"alibi": "black", "nope": "0.55", "fire": "#bcbd22"}
#: Curves more than this many nats above the model's loss at L are cut at the top of the axes.
HEADROOM = 2.5


def _extend_curve(
    ax: Axes,
    results: ExtendResults,
    key: ExtendKey,
    label: str,
    style: str,
    colour: str | None = None,
) -> None:
    """Plot the bucket curve of ``key`` (mean over seeds, band = interval), if measured."""
    buckets = results.buckets(key)
    if not buckets:
        return
    x = np.array([(a + b - 1) / 2 for a, b in buckets])
    stats = [bootstrap_interval(list(v.values())) for v in buckets.values()]
    mean = np.array([s.mean for s in stats])
    (line,) = ax.plot(x, mean, linestyle=style, label=label, linewidth=1.3, color=colour)
    ax.fill_between(
        x, [s.lo for s in stats], [s.hi for s in stats], color=line.get_color(), alpha=0.15
    )


@styled
def loss_by_position(results: ExtendResults, cfg: ExtendConfig) -> Figure:
    """One row per factor s: loss against position in windows of s·L, training-free (left,
    with the comparison encodings) and fine-tuned at s·L (right)."""
    L, rows = cfg.context, sorted(cfg.factors)
    fig = Figure(figsize=(11.0, 3.0 * len(rows) + 0.4), layout="constrained")
    axes = fig.subplots(len(rows), 2, squeeze=False, sharey="row")
    base = results.loss(("rope", "none", "free", 1, L))
    top = float(np.mean(list(base.values()))) + HEADROOM if base else None
    for i, s in enumerate(rows):
        for j, variant in enumerate(("free", "tuned")):
            ax = axes[i][j]
            for k, m in enumerate(cfg.methods):
                style = LINESTYLES[k % len(LINESTYLES)]
                _extend_curve(ax, results, ("rope", m, variant, s, s * L), EXTEND_LABELS[m], style)
            if variant == "free":
                for enc in cfg.baselines:
                    key = (enc, "none", "free", s, s * L)
                    _extend_curve(
                        ax, results, key, EXTEND_LABELS[enc], ":", BASELINE_COLOURS.get(enc)
                    )
            ax.axvline(L, color="0.4", linestyle="--", linewidth=0.8)
            what = "training-free" if variant == "free" else f"fine-tuned at {s * L}"
            ax.set(
                title=f"{s}x L = {s * L} tokens, {what}",
                xlabel="position in the window",
                ylabel="loss (nats)" if j == 0 else "",
            )
            if top is not None:
                ax.set_ylim(top=top)
    outside_legend(axes[0][1], *axes[0][0].get_legend_handles_labels())  # (free has all)
    return fig


@styled
def streaming(results: ExtendResults, cfg: ExtendConfig) -> Figure:
    """Loss by stream position: window attention, window + sinks, and the full context."""
    n, smax = cfg.max_len, max(cfg.factors)
    fig = Figure(figsize=(8.0, 3.6), layout="constrained")
    ax = fig.add_subplot()
    _extend_curve(ax, results, ("rope", "none", "free", smax, n), "full context (no change)", ":")
    for m, style in (("window", "-"), ("sinks", "--")):
        _extend_curve(ax, results, ("rope", m, "free", smax, n), EXTEND_LABELS[m], style)
    ax.axvline(cfg.window, color="0.4", linestyle="--", linewidth=0.8)
    ax.axvline(cfg.context, color="0.7", linestyle=":", linewidth=0.8)
    base = results.loss(("rope", "none", "free", 1, cfg.context))
    if base:
        ax.set_ylim(top=float(np.mean(list(base.values()))) + HEADROOM)
    ax.set(
        title=f"RoPE streamed through a cache of {cfg.window} keys ({cfg.sinks} sinks or none)",
        xlabel="position in the stream (dashed: eviction starts; dotted: L)",
        ylabel="loss (nats)",
    )
    outside_legend(ax)
    return fig


def _grid(
    results: ExtendResults, cfg: ExtendConfig, encoding: str, method: str, variant: str
) -> tuple[np.ndarray, list[int]]:
    """Accuracy (depths, lengths 1x..s_max·x) mean over seeds; NaN where not measured. The
    1x column is the unchanged model (no scaling applies at L), also for ``tuned``."""
    L = cfg.context
    factors = [1, *sorted(cfg.factors)]
    grid = np.full((len(cfg.depths), len(factors)), np.nan)
    for j, s in enumerate(factors):
        m, v = (method, variant) if s > 1 else ("none", "free")
        by_depth = results.passkey_grid((encoding, m, v, s, s * L))
        for i, d in enumerate(cfg.depths):
            seeds = by_depth.get(float(d), {})
            if seeds:
                grid[i, j] = float(np.mean(list(seeds.values())))
    return grid, factors


@styled
def passkey_grids(results: ExtendResults, cfg: ExtendConfig) -> Figure:
    """Passkey accuracy by needle depth and context, one panel per method and variant
    (RoPE methods training-free and fine-tuned; the comparison encodings unchanged)."""
    panels = [("rope", m, "free") for m in cfg.methods]
    panels += [("rope", m, "tuned") for m in cfg.methods]
    panels += [(enc, "none", "free") for enc in cfg.baselines]
    cols = len(cfg.methods)
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(1.9 * cols + 1.0, 2.1 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    for ax, (enc, m, v) in zip(axes.flat, panels, strict=False):
        grid, factors = _grid(results, cfg, enc, m, v)
        image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        for (i, j), value in np.ndenumerate(grid):
            if np.isfinite(value):
                colour = "w" if value < 0.6 else "k"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color=colour)
        ax.set_xticks(range(len(factors)), [f"{s}x" for s in factors], fontsize=8)
        ax.set_yticks(range(len(cfg.depths)), [f"{d:g}" for d in cfg.depths], fontsize=8)
        ax.grid(False)
        name = EXTEND_LABELS[m] if enc == "rope" else EXTEND_LABELS[enc]
        ax.set_title(f"{name}, {'fine-tuned' if v == 'tuned' else 'training-free'}", fontsize=9)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("needle depth")
    if image is not None:
        fig.colorbar(image, ax=list(axes.flat), label="passkey accuracy", shrink=0.6)
    return fig
