"""Attention weights of a small model using an encoding (any family), or of the caller's own
layer or model (``attention_weights``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._validate import check_positive_int
from ..analysis import subjects
from ..analysis.subjects import VOCAB, probe_positions, resolve, tiny_model
from ..attention import Attention
from ..encodings.base import PositionalEncoding
from ..models import EncoderDecoder, TinyTransformer
from ._style import (
    check_index,
    figure_axes,
    heatmap,
    outside_legend,
    overlay,
    root_figure,
    shared_scale,
    styled,
)


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
    otherwise random tokens. Grid encodings read the tokens as the cells of a grid in raster
    order (``probe_positions``)."""
    check_positive_int(n_positions, "n_positions")
    pe = resolve(pe)
    model = tiny_model(pe, causal=causal, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, VOCAB, (1, 1 if same_token else n_positions), generator=gen)
    idx = idx.expand(1, n_positions)  # (B, T)
    pos = probe_positions(pe, n_positions)  # (T,) | (T, A)
    block: Any = model.blocks[0]
    with torch.no_grad():
        x = model.pe.embed(model.tok(idx), pos)  # (B, T, C)
        weights = subjects.attention_weights(block.attn, block.norm1(x), pos)  # (B, H, T, T)
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
    check_index(head, weights.shape[0], "head")
    fig, ax = figure_axes(ax, (5.0, 4.2))
    heatmap(ax, weights[head], label="attention weight", signed=False, vmin=0.0)
    ax.set(
        xlabel="key position",
        ylabel="query position",
        title=f"{pe.name}: attention, layer 0 head {head} (one token repeated)",
    )
    return fig


def weights_of(
    module: Attention | TinyTransformer | EncoderDecoder,
    x: torch.Tensor,
    pos: torch.Tensor | None = None,
    *,
    layer: int = 0,
) -> np.ndarray:
    """Softmax weights (B, H, T, L) that ``module`` gives its input, in eval mode (no dropout;
    the module's mode is restored): an ``Attention`` layer reading x (B, T, C) at ``pos``
    (``return_weights=True``), or the layer ``layer`` of a model reading tokens x (B, T)
    (``TinyTransformer``; an ``EncoderDecoder``'s encoder on source tokens).

    Raises: TypeError for another module; ValueError for a layer index outside the model.
    """
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            if isinstance(module, Attention):
                _, weights = module(x, pos, return_weights=True)
                return weights.double().numpy()
            if not isinstance(module, TinyTransformer | EncoderDecoder):
                raise TypeError(
                    "expected a posenc Attention layer, TinyTransformer or EncoderDecoder, got "
                    f"{type(module).__name__}"
                )
            per_layer = subjects.layer_weights(module, x, pos)
    finally:
        module.train(was_training)
    check_index(layer, len(per_layer), "layer")
    return per_layer[layer].double().numpy()


@styled
def attention_weights(
    module: Attention | TinyTransformer | EncoderDecoder,
    x: torch.Tensor,
    pos: torch.Tensor | None = None,
    *,
    layer: int = 0,
    heads: Sequence[int] | None = None,
    average: bool = False,
    batch: int = 0,
    labels: Sequence[str] | None = None,
) -> Figure:
    """The attention weights of your own layer or model: one panel per head (default the first
    four, 2 x 2 as in seed 001; ``average``: one panel of the mean over heads, what
    ``nn.MultiheadAttention`` returns, seed 003), query position down, key across, one 0..max
    colour scale; ``labels`` name the positions (tokens).

    ``module`` and x as ``weights_of``: an ``Attention`` layer and x (B, T, C) float, or a
    ``TinyTransformer``/``EncoderDecoder`` and token ids (B, T) (``layer`` picks the layer).

    Raises: ValueError for a head, layer or batch row outside the weights, or labels that are
    not one per key; TypeError for another module.
    """
    weights = weights_of(module, x, pos, layer=layer)  # (B, H, T, L)
    check_index(batch, weights.shape[0], "batch")
    w = weights[batch]  # (H, T, L)
    if average:
        panels, titles = [w.mean(0)], ["mean over heads"]
    else:
        chosen = list(range(min(4, w.shape[0]))) if heads is None else list(heads)
        for h in chosen:
            check_index(h, w.shape[0], "head")
        panels, titles = [w[h] for h in chosen], [f"head {h}" for h in chosen]
    if labels is not None and len(labels) != w.shape[-1]:
        raise ValueError(f"labels must name each of the {w.shape[-1]} keys, got {len(labels)}")
    cols = 2 if len(panels) == 4 else min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(3.2 * cols + 0.8, 3.0 * rows), layout="constrained")
    axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    shown = axes[: len(panels)]
    vmax = max(float(p.max()) for p in panels) or 1.0
    shared_scale(shown, panels, label="attention weight", signed=False, vmin=0.0, vmax=vmax)
    for ax, title in zip(shown, titles, strict=True):
        ax.set(title=title, xlabel="key position", ylabel="query position")
        if labels is not None:
            ax.set_xticks(range(len(labels)), labels, rotation=90)
            ax.set_yticks(range(len(labels)), labels[-w.shape[1] :])
    kind = type(module).__name__
    where = "" if isinstance(module, Attention) else f", layer {layer}"
    fig.suptitle(f"{kind}{where}: attention weights (batch row {batch})")
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
    images = []
    for ax, pe in zip(axes, pes, strict=False):
        weights = model_attention(pe, n_positions=n_positions)  # (H, T, T)
        check_index(head, weights.shape[0], "head")
        images.append(weights[head])
        ax.set(title=pe.name, xlabel="key", ylabel="query")
    for ax in axes[len(pes) :]:
        ax.set_axis_off()
    weights = np.stack(images)  # (N, T, T)
    shared_scale(list(axes), weights, label="attention weight", signed=False, vmin=0.0, vmax=1.0)
    fig.suptitle(f"Attention weights, layer 0 head {head}: one token repeated, same weights")
    return fig


