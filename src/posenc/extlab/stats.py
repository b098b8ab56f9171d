"""Intervals over seeds: the percentile bootstrap of the mean (Efron & Tibshirani 1993, "An
Introduction to the Bootstrap", ch. 13).

``N_RESAMPLES`` resamples of the n values with replacement, drawn from numpy's PCG64 seeded
with ``BOOTSTRAP_SEED`` (the same draws on every machine); the 95% interval runs from the 2.5th
to the 97.5th percentile (linear interpolation) of the resample means. With 3 seeds it is
about the seeds' min..max. One value: the interval is that value (n = 1, not comparable).
The same definition as the lab's statistics of the [lab trust] issue, kept here until the two
are one module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SEED = 20_231_031
N_RESAMPLES = 10_000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values with its bootstrap interval [lo, hi]."""

    mean: float
    lo: float
    hi: float
    n: int

    def text(self, digits: int = 2) -> str:
        """``1.93 [1.88, 1.97]``; a single value without brackets."""
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
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples must be an int >= 1, got {n_resamples!r}")
    mean = float(x.mean())
    if x.size == 1:
        return Interval(mean, mean, mean, 1)
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_resamples, x.size))  # (R, n)
    means = x[idx].mean(axis=1)  # (R,)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return Interval(mean, float(lo), float(hi), int(x.size))


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> Interval | None:
    """Interval of mean(a[s] - b[s]) over the seeds ``s`` both have (None: no common seed)."""
    seeds = sorted(set(a) & set(b))
    return bootstrap_interval([a[s] - b[s] for s in seeds]) if seeds else None
