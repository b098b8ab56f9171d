"""The bootstrap interval against a float64 reference written from its definition."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc.lab.stats import BOOTSTRAP_SEED, bootstrap_interval, paired_difference


def _reference(values: list[float], n_resamples: int, level: float) -> tuple[float, float]:
    """Percentile bootstrap by hand: the same seeded index draws, resample means summed in a
    Python loop, percentiles by linear interpolation between order statistics."""
    n = len(values)
    idx = np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(n_resamples, n))
    means = sorted(math.fsum(values[j] for j in row) / n for row in idx.tolist())

    def percentile(q: float) -> float:
        h = (len(means) - 1) * q
        lo = math.floor(h)
        return means[lo] + (h - lo) * (means[min(lo + 1, len(means) - 1)] - means[lo])

    alpha = (1 - level) / 2
    return percentile(alpha), percentile(1 - alpha)


@pytest.mark.parametrize("values", [[1.0, 2.0, 4.0], [0.3, 0.31, 0.29, 0.5, 0.1], [5.0, 5.0]])
@pytest.mark.parametrize("level", [0.95, 0.8])
def test_interval_equals_the_hand_written_bootstrap(values: list[float], level: float) -> None:
    got = bootstrap_interval(values, level=level, n_resamples=2000)
    lo, hi = _reference(values, 2000, level)
    assert got.mean == pytest.approx(math.fsum(values) / len(values), abs=1e-15)
    assert (got.lo, got.hi) == pytest.approx((lo, hi), abs=1e-12)
    assert min(values) <= got.lo <= got.mean <= got.hi <= max(values)
    assert got.n == len(values)


def test_one_value_and_pairs() -> None:
    one = bootstrap_interval([2.5])
    assert (one.mean, one.lo, one.hi, one.n) == (2.5, 2.5, 2.5, 1) and one.text() == "2.50"
    d = paired_difference({0: 3.0, 1: 5.0, 2: 1.0}, {0: 1.0, 1: 2.0, 7: 0.0})
    assert d is not None and d.n == 2 and d.mean == pytest.approx(2.5)
    assert paired_difference({0: 1.0}, {1: 1.0}) is None


@pytest.mark.parametrize(
    ("values", "kwargs", "match"),
    [
        ([], {}, "non-empty"),
        ([1.0, float("nan")], {}, "finite"),
        ([[1.0, 2.0]], {}, "1-D"),
        ([1.0, 2.0], {"level": 1.0}, "level"),
        ([1.0, 2.0], {"n_resamples": 0}, "n_resamples"),
    ],
)
def test_bad_input_is_refused(values: list, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bootstrap_interval(values, **kwargs)
