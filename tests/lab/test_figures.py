"""The lab report's figures: legends outside the data, interval bands, chance line, the
metric's name, attention maps with integer ticks and a colour bar."""

from __future__ import annotations

import numpy as np
from matplotlib.collections import PolyCollection

from posenc.lab.figures import attention_figure, curve_figure
from posenc.lab.results import Run, panels


def _runs(task: str, enc: str, beyond: list[float], at_train: float = 1.0) -> list[Run]:
    cfg = {"task": {"name": task, "train_len": [2, 8], "eval_lens": [8, 16]}}
    return [
        Run(
            f"{enc}{s}",
            enc,
            task,
            s,
            8,
            {("exact_match", 8): at_train, ("exact_match", 16): b},
            cfg,
        )
        for s, b in enumerate(beyond)
    ]


def test_curve_figure_legend_outside_bands_chance_and_metric_name() -> None:
    runs = _runs("offset", "rope", [0.5, 0.6, 0.7]) + _runs("offset", "nope", [0.1] * 3, 0.2)
    (panel,) = panels(runs)
    fig = curve_figure(panel, panel.encodings)
    fig.canvas.draw()
    (ax,) = fig.axes
    legend = ax.get_legend()
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # right of the axes
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == [
        "rope",
        "nope: did not learn (3 of 3 runs)",
        "longest training length (8)",
        "chance (0.14)",  # offset trained to 8: 7 distances
    ]
    assert ax.get_ylabel() == "exact match" and ax.get_xlabel() == "evaluation length"
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]  # rope only
    ys = band.get_paths()[0].vertices[:, 1]
    assert np.isclose(ys.max(), 1.0) and np.isclose(ys.min(), 0.5)  # [1, 1] at 8, [0.5, 0.7]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "16"]


def test_attention_figure_has_integer_ticks_real_lengths_and_a_colour_bar() -> None:
    maps = [[np.full((5, 5), 0.2)], [np.full((9, 9), 1 / 9)]]  # one layer, lengths 4 and 8
    fig = attention_figure(maps, [4, 8], "rope on copy")
    fig.canvas.draw()
    *panels_, colour_bar = fig.axes
    assert [a.get_title() for a in panels_] == [
        "layer 0, length 4: 5 tokens",
        "layer 0, length 8: 9 tokens",
    ]
    assert colour_bar.get_ylabel() == "attention weight (mean over heads)"
    for ax in panels_:
        ticks = ax.get_xticks()
        assert np.allclose(ticks, np.round(ticks)) and ax.get_xlabel() == "key position"


def test_a_task_no_run_learned_says_so() -> None:
    (panel,) = panels(_runs("offset", "nope", [0.1] * 3, 0.2))
    fig = curve_figure(panel, panel.encodings)
    assert [t.get_text() for t in fig.axes[0].texts] == ["no run passed the gate"]
    assert not fig.axes[0].collections  # no band, no curve
