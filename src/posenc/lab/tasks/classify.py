"""Classification tasks for an encoder (bidirectional attention, mean-pooled features): posenc's
own, kept beside the decoder tasks of the literature (``sequence``)."""

from __future__ import annotations

import numpy as np

from .base import FIRST, MARK, Batch, Split, Task, distinct_symbols


class AscendingEncoder(Task):
    """Are n distinct symbols in ascending order? The encoder form of ``ascending``, posenc's
    earlier default: an encoder with mean pooling, easy negatives. Label 1 rows are sorted;
    label 0 rows are a random shuffle of them (one adjacent swap when the shuffle happens to be
    sorted); labels drawn independently. The two classes hold the same set of symbols, so only
    order tells them apart: without positions (NoPE in an encoder) the task is at chance. A
    symmetric bias (ALiBi, Kerple, FIRE in their encoder forms) gives a row and its reverse the
    same mean-pooled features: it tells monotone rows from shuffled ones, never ascending from
    descending (which random shuffles rarely draw).

    n=4:  s1 s3 s5 s8 -> 1;   s5 s1 s8 s3 -> 0
    """

    name = "ascending_encoder"
    kind = "classify"
    source = "posenc's own (no published split); the decoder form is 'ascending'"
    min_len = 2
    default_symbols = 64
    distinct = "length {n} needs {n} distinct tokens"

    @property
    def n_classes(self) -> int:
        return 2

    @property
    def chance(self) -> float:
        return 0.5

    def _sample(self, rng: np.random.Generator, batch: int, n: int, split: Split) -> Batch:
        x = np.sort(distinct_symbols(rng, batch, n, self.n_symbols), axis=1)  # (B, n)
        labels = rng.integers(0, 2, size=batch)
        shuffled = np.take_along_axis(x, np.argsort(rng.random((batch, n)), axis=1), axis=1)
        still_sorted = (np.diff(shuffled, axis=1) > 0).all(axis=1)
        shuffled[still_sorted] = x[still_sorted][:, _adjacent_swap(n, rng)]
        return Batch(
            np.where(labels[:, None] == 1, x, shuffled).astype(np.int64),
            labels=labels.astype(np.int64),
        )


def _adjacent_swap(n: int, rng: np.random.Generator) -> np.ndarray:
    """Index permutation of 0..n-1 swapping one random adjacent pair."""
    order = np.arange(n)
    i = int(rng.integers(0, n - 1))
    order[i], order[i + 1] = i + 1, i
    return order


class Offset(Task):
    """Two MARK tokens among n random symbols: predict their distance j - i.

    Distances are drawn from 1..min(n, max train length) - 1 at every length, so longer inputs
    ask for the same distances at absolute positions never seen in training.

    n=6, d=3:  s4 MARK s9 s0 MARK s2 -> 3
    """

    name = "offset"
    kind = "classify"
    source = "posenc's own (no published split)"
    min_len = 2

    @property
    def n_classes(self) -> int:
        return self.train_len[1]

    @property
    def chance(self) -> float:
        """1 / (max train length - 1): the distances asked at lengths from the longest
        training length on (shorter inputs ask fewer)."""
        return 1.0 / max(self.train_len[1] - 1, 1)

    def _sample(self, rng: np.random.Generator, batch: int, n: int, split: Split) -> Batch:
        x = rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, n))
        d = rng.integers(1, min(n, self.train_len[1]), size=batch)  # distance >= 1
        i = (rng.random(batch) * (n - d)).astype(np.int64)  # first mark in 0..n-d-1
        rows = np.arange(batch)
        x[rows, i] = MARK
        x[rows, i + d] = MARK
        return Batch(x.astype(np.int64), labels=d.astype(np.int64))
