"""Pictures of context extension (``posenc.extension``) and of ALiBi's slope series."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import functional as PF
from ..analysis.subjects import EXAMPLE_SCALINGS, SCALE, TRAIN_LEN
from ..extension import scaling_config
from ._style import figure_axes, outside_legend, overlay, styled

#: Methods drawn by default: the static ones (dynamic NTK and LongRoPE follow the current length;
#: pass them by name to draw them at s·L).
DEFAULT_METHODS = ("linear", "ntk", "yarn", "llama3")


def frequency_scales(
    method: str, *, dim: int = 128, base: float = 10000.0, seq_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(wavelength 2π/θ_i, θ'_i / θ_i) per pair for ``method`` with its ``EXAMPLE_SCALINGS``
    configuration (s = 4, L = 64); dynamic methods at ``seq_len`` (default s·L).

    Raises: ValueError for an unknown method (listing the valid ones).
    """
    if method not in EXAMPLE_SCALINGS:
        raise ValueError(f"method must be one of {sorted(EXAMPLE_SCALINGS)}, got {method!r}")
    params = dict(EXAMPLE_SCALINGS[method])
    if method == "longrope":  # the example factors are for 4 pairs; spread them over dim/2
        for key in ("short_factor", "long_factor"):
            values = np.asarray(params[key], dtype=float)
            params[key] = list(np.interp(np.linspace(0, 1, dim // 2), np.linspace(0, 1, 4), values))
    inv_freq = PF.rope_inv_freq(dim, base=base)  # (P,)
    config = scaling_config({"rope_type": method, **params})
    scaled = config.apply(inv_freq, int(SCALE * TRAIN_LEN) if seq_len is None else seq_len)
    return np.asarray(PF.wavelengths(inv_freq)), np.asarray(scaled.inv_freq) / inv_freq


@styled
def extension_scales(
    methods: Sequence[str] = DEFAULT_METHODS, *, dim: int = 128, ax: Axes | None = None
) -> Figure:
    """θ'_i/θ_i per pair for each method against the pair's wavelength (log-log), with the
    training length L marked: 1 keeps a frequency, 1/s interpolates it fully."""
    fig, ax = figure_axes(ax, (6.4, 4.0))
    curves = [(method, *frequency_scales(method, dim=dim)) for method in methods]
    overlay(ax, curves, marker="o", markersize=2.5)
    ax.axvline(TRAIN_LEN, color="gray", linestyle=":", label=f"training length L = {TRAIN_LEN}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(
        xlabel="wavelength 2π/θ_i (positions)",
        ylabel="θ'_i / θ_i",
        title=f"Context extension s = {SCALE:g}: frequency scale per pair (d = {dim})",
    )
    outside_legend(ax)
    return fig


@styled
def alibi_slopes(head_counts: Sequence[int] = (8, 12, 16), *, ax: Axes | None = None) -> Figure:
    """ALiBi slope m_h per head (log scale) for several head counts (functional.alibi_slopes):
    geometric for a power of two, interleaved otherwise."""
    fig, ax = figure_axes(ax, (6.0, 3.8))
    curves = [(f"H = {H}", np.arange(1, H + 1), PF.alibi_slopes(H)) for H in head_counts]
    overlay(ax, curves, marker="o", markersize=3)
    ax.set_yscale("log", base=2)
    ax.set(xlabel="head h", ylabel="slope m_h", title="ALiBi slopes per head")
    outside_legend(ax)
    return fig
