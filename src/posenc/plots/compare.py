"""Several encodings, several kinds of figure, in one figure on shared scales (seed 001's
sinusoidal-vs-learned heatmaps, seed 004's heatmap / similarity / waveforms panels;
``posenc plot KIND[,KIND...] NAME... --compare``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..analysis.subjects import resolve
from ..encodings.base import PositionalEncoding
from ._style import DIVERGING, styled
from .kinds import PLOTS, PlotKind


def compare_kinds(kinds: Sequence[str]) -> list[PlotKind]:
    """The per-encoding plot kinds named, checked: each draws one encoding into a given ``ax``.

    Raises: ValueError for no kind, an unknown one, or one that overlays several encodings,
    draws none, or takes no ``ax``.
    """
    if not kinds:
        raise ValueError("compare needs at least one plot kind, got none")
    chosen = []
    for name in kinds:
        if name not in PLOTS:
            raise ValueError(f"unknown plot kind {name!r}; choose one of {sorted(PLOTS)}")
        kind = PLOTS[name]
        if kind.applies is None or kind.multi or "ax" not in kind.parameters:
            raise ValueError(
                f"plot {name!r} cannot be a panel (it draws no single encoding into an ax); "
                f"compare takes {sorted(comparable())}"
            )
        chosen.append(kind)
    return chosen


def comparable() -> list[str]:
    """The plot kinds ``compare`` can put in a panel."""
    return [
        n
        for n, k in PLOTS.items()
        if k.applies is not None and not k.multi and "ax" in k.parameters
    ]


@styled
def compare(
    encodings: Sequence[PositionalEncoding | str],
    kinds: Sequence[str] = ("heatmap",),
    **options: Any,
) -> Figure:
    """One figure: a row per kind, a column per encoding (one encoding: the kinds side by side),
    each kind's panels on one scale: images share their colour range (symmetric about 0 for
    signed values), curves their y range. ``options`` go to every kind whose figure takes them
    (``n_positions=20, n_dims=20``: seed 001's crops).

    Raises: ValueError for no encoding, a kind ``compare_kinds`` refuses or that does not apply
    to an encoding, or an option no kind takes.
    """
    pes = [resolve(e) for e in encodings]
    if not pes:
        raise ValueError("compare needs at least one encoding, got none")
    chosen = compare_kinds(kinds)
    taken = {o for k in chosen for o in k.options}
    unknown = sorted(set(options) - taken)
    if unknown:
        raise ValueError(f"no plot among {list(kinds)} takes {unknown}; options: {sorted(taken)}")
    for kind in chosen:
        skipped = [pe.name for pe in pes if kind.applies is not None and not kind.applies(pe)]
        if skipped:
            raise ValueError(f"plot {kind.name!r} does not apply to {skipped}")
    across = len(pes) == 1  # one encoding: its kinds in one row
    rows, cols = (1, len(chosen)) if across else (len(chosen), len(pes))
    fig = Figure(figsize=(4.6 * cols, 3.8 * rows), layout="constrained")
    grid = fig.subplots(rows, cols, squeeze=False)
    for r, kind in enumerate(chosen):
        kw = {k: v for k, v in options.items() if k in kind.options}
        panels = [grid[0, r]] if across else list(grid[r])
        for ax, pe in zip(panels, pes, strict=False):
            kind.draw(pe, ax=ax, **kw)
        share_scales(panels)
    names = ", ".join(pe.name for pe in pes)
    fig.suptitle(f"{' / '.join(k.name for k in chosen)}: {names}")
    return fig


def share_scales(axes: Sequence[Axes]) -> None:
    """One colour range over the first image of each of ``axes`` (symmetric about 0 for a
    diverging colormap; each panel's colorbar follows its image), one y range over their
    curves (panels without images)."""
    images = [ax.images[0] for ax in axes if ax.images]
    if images:
        limits = [im.get_clim() for im in images]  # (vmin, vmax) each
        lo = min(float(a) for a, _ in limits if a is not None)
        hi = max(float(b) for _, b in limits if b is not None)
        if all(im.get_cmap().name == DIVERGING for im in images):
            hi = max(abs(lo), abs(hi))
            lo = -hi
        for im in images:
            im.set_clim(lo, hi)
    curves = [ax for ax in axes if not ax.images and ax.lines]
    if len(curves) > 1:
        lo = min(ax.get_ylim()[0] for ax in curves)
        hi = max(ax.get_ylim()[1] for ax in curves)
        for ax in curves:
            ax.set_ylim(lo, hi)
