"""Pictures of grid encodings (images, video, M-RoPE): how similar one patch looks to every other
patch of the grid (Heo et al. 2024, arXiv:2403.13298, fig. 2), and which axis turns each rotary
pair (M-RoPE's ``mrope_section``, Wang et al. 2024, arXiv:2409.12191)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import functional as PF
from ..analysis.subjects import (
    evaluating,
    geometry_attr,
    head_shape,
    is_additive,
    is_rotary,
    position_axes,
    resolve,
)
from ..encodings.base import PositionalEncoding
from ._style import figure_axes, outside_legend, shared_scale, styled, unsupported

#: Axis names by the number of axes an encoding reads.
AXIS_NAMES = {2: ("row y", "column x"), 3: ("t", "h (row)", "w (column)")}


def is_grid(pe: PositionalEncoding) -> bool:
    """True for an encoding of grid positions that adds or rotates (``capabilities.axes`` > 1)."""
    return position_axes(pe) > 1 and (is_additive(pe) or is_rotary(pe))


def has_pair_axes(pe: PositionalEncoding) -> bool:
    """True for an axial grid RoPE (rope_2d, rope_3d, mrope): each pair follows one axis."""
    return isinstance(getattr(pe, "axis_of_pair", None), torch.Tensor)


def patch_similarity(
    pe: PositionalEncoding | str,
    *,
    grid: tuple[int, int] = (9, 9),
    patch: tuple[int, int] | None = None,
) -> np.ndarray:
    """Cosine similarity between what the encoding attaches to one patch (default: the centre)
    and to every cell of a ``grid`` (rows, columns): the table rows PE[p] of an additive
    encoding; for a rotary one, R_p u with u = (1, 0) in every pair (mean over heads), so the
    similarity is the mean over pairs of cos(angle_p(cell) - angle_p(patch)). Video and M-RoPE
    encodings are read on frame t = 0.

    Shapes: returns (rows, columns).
    Raises: ValueError for an encoding of 1-D positions or one that neither adds nor rotates,
    a grid that is not two positive ints, or a patch off the grid.
    """
    pe = resolve(pe)
    rows, cols = PF.check_grid(grid, "grid")
    if not is_grid(pe):
        raise unsupported(
            pe, "reads no grid positions", "a grid encoding (rope_2d, sincos_2d, ...)"
        )
    y0, x0 = (rows // 2, cols // 2) if patch is None else patch
    if not (0 <= y0 < rows and 0 <= x0 < cols):
        raise ValueError(f"patch must lie on the {rows}x{cols} grid, got {(y0, x0)}")
    A = position_axes(pe)
    cells = torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), -1)
    pos = torch.cat([torch.zeros(rows * cols, A - 2, dtype=torch.long), cells.reshape(-1, 2)], 1)
    features = _features(pe, pos)  # (H, N, F)
    unit = features / features.norm(dim=-1, keepdim=True)
    sim = (unit * unit[:, y0 * cols + x0, None]).sum(-1).mean(0)  # (N,)
    return sim.reshape(rows, cols).numpy()


def _features(pe: PositionalEncoding, pos: torch.Tensor) -> torch.Tensor:
    """(H, N, F): additive table rows (H = 1) or rotated unit vectors per head at pos (N, A)."""
    with torch.no_grad(), evaluating(pe):
        if is_additive(pe):
            dim = int(geometry_attr(pe, "dim", 0))
            return pe.embed(torch.zeros(1, len(pos), dim, dtype=torch.float64), pos).double()
        H, D = head_shape(pe)
        unit = torch.zeros(D, dtype=torch.float64)
        P = D // 2
        interleaved = getattr(pe, "layout", "half") == "interleaved"
        unit[torch.arange(P) * (2 if interleaved else 1)] = 1.0  # (1, 0) in every pair
        x = unit.expand(1, H, len(pos), D)  # (B, H, N, D)
        rotated, _ = pe.rotate(x, x, pos, pos)
        return rotated[0]


@styled
def grid_similarity(
    encodings: Sequence[PositionalEncoding | str],
    *,
    grid: tuple[int, int] = (9, 9),
    patch: tuple[int, int] | None = None,
) -> Figure:
    """One patch's similarity to every other patch of the grid, per encoding (the centre patch
    marked; frame 0 for video and M-RoPE): cosine of the table rows, or of a unit vector
    rotated to each cell (mean over heads), on one colour scale."""
    pes = [resolve(e) for e in encodings]
    if not pes:
        raise ValueError("grid_similarity needs at least one encoding, got none")
    images = np.stack([patch_similarity(pe, grid=grid, patch=patch) for pe in pes])
    fig = Figure(figsize=(2.8 * len(pes) + 0.9, 2.9), layout="constrained")
    axes = list(fig.subplots(1, len(pes), squeeze=False).ravel())
    shared_scale(axes, images, label="cosine similarity", vmin=-1.0, vmax=1.0)
    rows, cols = images.shape[1:]
    y0, x0 = (rows // 2, cols // 2) if patch is None else patch
    for ax, pe in zip(axes, pes, strict=True):
        ax.plot([x0], [y0], marker="x", color="black", markersize=8)
        ax.set(title=pe.name, xlabel="column x", ylabel="row y")
    fig.suptitle(f"Similarity of patch {(y0, x0)} to every patch of a {rows}x{cols} grid")
    return fig


@styled
def pair_sections(pe: PositionalEncoding | str, *, ax: Axes | None = None) -> Figure:
    """Which axis turns each rotary pair, and how fast: the wavelength 2π/θ_p of pair p (log
    scale), coloured by its axis (M-RoPE's ``mrope_section``: contiguous t, h, w blocks in
    Qwen2-VL, interleaved in Qwen3-VL; axial RoPE: one block per axis)."""
    pe = resolve(pe)
    if not has_pair_axes(pe):
        raise unsupported(
            pe, "has no per-pair axes", "an axial grid RoPE (rope_2d, rope_3d, mrope)"
        )
    axis = pe.axis_of_pair.cpu().numpy()
    wave = PF.wavelengths(pe.inv_freq64.double().cpu().numpy())
    A = position_axes(pe)
    names = AXIS_NAMES.get(A, tuple(f"axis {a}" for a in range(A)))
    fig, ax = figure_axes(ax, (7.0, 3.4))
    pairs = np.arange(len(axis))
    for a, name in enumerate(names):
        mine = axis == a
        ax.vlines(pairs[mine], 1.0, wave[mine], color=f"C{a}", linewidth=2.0)
        ax.scatter(pairs[mine], wave[mine], color=f"C{a}", s=12, label=f"{name} ({mine.sum()})")
    ax.set_yscale("log")
    ax.set(
        xlabel="rotary pair p",
        ylabel="wavelength 2π/θ_p (positions)",
        title=f"{pe.name}: the axis of each pair",
    )
    outside_legend(ax)
    return fig
