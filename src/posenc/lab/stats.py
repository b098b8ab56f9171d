"""Statistics over seeds: a bootstrap interval of the mean, separation of two intervals, and
rankings in which overlapping intervals tie.

Interval: the percentile bootstrap of the mean (Efron & Tibshirani 1993, "An Introduction to
the Bootstrap", ch. 13). ``N_RESAMPLES`` = 10 000 resamples of the n values with replacement,
drawn from numpy's PCG64 seeded with ``BOOTSTRAP_SEED`` (the same draws on every machine); the
95% interval runs from the 2.5th to the 97.5th percentile (linear interpolation) of the
resample means. With 3 seeds it is the seeds' min..max: resampling one seed three times has
probability 1/27 > 2.5% at each end; with 5 it narrows. One value: the interval is that value.
Fewer than ``MIN_SEEDS`` (2) values give no interval worth comparing: such a cell is shown but
neither ranked nor used in a finding.

Separation: interval a is above b when a.lo > b.hi + ``EPS``; otherwise they overlap (a tie).
Ranking (higher is better; for a loss, lower): an entry's rank is 1 + the number of entries
whose interval is above its own; the winners are the entries of rank 1, those nothing beats.
Two entries whose intervals overlap never beat each other, whatever their means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SEED = 20_231_031
N_RESAMPLES = 10_000
LEVEL = 0.95
MIN_SEEDS = 2
#: Separation margin: intervals closer than this overlap (float noise never separates them).
EPS = 1e-9


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values with its bootstrap interval [lo, hi]."""

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def comparable(self) -> bool:
        """Enough values (``MIN_SEEDS``) for the interval to take part in a comparison."""
        return self.n >= MIN_SEEDS

    def above(self, other: Interval) -> bool:
        """Entirely above ``other`` (separated by more than ``EPS``)."""
        return self.lo > other.hi + EPS

    def text(self, digits: int = 2) -> str:
        """``0.93 [0.88, 0.97]``; a single value without brackets."""
        if self.n == 1:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def bootstrap_interval(
    values: Sequence[float] | np.ndarray,
    *,
    level: float = LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """Percentile bootstrap interval of the mean of ``values`` (float64; see the module doc).

    Raises: ValueError for no values, a non-finite value, values that are not 1-D, a level
    outside (0, 1) or fewer than 1 resample.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"values must be a non-empty 1-D sequence, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"values must be finite, got {x.tolist()}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    mean = float(x.mean())
    if x.size == 1:
        return Interval(mean, mean, mean, 1)
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_resamples, x.size))  # (R, n)
    means = x[idx].mean(axis=1)  # (R,)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return Interval(mean, float(lo), float(hi), int(x.size))


def paired_difference(a: Mapping[int, float], b: Mapping[int, float]) -> Interval | None:
    """Bootstrap interval of mean(a[s] - b[s]) over the seeds ``s`` both have (None: none)."""
    seeds = sorted(set(a) & set(b))
    return bootstrap_interval([a[s] - b[s] for s in seeds]) if seeds else None


def compare(a: Interval, b: Interval, *, higher_is_better: bool = True) -> int:
    """+1 if a is better than b (separated), -1 if worse, 0 if their intervals overlap."""
    better, worse = (a, b) if higher_is_better else (b, a)
    return 1 if better.above(worse) else -1 if worse.above(better) else 0


def rank(cells: Mapping[str, Interval], *, higher_is_better: bool = True) -> dict[str, int]:
    """name -> rank for the comparable cells (see the module doc); others are left out."""
    ok = {k: v for k, v in cells.items() if v.comparable}
    return {
        k: 1 + sum(compare(o, v, higher_is_better=higher_is_better) > 0 for o in ok.values())
        for k, v in ok.items()
    }
