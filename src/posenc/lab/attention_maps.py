"""Attention weights of every layer of a trained model, the mean attention distance, and the
lab report's attention sections (only of runs that passed the competence gate).

Each layer's weights are recomputed from its input (captured by a forward pre-hook) with
``posenc.analysis.attention_weights``, which calls the encoding's hooks in ``Attention``'s
order. Mean attention distance: sum_j p_ij |i - j|, averaged over queries, heads and batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from ..analysis.subjects import attention_weights
from ..attention import Attention
from ..models import EncoderDecoder, TinyTransformer
from ..report.html import FigureBlock, Section, Table, figure_to_data_uri
from .config import RunConfig
from .figures import attention_figure
from .results import Run, learned


@torch.no_grad()
def attention_maps(
    net: TinyTransformer | EncoderDecoder, tokens: Tensor, pos: Tensor | None = None
) -> list[Tensor]:
    """Per layer, weights (B, H, T, T) of ``net`` reading ``tokens`` (B, T) at ``pos`` (the
    default positions when None; (T, 2) on a grid); of an ``EncoderDecoder``, its encoder's
    self-attention reading source tokens ``tokens``."""
    captured: list[tuple[Attention, Tensor, Tensor]] = []

    def grab(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # the model hands each layer the forward's position context
        captured.append((module, args[0], kwargs["ctx"].q_pos))

    blocks, read = (
        (net.encoder, net.encode) if isinstance(net, EncoderDecoder) else (net.blocks, net)
    )
    layers = [cast(Attention, block.attn) for block in blocks]
    hooks = [attn.register_forward_pre_hook(grab, with_kwargs=True) for attn in layers]
    try:
        read(tokens) if isinstance(net, EncoderDecoder) else net(tokens, pos)
    finally:
        for h in hooks:
            h.remove()
    return [attention_weights(attn, x, pos).float() for attn, x, pos in captured]


def mean_distance(probs: Tensor) -> float:
    """Mean |i - j| under the attention probabilities (B, H, T, T)."""
    T = probs.shape[-1]
    idx = torch.arange(T, device=probs.device, dtype=probs.dtype)
    dist = (idx[:, None] - idx[None, :]).abs()  # (T, T)
    return float((probs * dist).sum(-1).mean())


def attention_sections(runs: list[RunConfig], stored: list[Run], order: list[str]) -> list[Section]:
    """Per encoding, the maps of its first run that passed the gate (first task, lowest seed);
    encodings without one are listed instead."""
    configs = {r.key(): r for r in runs}
    sections, without = [], []
    for enc in order:
        gated = [
            r
            for r in stored
            if r.encoding == enc and learned(r) and r.checkpoint and Path(r.checkpoint).is_file()
        ]
        if gated:
            first = min(gated, key=lambda r: r.seed)  # the first task's, among equal seeds
            sections.append(attention_section(configs[first.key], first.checkpoint or ""))
        else:
            without.append(enc)
    if without:
        text = f"No run of {', '.join(without)} passed the gate with a checkpoint: no maps."
        sections.append(Section("Attention maps not drawn", paragraphs=[text]))
    return sections


def attention_section(cfg: RunConfig, checkpoint: str) -> Section:
    """Maps of the first evaluation sample at the training length and at 2x (within the
    evaluated lengths), and the mean distance per layer."""
    from .train import load_model

    model, task = load_model(cfg, checkpoint), cfg.task.build()
    hi = task.train_len[1]
    lengths = sorted({hi, min(2 * hi, max(task.eval_lens))})  # the model was built up to these
    maps, dist = [], []
    for n in lengths:
        batch = task.sample(np.random.default_rng([7, n]), 16, n, split="eval")
        tokens = batch.tokens if task.kind == "classify" else batch.tokens[:, :-1]  # model input
        if model.encoder_decoder:  # the encoder's maps: it reads the prompt
            tokens = batch.tokens[:, : batch.n_prompt - 1]
        at_n = model.at_length(n)  # a grid's table resampled to n's grid (learned_2d)
        probs = attention_maps(at_n.net, torch.from_numpy(tokens), at_n.positions(tokens.shape[1]))
        maps.append([p[0].mean(0).numpy() for p in probs])  # first sample, mean over heads
        dist.append([mean_distance(p) for p in probs])
    which = "; encoder self-attention on the prompt" if model.encoder_decoder else ""
    title = f"{cfg.label} on {cfg.task.name} (seed {cfg.seed}, passed the gate{which})"
    figure = FigureBlock(
        figure_to_data_uri(attention_figure(maps, lengths, title)), title, wide=True
    )
    table = Table(
        ["layer", *(f"mean distance at length {n}" for n in lengths)],
        [[str(i), *(f"{d[i]:.2f}" for d in dist)] for i in range(len(maps[0]))],
    )
    return Section(f"Attention: {cfg.label}", tables=[table], figures=[figure])
