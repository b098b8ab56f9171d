"""The lab's HTML report: one self-contained file (figures inlined as PNG data URIs, no
network), rendered with an autoescaping Jinja2 template.

Sections: findings checked against the literature, accuracy vs length per task (mean over
seeds, band = min..max, training length marked), a table, and per encoding the attention of
a trained model at the training length and at 2x with the mean attention distance per layer.
"""

from __future__ import annotations

import base64
import io
import time
from collections import defaultdict
from pathlib import Path
from statistics import mean, pstdev
from typing import Any

import numpy as np

from .config import RunConfig
from .findings import check_findings
from .store import ResultStore
from .sweep import STORE_NAME

REPORT_NAME = "report.html"


def write_report(runs: list[RunConfig], out_dir: str | Path, *, title: str = "posenc lab") -> Path:
    """Render ``out_dir/report.html`` for ``runs`` from ``out_dir/results.sqlite``."""
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out_dir)
    keys = {r.key() for r in runs}
    with ResultStore(out / STORE_NAME) as store:
        rows, stored = store.rows(keys), store.runs(keys)
    tasks = list(dict.fromkeys(r.task.name for r in runs))
    encodings = list(dict.fromkeys(r.encoding for r in runs))
    context = {
        "title": title,
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "n_runs": len(stored),
        "n_planned": len(keys),
        "findings": check_findings(rows),
        "curves": [(t, _curve_figure(rows, t, encodings)) for t in tasks],
        "table": _table(rows, encodings, tasks),
        "attention": _attention_sections(runs, stored, encodings),
        "config": runs[0] if runs else None,
    }
    path = out / REPORT_NAME
    path.write_text(_render(context))
    return path


def _render(context: dict[str, Any]) -> str:
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(
        loader=PackageLoader("posenc.lab", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    return env.get_template("report.html.j2").render(**context)


def _figure_uri(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _series(
    rows: list[dict[str, Any]], task: str, metric: str
) -> dict[str, dict[int, list[float]]]:
    """encoding -> length -> values over seeds."""
    out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["task"] == task and r["metric"] == metric:
            out[r["encoding"]][r["length"]].append(r["value"])
    return out


def _curve_figure(rows: list[dict[str, Any]], task: str, encodings: list[str]) -> str | None:
    import matplotlib.pyplot as plt

    metric = "loss" if task == "lm" else "exact_match"
    series = _series(rows, task, metric)
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for enc in encodings:
        if enc not in series:
            continue
        lengths = sorted(series[enc])
        vals = [series[enc][n] for n in lengths]
        (line,) = ax.plot(lengths, [mean(v) for v in vals], marker="o", label=enc)
        ax.fill_between(
            lengths,
            [min(v) for v in vals],
            [max(v) for v in vals],
            color=line.get_color(),
            alpha=0.15,
        )
    train_max = max(r["train_max"] for r in rows if r["task"] == task)
    ax.axvline(train_max, color="gray", linestyle="--", label=f"train length {train_max}")
    ax.set(
        xlabel="evaluation length" if task != "lm" else "position (bucket end)",
        ylabel=metric.replace("_", " "),
        title=task,
    )
    ax.legend(fontsize=7, ncol=2)
    return _figure_uri(fig)


def _table(rows: list[dict[str, Any]], encodings: list[str], tasks: list[str]) -> dict[str, Any]:
    """Header (task, length) columns and per-encoding cells "mean ± std" over seeds."""
    columns: list[tuple[str, int]] = []
    for t in tasks:
        metric = "loss" if t == "lm" else "exact_match"
        columns += [
            (t, n)
            for n in sorted({r["length"] for r in rows if r["task"] == t and r["metric"] == metric})
        ]
    cells = []
    for enc in encodings:
        row = []
        for t, n in columns:
            metric = "loss" if t == "lm" else "exact_match"
            v = _series(rows, t, metric).get(enc, {}).get(n, [])
            row.append(f"{mean(v):.2f} ± {pstdev(v):.2f}" if v else "–")
        cells.append((enc, row))
    return {"columns": columns, "rows": cells}


def _attention_sections(
    runs: list[RunConfig], stored: list[dict[str, Any]], encodings: list[str]
) -> list[dict[str, Any]]:
    """Per encoding, maps of its first stored run (first task, lowest seed)."""
    ckpt = {r["key"]: r["checkpoint"] for r in stored if r["checkpoint"]}
    sections = []
    for enc in encodings:
        mine = sorted(
            (r for r in runs if r.encoding == enc and r.key() in ckpt), key=lambda r: (0, r.seed)
        )
        if mine and Path(ckpt[mine[0].key()]).is_file():
            sections.append(_attention_section(mine[0], ckpt[mine[0].key()]))
    return sections


def _attention_section(cfg: RunConfig, checkpoint: str) -> dict[str, Any]:
    import matplotlib.pyplot as plt
    import torch

    from .attention_maps import attention_maps, mean_distance
    from .train import load_model

    model = load_model(cfg, checkpoint)
    task = cfg.task.build()
    n = task.train_len[1]
    lengths = [n, 2 * n]
    maps, dist = [], []
    for length in lengths:
        batch = task.sample(np.random.default_rng([7, length]), 16, length, split="eval")
        tokens = torch.from_numpy(batch.tokens[:, :-1])
        probs = attention_maps(model.net, tokens)  # per layer (B, H, T, T)
        maps.append([p[0].mean(0).numpy() for p in probs])  # first sample, mean over heads
        dist.append([mean_distance(p) for p in probs])
    n_layers = len(maps[0])
    fig, axes = plt.subplots(n_layers, 2, figsize=(6.0, 2.9 * n_layers), squeeze=False)
    for col, length in enumerate(lengths):
        for layer in range(n_layers):
            ax = axes[layer][col]
            ax.imshow(maps[col][layer], cmap="viridis", vmin=0.0)
            ax.set_title(f"layer {layer}, n = {length}", fontsize=8)
            ax.set(xlabel="key", ylabel="query")
    fig.suptitle(
        f"{cfg.encoding} on {cfg.task.name} (seed {cfg.seed}), mean over heads", fontsize=9
    )
    fig.tight_layout()
    return {
        "encoding": cfg.encoding,
        "task": cfg.task.name,
        "figure": _figure_uri(fig),
        "lengths": lengths,
        "distance": list(zip(range(n_layers), *dist, strict=False)),
    }
