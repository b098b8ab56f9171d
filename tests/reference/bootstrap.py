"""Percentile bootstrap of the mean (Efron & Tibshirani 1993, ch. 13), written out by hand in
float64: one resample at a time, ``math.fsum`` means, and the percentile by linear
interpolation between order statistics (numpy's default "linear" method, Hyndman & Fan's
type 7)."""

from __future__ import annotations

import itertools
import math

import numpy as np


def percentile(sorted_values: list[float], q: float) -> float:
    """Type-7 quantile ``q`` in [0, 1] of ascending ``sorted_values``."""
    h = (len(sorted_values) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def bootstrap(values: list[float], idx: np.ndarray, level: float) -> tuple[float, float]:
    """[lo, hi] from the resample indices ``idx`` (R, n), drawn by the caller."""
    means = sorted(math.fsum(values[int(i)] for i in row) / len(values) for row in idx)
    alpha = (1.0 - level) / 2.0
    return percentile(means, alpha), percentile(means, 1.0 - alpha)


def exact_distribution(values: list[float]) -> list[tuple[float, float]]:
    """Every one of the n^n equally likely resamples: (mean, probability), ascending by mean."""
    n = len(values)
    weight = 1.0 / n**n
    means = [math.fsum(c) / n for c in itertools.product(values, repeat=n)]
    return [(m, weight) for m in sorted(means)]


def exact_quantile(dist: list[tuple[float, float]], q: float) -> float:
    """Smallest mean whose cumulative probability reaches ``q``."""
    total = 0.0
    for m, p in dist:
        total += p
        if total >= q - 1e-12:
            return m
    return dist[-1][0]
