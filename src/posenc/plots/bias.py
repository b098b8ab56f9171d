"""Pictures of score biases: the (Tq, Tk) bias of each head (ALiBi, T5, Kerple, FIRE)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._validate import check_positive_int
from ..analysis.subjects import evaluating, has_bias, resolve
from ..encodings.base import PositionalEncoding
from ._style import root_figure, shared_scale, styled, unsupported


def bias_matrix(pe: PositionalEncoding | str, n_positions: int = 32) -> np.ndarray:
    """The bias (H, T, T) the encoding adds to logits at positions 0..T-1 (all pairs, no mask).

    Raises: ValueError for encodings without a bias hook.
    """
    pe = resolve(pe)
    check_positive_int(n_positions, "n_positions")
    pos = torch.arange(n_positions)
    with torch.no_grad(), evaluating(pe):
        bias = pe.bias(pos, pos) if has_bias(pe) else None
    if bias is None:
        raise unsupported(pe, "adds no score bias", "one with a bias hook")
    return bias[0].double().numpy()  # (H, T, T)


@styled
def bias_heatmaps(
    pe: PositionalEncoding | str, *, n_positions: int = 32, axes: Sequence[Axes] | None = None
) -> Figure:
    """One heatmap per head of bias[h, i, j] (query i down, key j across), shared colour scale."""
    pe = resolve(pe)
    bias = bias_matrix(pe, n_positions)
    H = bias.shape[0]
    if axes is None:
        fig = Figure(figsize=(2.6 * H + 1.0, 2.8), layout="constrained")
        axes = list(fig.subplots(1, H, squeeze=False)[0])
    elif len(axes) != H:
        raise ValueError(f"axes must hold one Axes per head ({H}), got {len(axes)}")
    fig = root_figure(axes[0])
    for h, ax in enumerate(axes):
        ax.set(title=f"head {h}", xlabel="key position j", ylabel="" if h else "query position i")
    shared_scale(axes, bias, label="bias added to logits")
    fig.suptitle(f"{pe.name}: score bias per head")
    return fig
