"""One look for every posenc figure, the ``ax``-or-new-figure convention, and shared helpers.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state, no GUI backend), so the
functions run headless and never call ``plt.show()``.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ParamSpec, TypeVar

import matplotlib as mpl
import numpy as np
from cycler import cycler
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.legend import Legend
from matplotlib.ticker import MaxNLocator

from ..encodings.base import PositionalEncoding

P = ParamSpec("P")
R = TypeVar("R")

STYLE: dict[str, Any] = {
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "savefig.bbox": "tight",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "image.cmap": "RdBu_r",
    "axes.prop_cycle": cycler(
        color=["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"]
    ),
    "svg.fonttype": "none",
}
#: Line styles cycled in overlays, so curves that coincide stay visible.
LINESTYLES = ("-", "--", "-.", ":")
#: Colormaps: signed values diverge around 0, magnitudes are sequential.
DIVERGING, SEQUENTIAL = "RdBu_r", "viridis"
#: Colour of masked entries (a causal mask's keys after the query).
MASKED = "#d9d9d9"


def styled(fn: Callable[P, R]) -> Callable[P, R]:
    """Run a plotting function under ``STYLE`` (artists read rcParams when created)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with mpl.rc_context(STYLE):  # type: ignore[arg-type]
            return fn(*args, **kwargs)

    return wrapper


def figure_axes(ax: Axes | None, figsize: tuple[float, float] = (6.0, 4.0)) -> tuple[Figure, Axes]:
    """``ax`` and its figure, or a new figure with one axes."""
    if ax is None:
        fig = Figure(figsize=figsize, layout="constrained")
        return fig, fig.add_subplot()
    return root_figure(ax), ax


def root_figure(ax: Axes) -> Figure:
    """The top-level figure ``ax`` is drawn on."""
    fig = ax.get_figure(root=True)
    if not isinstance(fig, Figure):
        raise TypeError(f"ax must belong to a matplotlib Figure, got {type(fig).__name__}")
    return fig


def peak(data: Any) -> float:
    """The largest |value| of an array, or of a list of arrays (of any shapes), masked entries
    ignored; 0 when nothing is visible."""
    parts = data if isinstance(data, list | tuple) else [data]
    visible = [np.ma.abs(np.ma.asarray(d)).max() for d in parts if np.ma.count(d)]
    return max((float(v) for v in visible), default=0.0)


def _colour_scale(data: Any, signed: bool, kwargs: dict[str, Any]) -> dict[str, Any]:
    """imshow keywords: signed data gets a symmetric diverging scale, the rest sequential."""
    if signed:
        vmax = peak(data) or 1.0
        kwargs = {"vmin": -vmax, "vmax": vmax, **kwargs}
    return {"interpolation": "nearest", "cmap": DIVERGING if signed else SEQUENTIAL, **kwargs}


def heatmap(
    ax: Axes, data: Any, *, label: str, signed: bool = True, **kwargs: Any
) -> mpl.image.AxesImage:
    """imshow with a labelled colorbar; signed data gets a symmetric diverging scale."""
    image = ax.imshow(data, aspect="auto", **_colour_scale(data, signed, kwargs))
    root_figure(ax).colorbar(image, ax=ax, label=label)
    ax.grid(False)
    integer_ticks(ax)
    return image


def integer_ticks(ax: Axes) -> None:
    """Ticks of an image's rows and columns (positions, dimensions) at integers only: 20
    positions get 0, 5, 10, 15, not 0.0, 2.5, ...."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def shared_scale(
    axes: Sequence[Axes], images: Any, *, label: str, signed: bool = True, **kwargs: Any
) -> None:
    """``heatmap`` for several axes: images (N, ...) one per axes, on one colour scale with a
    single colorbar for all ``axes``."""
    style = _colour_scale(images, signed, kwargs)
    for ax, data in zip(axes, images, strict=False):
        image = ax.imshow(data, **style)
        ax.grid(False)
        integer_ticks(ax)
    root_figure(axes[0]).colorbar(image, ax=list(axes), label=label)


def overlay(ax: Axes, curves: Iterable[tuple[str, Any, Any]], **kwargs: Any) -> None:
    """One line per (label, x, y), cycling ``LINESTYLES`` so that coinciding curves stay
    visible."""
    for (label, x, y), style in zip(curves, itertools.cycle(LINESTYLES), strict=False):
        ax.plot(x, y, label=label, linestyle=style, **kwargs)


#: Legend font size (points); ``outside_legend`` fits this many points per row.
LEGEND_FONTSIZE = 8
_ROW_POINTS = 1.75 * LEGEND_FONTSIZE


def outside_legend(
    ax: Axes,
    handles: Sequence[Any] | None = None,
    labels: Sequence[str] | None = None,
    *,
    beyond_labels: bool = False,
) -> Legend:
    """The legend of ``ax`` (or of ``handles``/``labels``) to the right of it, outside the data:
    its top at the axes' top, in as many columns as it takes to stay within the figure's height.
    The figures' constrained layout (or ``bbox_inches="tight"``) makes room for it.

    ``beyond_labels``: ``ax`` has tick labels and an axis label on its right (a twin axes), so
    the legend goes right of those: a figure legend outside on the right under a constrained
    layout, else anchored a fifth of the axes' width out (room for short tick labels).
    """
    if handles is None or labels is None:
        handles, labels = ax.get_legend_handles_labels()
    fig = root_figure(ax)
    rows = max(1, int(0.8 * fig.get_figheight() * 72 / _ROW_POINTS))
    style = {"fontsize": LEGEND_FONTSIZE, "ncols": max(1, math.ceil(len(labels) / rows))}
    if beyond_labels and isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        return fig.legend(handles, labels, loc="outside right upper", **style)
    return ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.2 if beyond_labels else 1.02, 1.0),
        borderaxespad=0.0,
        **style,
    )


def check_index(value: int, n: int, name: str) -> None:
    """Raises: ValueError unless 0 <= value < n."""
    if not 0 <= value < n:
        raise ValueError(f"{name} must lie in 0..{n - 1}, got {value}")


def unsupported(pe: PositionalEncoding, problem: str, expected: str) -> ValueError:
    """The error for a figure that cannot be drawn for ``pe``."""
    return ValueError(f"encoding {pe.name!r} (family {pe.family!r}) {problem}; expected {expected}")
