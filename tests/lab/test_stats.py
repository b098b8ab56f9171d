"""Bootstrap intervals against a float64 reference, separation and rankings with ties."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.lab.stats import (
    BOOTSTRAP_SEED,
    N_RESAMPLES,
    Interval,
    bootstrap_interval,
    compare,
    paired_difference,
    rank,
)
from tests.reference.bootstrap import bootstrap, exact_distribution, exact_quantile


@pytest.mark.parametrize(
    "values", [[0.2, 0.9, 0.55], [1.0, 0.0, 0.25, 0.5, 0.75], [0.1, 0.3], [0.91, 0.93, 0.97, 0.88]]
)
def test_bootstrap_matches_the_hand_written_float64_reference(values: list[float]) -> None:
    idx = np.random.default_rng(BOOTSTRAP_SEED).integers(0, len(values), (N_RESAMPLES, len(values)))
    lo, hi = bootstrap(values, idx, 0.95)
    got = bootstrap_interval(values)
    assert got.n == len(values)
    assert got.mean == pytest.approx(sum(values) / len(values), abs=1e-15)
    assert (got.lo, got.hi) == pytest.approx((lo, hi), abs=1e-12)


def test_bootstrap_agrees_with_the_exact_bootstrap_distribution() -> None:
    """All 5^5 resamples enumerated: the Monte Carlo percentiles land near the exact ones."""
    values = [0.12, 0.47, 0.5, 0.81, 0.95]
    dist = exact_distribution(values)
    got = bootstrap_interval(values)
    assert got.lo == pytest.approx(exact_quantile(dist, 0.025), abs=0.02)
    assert got.hi == pytest.approx(exact_quantile(dist, 0.975), abs=0.02)


def test_three_seeds_give_their_range_and_one_value_itself() -> None:
    """With 3 values each extreme resample has probability 1/27 > 2.5%: the interval is the
    min..max (documented); one value: a zero-width interval that is not comparable."""
    iv = bootstrap_interval([0.4, 0.7, 0.9])
    assert (iv.lo, iv.hi) == pytest.approx((0.4, 0.9))
    one = bootstrap_interval([0.3])
    assert (one.lo, one.mean, one.hi, one.comparable) == (0.3, 0.3, 0.3, False)
    assert one.text() == "0.30" and iv.text() == "0.67 [0.40, 0.90]"


def test_bootstrap_is_seeded_and_checks_its_input() -> None:
    assert bootstrap_interval([0.1, 0.5, 0.6, 0.9]) == bootstrap_interval([0.1, 0.5, 0.6, 0.9])
    with pytest.raises(ValueError, match="non-empty 1-D"):
        bootstrap_interval([])
    with pytest.raises(ValueError, match="finite"):
        bootstrap_interval([0.1, float("nan")])
    with pytest.raises(ValueError, match="level"):
        bootstrap_interval([0.1, 0.2], level=1.5)


def _iv(lo: float, hi: float, n: int = 3) -> Interval:
    return Interval((lo + hi) / 2, lo, hi, n)


def test_compare_needs_separated_intervals() -> None:
    assert compare(_iv(0.6, 0.8), _iv(0.1, 0.5)) == 1
    assert compare(_iv(0.1, 0.5), _iv(0.6, 0.8)) == -1
    assert compare(_iv(0.4, 0.8), _iv(0.1, 0.5)) == 0  # overlap: a tie, whatever the means
    assert compare(_iv(0.5, 0.8), _iv(0.1, 0.5)) == 0  # touching ends are not separated
    assert compare(_iv(1.2, 1.3), _iv(2.0, 3.0), higher_is_better=False) == 1  # a loss


def test_ranking_ties_overlapping_intervals() -> None:
    cells = {
        "a": _iv(0.80, 0.95),
        "b": _iv(0.70, 0.85),  # overlaps a: tied first
        "c": _iv(0.30, 0.75),  # below a only: rank 2 (b overlaps it)
        "d": _iv(0.00, 0.10),  # below a, b and c: rank 4
        "e": _iv(0.99, 0.99, n=1),  # one seed: not ranked
    }
    assert rank(cells) == {"a": 1, "b": 1, "c": 2, "d": 4}
    assert rank(cells, higher_is_better=False) == {"d": 1, "c": 2, "b": 2, "a": 3}


def test_paired_difference_uses_common_seeds_only() -> None:
    diff = paired_difference({0: 0.9, 1: 0.8, 2: 0.7}, {0: 0.5, 1: 0.5, 3: 0.0})
    assert diff is not None and diff.n == 2
    assert diff.mean == pytest.approx(0.35)
    assert paired_difference({0: 1.0}, {1: 1.0}) is None
