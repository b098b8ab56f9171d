"""Regenerate docs/overview.png (the README figure): ``python docs/overview.py``."""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
from matplotlib.figure import Figure

import posenc
from posenc.plots import encoding_heatmap, extension_scales, qk_vs_distance
from posenc.plots._style import STYLE


def main() -> None:
    with mpl.rc_context(STYLE):  # type: ignore[arg-type]
        fig = Figure(figsize=(15, 3.9), layout="constrained")
        table, scores, scales = fig.subplots(1, 3)
        encoding_heatmap("sinusoidal", n_positions=96, ax=table)
        rotary = [posenc.build(name, head_dim=64) for name in ("rope", "xpos")]
        qk_vs_distance(rotary, n_distances=512, ax=scores)
        extension_scales(ax=scales)
        fig.savefig(Path(__file__).with_suffix(".png"), dpi=80)


if __name__ == "__main__":
    main()