#: Lengths T at which ``attention_decay`` measures the last query's entropy (<= MAX_LEN).
ENTROPY_LENGTHS = (8, 16, 32, 64, 128, 256)


def attention_by_distance(
    pe: PositionalEncoding | str, *, n_positions: int = 64, seed: int = 0
) -> np.ndarray:
    """Mean weight on the key d positions back, d = 0..T-1: mean over heads h and queries
    i >= d of a_h(i, i - d) (seed 001's "attention decay with distance"), causal, on one token
    repeated (``model_attention``): NoPE gives mean_i 1/(i + 1), ALiBi softmax_j(-m_h (i - j)).

    Shapes: returns (T,).
    """
    weights = model_attention(pe, n_positions=n_positions, seed=seed)  # (H, T, T)
    return np.array(
        [np.diagonal(weights, offset=-d, axis1=1, axis2=2).mean() for d in range(n_positions)]
    )


def attention_entropy(
    pe: PositionalEncoding | str, lengths: Sequence[int] = ENTROPY_LENGTHS, *, seed: int = 0
) -> np.ndarray:
    """Entropy -Σ_j a(T-1, j) ln a(T-1, j) (nats) of the last query's causal attention at each
    length T, mean over heads, on one token repeated: ln T for uniform attention (NoPE), bounded
    when a bias decays with distance (ALiBi; Press et al. 2022, arXiv:2108.12409).

    Shapes: returns (len(lengths),).
    """
    out = []
    for T in lengths:
        last = model_attention(pe, n_positions=T, seed=seed)[:, -1]  # (H, T)
        plogp = np.where(last > 0, last * np.log(np.where(last > 0, last, 1.0)), 0.0)
        out.append(float(-plogp.sum(-1).mean()))
    return np.array(out)


@styled
def attention_decay(
    encodings: Sequence[PositionalEncoding | str],
    *,
    n_positions: int = 64,
    lengths: Sequence[int] = ENTROPY_LENGTHS,
    axes: Sequence[Axes] | None = None,
) -> Figure:
    """Attention by distance and as length grows (one token repeated, layer 0, head mean):
    mean weight on the key d positions back (left), entropy of the last query's attention
    against the length T, with ln T of uniform attention marked (right)."""
    if axes is None:
        fig = Figure(figsize=(10.0, 3.8), layout="constrained")
        axes = list(fig.subplots(1, 2))
    elif len(axes) != 2:
        raise ValueError(f"axes must hold two Axes (by distance, by length), got {len(axes)}")
    left, right = axes
    fig = root_figure(left)
    right.plot(lengths, np.log(lengths), color="lightgray", linewidth=4, label="ln T (uniform)")
    pes = [resolve(e) for e in encodings]
    d = np.arange(n_positions)
    overlay(left, [(pe.name, d, attention_by_distance(pe, n_positions=n_positions)) for pe in pes])
    entropies = [(pe.name, list(lengths), attention_entropy(pe, lengths)) for pe in pes]
    overlay(right, entropies, marker="o", markersize=3)
    left.set_yscale("log")
    left.set(
        xlabel="distance d = i - j",
        ylabel="mean attention weight a(i, i - d)",
        title=f"Attention by distance (T = {n_positions})",
    )
    right.set_xscale("log", base=2)
    right.set(
        xlabel="length T",
        ylabel="entropy of the last query (nats)",
        title="Attention entropy as length grows",
    )
    outside_legend(right)
    return fig
