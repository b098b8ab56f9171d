"""The lab's HTML report, one self-contained page (``posenc.report.html``): findings checked
against the literature, accuracy vs length per task config (mean over seeds, band = min..max,
training length marked; runs trained to different lengths are never averaged together), a
table, and per encoding the attention maps of a trained model at the training length and at 2x
with the mean attention distance per layer.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import mean, pstdev
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..report.html import FigureBlock, Section, Table, figure_to_data_uri, render_page
from .config import RunConfig, TaskConfig
from .findings import check_findings
from .store import ResultStore
from .sweep import STORE_NAME

REPORT_NAME = "report.html"
INTRO = (
    "Metric: exact match of the greedy answer (accuracy for classification; loss per position "
    "bucket for lm). Each point is the mean over seeds, the band spans min to max, the dashed "
    "line is the longest training length."
)


def write_report(runs: list[RunConfig], out_dir: str | Path, *, title: str = "posenc lab") -> Path:
    """Render ``out_dir/report.html`` for ``runs`` from ``out_dir/results.sqlite``."""
    out = Path(out_dir)
    keys = {r.key() for r in runs}
    with ResultStore(out / STORE_NAME) as store:
        rows, stored = store.rows(keys), store.runs(keys)
    encodings = list(dict.fromkeys(r.encoding for r in runs))
    panels = _panels(runs)
    curves = [_curve_figure(rows, p, encodings) for p in panels]
    sections = [
        _findings_section(rows),
        Section("Accuracy vs length", figures=[c for c in curves if c is not None]),
        Section("Results table", tables=[_table(rows, encodings, panels)]),
        *_attention_sections(runs, stored, encodings),
    ]
    if runs:
        facts = {"model": str(runs[0].model), "training": str(runs[0].train)}
        sections.append(Section("Configuration", facts=facts))
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    intro = f"{len(stored)} of {len(keys)} runs finished, {now}. {INTRO}"
    path = out / REPORT_NAME
    path.write_text(render_page(title, sections, intro=intro))
    return path


def _findings_section(rows: list[dict[str, Any]]) -> Section:
    table = Table(
        columns=["claim", "source", "here", "measured"],
        rows=[[f.claim, f.source, f.status, f.evidence] for f in check_findings(rows)],
    )
    note = (
        "Exact match beyond training = mean over seeds and lengths past the longest "
        "training length; the LM finding compares loss in the last and first position bucket."
    )
    return Section("Published findings", paragraphs=[note], tables=[table])


@dataclass(frozen=True)
class _Panel:
    """The runs of one task config (a curve and a group of table columns): only these are
    averaged together, never runs of another training length (a sweep's ``train_max_lens``)
    or other settings of the same task."""

    task: str
    label: str  # the task's name, with the settings that tell its configs apart if several
    train_max: int
    keys: frozenset[str]


def _panels(runs: list[RunConfig]) -> list[_Panel]:
    """A panel per task and resolved settings (equal settings spelled differently share one)."""
    resolved: dict[TaskConfig, tuple[tuple[str, ...], int]] = {}
    groups: dict[tuple[str, tuple[str, ...], int], list[str]] = {}
    for r in runs:
        if r.task not in resolved:
            t = r.task.build()
            lo, hi = t.train_len
            lens = ", ".join(map(str, t.eval_lens))
            resolved[r.task] = ((f"train {lo}-{hi}", f"eval {lens}", f"{t.n_symbols} symbols"), hi)
        groups.setdefault((r.task.name, *resolved[r.task]), []).append(r.key())
    panels = []
    for (name, mine, train_max), keys in groups.items():
        others = [s for n, s, _ in groups if n == name]
        differ = [x for i, x in enumerate(mine) if len({s[i] for s in others}) > 1]
        label = f"{name} ({', '.join(differ)})" if differ else name
        panels.append(_Panel(name, label, train_max, frozenset(keys)))
    return panels


def _series(
    rows: list[dict[str, Any]], panel: _Panel, metric: str
) -> dict[str, dict[int, list[float]]]:
    """encoding -> length -> values over seeds, for the runs of ``panel``."""
    out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["run_key"] in panel.keys and r["metric"] == metric:
            out[r["encoding"]][r["length"]].append(r["value"])
    return out


def _metric(task: str) -> str:
    return "loss" if task == "lm" else "exact_match"


def _curve_figure(
    rows: list[dict[str, Any]], panel: _Panel, encodings: list[str]
) -> FigureBlock | None:
    task, train_max, label = panel.task, panel.train_max, panel.label
    series = _series(rows, panel, _metric(task))
    if not series:
        return None
    fig = Figure(figsize=(6.4, 3.8), layout="constrained")
    ax = fig.subplots()
    for enc in (e for e in encodings if e in series):
        lengths = sorted(series[enc])
        vals = [series[enc][n] for n in lengths]
        (line,) = ax.plot(lengths, [mean(v) for v in vals], marker="o", label=enc)
        lo, hi = [min(v) for v in vals], [max(v) for v in vals]
        ax.fill_between(lengths, lo, hi, color=line.get_color(), alpha=0.15)  # seeds' range
    ax.axvline(train_max, color="gray", linestyle="--", label=f"train length {train_max}")
    xlabel = "position (bucket end)" if task == "lm" else "evaluation length"
    ax.set(xlabel=xlabel, ylabel=_metric(task).replace("_", " "), title=label)
    ax.legend(fontsize=7, ncol=2)
    return FigureBlock(figure_to_data_uri(fig), f"{label}: {_metric(task)} vs length")


def _table(rows: list[dict[str, Any]], encodings: list[str], panels: list[_Panel]) -> Table:
    """A column per (task config, evaluation length); cells "mean ± std" over seeds."""
    series = {p: _series(rows, p, _metric(p.task)) for p in panels}
    columns = [
        (p, n) for p in panels for n in sorted({n for by_len in series[p].values() for n in by_len})
    ]

    def cell(v: list[float]) -> str:
        return f"{mean(v):.2f} ± {pstdev(v):.2f}" if v else "–"

    body = [
        [enc, *(cell(series[p].get(enc, {}).get(n, [])) for p, n in columns)] for enc in encodings
    ]
    caption = "exact match (lm: loss) by task and evaluation length, mean ± std over seeds"
    return Table(["encoding", *(f"{p.label} {n}" for p, n in columns)], body, caption)


def _attention_sections(
    runs: list[RunConfig], stored: list[dict[str, Any]], encodings: list[str]
) -> list[Section]:
    """Per encoding, maps of its first stored run (first task, lowest seed)."""
    ckpt = {r["key"]: r["checkpoint"] for r in stored if r["checkpoint"]}
    sections = []
    for enc in encodings:
        mine = [r for r in runs if r.encoding == enc and r.key() in ckpt]
        first = min(mine, key=lambda r: r.seed, default=None)
        if first is not None and Path(ckpt[first.key()]).is_file():
            sections.append(_attention_section(first, ckpt[first.key()]))
    return sections


def _attention_section(cfg: RunConfig, checkpoint: str) -> Section:
    import torch

    from .attention_maps import attention_maps, mean_distance
    from .train import load_model

    model, task = load_model(cfg, checkpoint), cfg.task.build()
    hi = task.train_len[1]
    lengths = sorted({hi, min(2 * hi, max(task.eval_lens))})  # the model was built up to these
    maps, dist = [], []
    for n in lengths:
        batch = task.sample(np.random.default_rng([7, n]), 16, n, split="eval")
        tokens = batch.tokens if task.kind == "classify" else batch.tokens[:, :-1]  # model input
        probs = attention_maps(model.net, torch.from_numpy(tokens))
        maps.append([p[0].mean(0).numpy() for p in probs])  # first sample, mean over heads
        dist.append([mean_distance(p) for p in probs])
    fig = Figure(figsize=(6.0, 2.9 * len(maps[0])), layout="constrained")
    axes = fig.subplots(len(maps[0]), len(lengths), squeeze=False)
    for col, n in enumerate(lengths):
        for layer, weights in enumerate(maps[col]):
            axes[layer][col].imshow(weights, cmap="viridis", vmin=0.0)
            axes[layer][col].set(title=f"layer {layer}, n = {n}", xlabel="key", ylabel="query")
    title = f"{cfg.encoding} on {cfg.task.name} (seed {cfg.seed}), mean over heads"
    table = Table(
        ["layer", *(f"mean distance at n = {n}" for n in lengths)],
        [[str(i), *(f"{d[i]:.2f}" for d in dist)] for i in range(len(maps[0]))],
    )
    figure = FigureBlock(figure_to_data_uri(fig), title)
    return Section(f"Attention: {cfg.encoding}", tables=[table], figures=[figure])
