"""Attention weights of every layer of a trained model, the mean attention distance, and the
lab report's attention sections (only of runs that passed the competence gate).

Each layer's weights are recomputed from its input (captured by a forward pre-hook) by the
layer itself (``return_weights=True``: ``posenc.analysis.subjects.layer_weights``). Mean
attention distance: sum_j p_ij |i - j|, averaged over queries, heads and batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..analysis.subjects import layer_weights
from ..models import EncoderDecoder, TinyTransformer
from ..report.html import FigureBlock, Section, Table, figure_to_data_uri
from .config import RunConfig
from .figures import attention_figure
from .model import LabModel
from .results import Run, learned


def attention_maps(
    net: TinyTransformer | EncoderDecoder, tokens: Tensor, pos: Tensor | None = None
) -> list[Tensor]:
    """Per layer, weights (B, H, T, T) of ``net`` reading ``tokens`` (B, T) at ``pos`` (the
    default positions when None; (T, 2) on a grid); of an ``EncoderDecoder``, its encoder's
    self-attention reading source tokens ``tokens`` (``analysis.subjects.layer_weights``),
    in float32."""
    return [w.float() for w in layer_weights(net, tokens, pos)]


def evaluation_input(
    model: LabModel, task: Any, n: int, batch_size: int
) -> tuple[TinyTransformer | EncoderDecoder, Tensor, Tensor | None]:
    """The network at length ``n``, ``batch_size`` evaluation samples of ``task`` at that length
    (seeded by n) as its input tokens (B, T), and their positions: what the report's maps
    read (an encoder-decoder's encoder reads the prompt)."""
    batch = task.sample(np.random.default_rng([7, n]), batch_size, n, split="eval")
    tokens = batch.tokens if task.kind == "classify" else batch.tokens[:, :-1]  # model input
    if model.encoder_decoder:  # the encoder's maps: it reads the prompt
        tokens = batch.tokens[:, : batch.n_prompt - 1]
    at_n = model.at_length(n)  # a grid's table resampled to n's grid (learned_2d)
    return at_n.net, torch.from_numpy(tokens), at_n.positions(tokens.shape[1])


def checkpoint_input(
    checkpoint: str | Path, store: str | Path | None = None
) -> tuple[TinyTransformer | EncoderDecoder, Tensor, Tensor | None, RunConfig]:
    """A lab checkpoint ``OUT/checkpoints/KEY.pt`` rebuilt from its run's configuration in the
    store (default ``OUT/results.sqlite``), with one evaluation sample at the training length
    (``evaluation_input``): (network, tokens (1, T), positions, run configuration), what
    ``posenc plot attention --checkpoint`` draws.

    Raises: ValueError for a missing file or a store without the run KEY.
    """
    from pydantic import TypeAdapter

    from .store import ResultStore
    from .train import load_model

    path = Path(checkpoint)
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} is not a file")
    where = path.parent.parent / "results.sqlite" if store is None else Path(store)
    if not where.is_file():
        raise ValueError(f"no results store at {str(where)!r}: give the run's with --store")
    with ResultStore(where, readonly=True) as results:
        rows = results.runs([path.stem])
    if not rows:
        raise ValueError(
            f"{str(where)!r} holds no run {path.stem!r} (a checkpoint is named by its run key)"
        )
    cfg = TypeAdapter(RunConfig).validate_python(rows[0]["config"])
    model, task = load_model(cfg, path), cfg.task.build()
    return (*evaluation_input(model, task, task.train_len[1], 1), cfg)


def mean_distance(probs: Tensor) -> float:
    """Mean |i - j| under the attention probabilities (B, H, T, T)."""
    T = probs.shape[-1]
    idx = torch.arange(T, device=probs.device, dtype=probs.dtype)
    dist = (idx[:, None] - idx[None, :]).abs()  # (T, T)
    return float((probs * dist).sum(-1).mean())


def attention_sections(runs: list[RunConfig], stored: list[Run], order: list[str]) -> list[Section]:
    """Per encoding, the maps of its first run that passed the gate (first task, lowest seed);
    encodings without one are listed instead, and so are those computing attention from the
    data (fox, stick_breaking, path: blockwise, no weights to draw)."""
    from ..registry import info, names

    configs = {r.key(): r for r in runs}
    sections, without = [], []
    blockwise = [e for e in order if e in names() and info(e).cls.capabilities.attention_form]
    for enc in order:
        if enc in blockwise:
            continue
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
    why = []  # one section for both reasons (section ids are unique)
    if without:
        why.append(f"No run of {', '.join(without)} passed the gate with a checkpoint: no maps.")
    if blockwise:
        why.append(
            f"{', '.join(blockwise)} compute attention from the data, blockwise: no softmax "
            "weights to draw."
        )
    if why:
        sections.append(Section("Attention maps not drawn", paragraphs=why))
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
        probs = attention_maps(*evaluation_input(model, task, n, 16))
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
