"""Attention weights of a small model using an encoding (any family)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..analysis.subjects import VOCAB, attention_weights, resolve, tiny_model
from ..encodings.base import PositionalEncoding
from ._style import SEQUENTIAL, figure_axes, heatmap, styled


def model_attention(
    pe: PositionalEncoding | str,
    *,
    n_positions: int = 24,
    causal: bool = True,
    same_token: bool = True,
    seed: int = 0,
) -> np.ndarray:
    """First-layer attention weights (H, T, T) of a seeded float64 TinyTransformer (weights
    drawn at a scale where attention is not uniform). ``same_token``: every position holds one
    token, so the pattern is the encoding's alone (NoPE is uniform over the visible keys);
    otherwise random tokens."""
    model = tiny_model(resolve(pe), causal=causal, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, VOCAB, (1, 1 if same_token else n_positions), generator=gen)
    idx = idx.expand(1, n_positions)  # (B, T)
    pos = torch.arange(n_positions)
    block: Any = model.blocks[0]
    with torch.no_grad():
        x = model.pe.embed(model.tok(idx), pos)  # (B, T, C)
        weights = attention_weights(block.attn, block.norm1(x), pos)  # (B, H, T, T)
    return weights[0].numpy()


@styled
def attention_heatmap(
    pe: PositionalEncoding | str,
    *,
    head: int = 0,
    n_positions: int = 24,
    causal: bool = True,
    ax: Axes | None = None,
) -> Figure:
    """Softmax weights of one head on one repeated token: query position down, key across."""
    pe = resolve(pe)
    weights = model_attention(pe, n_positions=n_positions, causal=causal)
    if not 0 <= head < weights.shape[0]:
        raise ValueError(f"head must lie in 0..{weights.shape[0] - 1}, got {head}")
    fig, ax = figure_axes(ax, (5.0, 4.2))
    heatmap(ax, weights[head], label="attention weight", signed=False, vmin=0.0)
    ax.set(
        xlabel="key position",
        ylabel="query position",
        title=f"{pe.name}: attention, layer 0 head {head} (one token repeated)",
    )
    return fig


@styled
def attention_grid(
    encodings: Sequence[PositionalEncoding | str], *, head: int = 0, n_positions: int = 24
) -> Figure:
    """Side by side: one head's first-layer attention weights for each encoding on one token
    repeated (the pattern is position alone), same model weights, shared 0..1 colour scale."""
    pes = [resolve(e) for e in encodings]
    if not pes:
        raise ValueError("attention_grid needs at least one encoding, got none")
    cols = min(5, len(pes))
    rows = -(-len(pes) // cols)
    fig = Figure(figsize=(2.5 * cols + 0.8, 2.6 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, pe in zip(axes, pes, strict=False):
        image = ax.imshow(
            model_attention(pe, n_positions=n_positions)[head],
            vmin=0.0,
            vmax=1.0,
            cmap=SEQUENTIAL,
            interpolation="nearest",
        )
        ax.set(title=pe.name, xlabel="key", ylabel="query")
        ax.grid(False)
    for ax in axes[len(pes) :]:
        ax.set_axis_off()
    fig.colorbar(image, ax=list(axes), label="attention weight")
    fig.suptitle(f"Attention weights, layer 0 head {head}: one token repeated, same weights")
    return fig
