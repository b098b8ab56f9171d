"""Tasks on 2-D grids of n x n cells, for encodings of (row, column) positions and their
extrapolation to higher resolution: train on 8 x 8 grids, evaluate on 12 x 12 and 16 x 16
(Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", ECCV 2024,
arXiv:2403.13298: RoPE-Mixed against axial RoPE and absolute tables at resolutions above
training's)."""

from __future__ import annotations

import math

import numpy as np

from .base import FIRST, MARK, Batch, Split, Task


class GridCross(Task):
    """Is the target in the marked cell's row or column? An encoder reads an n x n grid in
    raster order (length n = the grid's side, n² tokens): one cell holds MARK, one the target
    symbol (the first task symbol), every other cell a random distractor (the other
    ``n_symbols - 1``). Label 1 when the target shares the mark's row or column (a uniform cell
    of the 2(n - 1) on the cross), 0 when it lies elsewhere (a uniform cell of the (n - 1)²
    off it); labels drawn independently, so chance is 0.5. The features of the MARK cell feed
    the head (``readout = "mark"``, the query is about that cell).

    Both classes hold the same tokens (one MARK, one target, iid distractors), so only
    positions tell them apart: without positions (NoPE) the task is at chance, exactly. Grid
    encodings read (row, column) from ``posenc.grid_positions`` (``rope_2d``, ``rope_mixed``,
    ``sincos_2d``, ``learned_2d``: its table, trained at the training grid, is resampled to a
    larger evaluation grid as ViTs do); a 1-D encoding reads the raster index, where a row is
    ``n`` positions long and so changes with the resolution.

    n=3, T = target, M = MARK, s = distractors:

        s M s
        s s s   -> 0        s M s
        T s s               s s s   -> 1 (same column)
                            s T s
    """

    name = "grid_cross"
    kind = "classify"
    source = (
        "posenc's own; resolution extrapolation as Heo et al. 2024, 'Rotary Position Embedding "
        "for Vision Transformer' (ECCV 2024): train 8x8, evaluate 12x12, 16x16"
    )
    axes = 2
    readout = "mark"
    min_len = 2
    default_symbols = 8
    eval_factors = (1.0, 1.5, 2.0)

    @property
    def default_train_len(self) -> tuple[int, int]:
        return (8, 8)

    @property
    def n_classes(self) -> int:
        return 2

    @property
    def chance(self) -> float:
        return 0.5

    def check_length(self, n: int) -> None:
        super().check_length(n)
        if self.n_symbols < 2:
            raise ValueError(
                f"{self.name}: needs the target and at least one distractor, n_symbols >= 2, "
                f"got {self.n_symbols}"
            )

    def seq_len(self, n: int) -> int:
        return n * n

    def grid(self, seq_len: int) -> tuple[int, int]:
        """(rows, columns) of a sample of ``seq_len`` tokens. Raises ValueError when
        ``seq_len`` is not the square of a side the task makes."""
        side = math.isqrt(seq_len) if seq_len >= 0 else 0
        if side * side != seq_len or side < self.min_len:
            raise ValueError(
                f"{self.name}: a sample is an n x n grid, n >= {self.min_len}, so n² tokens; "
                f"got {seq_len} tokens"
            )
        return (side, side)

    def _sample(self, rng: np.random.Generator, batch: int, n: int, split: Split) -> Batch:
        target = FIRST
        x = rng.integers(FIRST + 1, FIRST + self.n_symbols, size=(batch, n, n))  # distractors
        labels = rng.integers(0, 2, size=batch)
        my, mx = rng.integers(0, n, size=batch), rng.integers(0, n, size=batch)
        # on the cross: k-th of the 2(n-1) cells sharing a row or column with the mark
        k = rng.integers(0, 2 * (n - 1), size=batch)
        along_row = k < n - 1  # same row, another column
        other = k % (n - 1)
        on_y = np.where(along_row, my, other + (other >= my))
        on_x = np.where(along_row, other + (other >= mx), mx)
        # off the cross: a uniform (row, column) with row != my and column != mx
        oy, ox = rng.integers(0, n - 1, size=batch), rng.integers(0, n - 1, size=batch)
        off_y, off_x = oy + (oy >= my), ox + (ox >= mx)
        ty, tx = np.where(labels == 1, on_y, off_y), np.where(labels == 1, on_x, off_x)
        rows = np.arange(batch)
        x[rows, my, mx] = MARK
        x[rows, ty, tx] = target
        return Batch(x.reshape(batch, n * n).astype(np.int64), labels=labels.astype(np.int64))
