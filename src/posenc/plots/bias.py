"""Pictures of score biases: the (Tq, Tk) bias of each head (ALiBi, T5, Kerple, FIRE), with
the causal mask where the encoding is used causally."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._validate import check_bool, check_positive_int
from ..analysis.subjects import evaluating, has_bias, resolve
from ..encodings.base import PositionalEncoding
from ._style import DIVERGING, MASKED, root_figure, shared_scale, styled, unsupported


def bias_matrix(
    pe: PositionalEncoding | str, n_positions: int = 32, *, masked: float | None = None
) -> np.ndarray:
    """The bias (H, T, T) the encoding adds to logits at positions 0..T-1 (all pairs, no mask).

    ``masked``: the value written on keys after the query (j > i), which causal attention never
    sees; None (default) keeps the formula's value there (causal ALiBi's -m·(i - j) > 0).
    ``masked=0.0`` gives the tutorials' matrix, e.g. ALiBi's -m·max(i - j, 0).

    Raises: ValueError for encodings without a bias hook; TypeError for a ``masked`` that is
    not a number.
    """
    pe = resolve(pe)
    check_positive_int(n_positions, "n_positions")
    if masked is not None and (isinstance(masked, bool) or not isinstance(masked, int | float)):
        raise TypeError(f"masked must be a number or None, got {type(masked).__name__}")
    pos = torch.arange(n_positions)
    with torch.no_grad(), evaluating(pe):
        bias = pe.bias(pos, pos) if has_bias(pe) else None
    if bias is None:
        raise unsupported(pe, "adds no score bias", "one with a bias hook")
    out = bias[0].double().numpy()  # (H, T, T)
    if masked is not None:
        out = np.where(np.triu(np.ones((n_positions, n_positions), dtype=bool), k=1), masked, out)
    return out


def in_encoder_form(pe: PositionalEncoding) -> bool:
    """The encoding's bidirectional form: symmetric ALiBi, bidirectional T5 buckets."""
    return bool(getattr(pe, "symmetric", False) or getattr(pe, "bidirectional", False))


@styled
def bias_heatmaps(
    pe: PositionalEncoding | str,
    *,
    n_positions: int = 32,
    causal: bool | None = None,
    axes: Sequence[Axes] | None = None,
) -> Figure:
    """One heatmap per head of bias[h, i, j] (query i down, key j across), shared colour scale.

    ``causal``: keys after the query (j > i) are drawn as masked (grey), as causal attention
    never sees them: there ALiBi's -m·(i - j) would read as a reward. Default: causal unless
    the encoding is in its encoder form (symmetric ALiBi, bidirectional T5).
    """
    pe = resolve(pe)
    bias = bias_matrix(pe, n_positions)
    causal = not in_encoder_form(pe) if causal is None else causal
    check_bool(causal, "causal")
    H, T = bias.shape[0], bias.shape[1]
    if axes is None:
        fig = Figure(figsize=(2.6 * H + 1.0, 2.8), layout="constrained")
        axes = list(fig.subplots(1, H, squeeze=False)[0])
    elif len(axes) != H:
        raise ValueError(f"axes must hold one Axes per head ({H}), got {len(axes)}")
    fig = root_figure(axes[0])
    for h, ax in enumerate(axes):
        ax.set(title=f"head {h}", xlabel="key position j", ylabel="" if h else "query position i")
    future = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T) key after the query
    shown = np.ma.masked_array(bias, np.broadcast_to(future, bias.shape)) if causal else bias
    cmap = mpl.colormaps[DIVERGING].with_extremes(bad=MASKED)
    shared_scale(axes, shown, label="bias added to logits", cmap=cmap)
    note = " (causal: grey keys after the query are masked)" if causal else ""
    fig.suptitle(f"{pe.name}: score bias per head{note}")
    return fig
