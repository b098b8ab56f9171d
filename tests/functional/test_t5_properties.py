"""T5 relative buckets (Raffel et al. 2020, sec. 2.1): for every valid configuration, buckets
lie in [0, num_buckets), small distances get one bucket each, and the bucket never decreases
as the distance grows (per direction when bidirectional)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc import functional as PF
from tests.functional._properties import BACKENDS, fast, to_backend, to_numpy
from tests.reference import bias as ref

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
BIG = 2**40  # offsets far past any max_distance (int64 positions of a long stream)


@st.composite
def configs(draw: st.DrawFn) -> tuple[bool, int, int, int]:
    """(bidirectional, num_buckets, max_distance, max_exact) accepted by check_t5_buckets."""
    bidirectional = draw(st.booleans())
    num_buckets = draw(st.integers(4 if bidirectional else 2, 128))
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    max_exact = per_direction // 2
    max_distance = draw(st.integers(max_exact + 1, 4096))
    got = PF.check_t5_buckets(
        bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert got == max_exact
    return bidirectional, num_buckets, max_distance, max_exact


def buckets(rel: np.ndarray, config: tuple[bool, int, int, int], backend: str) -> np.ndarray:
    bidirectional, num_buckets, max_distance, _ = config
    out = PF.t5_relative_bucket(
        to_backend(np.asarray(rel, dtype=np.int64), backend),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    assert isinstance(out, torch.Tensor) == (backend == "torch")
    out = to_numpy(out)
    assert out.dtype == np.int64 and out.shape == np.shape(rel)
    return out


def distances(config: tuple[bool, int, int, int], extra: list[int]) -> np.ndarray:
    """0, 1, ..., 2·max_distance + 2, then ``extra`` (>= 0), sorted: every bucket boundary and
    the saturated tail."""
    return np.unique(np.concatenate([np.arange(2 * config[2] + 3), np.abs(extra)]))


extras = st.lists(st.integers(0, BIG), max_size=8)


@fast(40)
@given(config=configs(), rel=st.lists(st.integers(-BIG, BIG), min_size=1, max_size=16))
def test_buckets_lie_in_range(
    config: tuple[bool, int, int, int], rel: list[int], backend: str
) -> None:
    """0 <= bucket < num_buckets for any offset; the causal form (num_buckets per direction)
    uses only [0, num_buckets), the bidirectional one puts keys after the query (r > 0) in
    [N/2, N) (N/2 = num_buckets // 2) and the others in [0, N/2)."""
    bidirectional, num_buckets, _, _ = config
    got = buckets(np.array(rel), config, backend)
    assert (got >= 0).all() and (got < num_buckets).all()
    if bidirectional:
        half = num_buckets // 2
        after = np.array(rel) > 0
        assert (got[after] >= half).all() and (got[after] < 2 * half).all()
        assert (got[~after] < half).all()


@fast(40)
@given(config=configs(), extra=extras)
def test_bucket_never_decreases_with_distance(
    config: tuple[bool, int, int, int], extra: list[int], backend: str
) -> None:
    """For distances n = 0, 1, 2, ... (and far ones), the bucket of the key n positions before
    the query, and (bidirectional) n positions after, is non-decreasing in n, and saturates at
    the direction's last bucket from max_distance on. Causal: keys after the query (r > 0) all
    fall in bucket 0."""
    bidirectional, num_buckets, max_distance, _ = config
    n = distances(config, extra)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    for sign in (-1, 1) if bidirectional else (-1,):  # r = key - query: -n is a past key
        got = buckets(sign * n, config, backend)
        assert (np.diff(got) >= 0).all(), (sign, n[1:][np.diff(got) < 0])
        last = per_direction - 1 + (per_direction if sign > 0 else 0)
        assert (got[n >= max_distance] == last).all()
    if not bidirectional:
        assert (buckets(n[n > 0], config, backend) == 0).all()


@fast(40)
@given(config=configs())
def test_small_distances_get_their_own_bucket(
    config: tuple[bool, int, int, int], backend: str
) -> None:
    """Distances n < max_exact (half a direction's buckets) map to bucket n (past keys) and
    N/2 + n (future keys, bidirectional; n >= 1): distinct, exact buckets. Distances
    n >= max_exact map to max_exact or above."""
    bidirectional, num_buckets, max_distance, max_exact = config
    n = np.arange(2 * max_distance + 3)
    small = n < max_exact
    past = buckets(-n, config, backend)
    np.testing.assert_array_equal(past[small], n[small])
    assert (past[~small] >= max_exact).all()
    if bidirectional:
        future = buckets(n[1:], config, backend)
        np.testing.assert_array_equal(future[small[1:]], num_buckets // 2 + n[1:][small[1:]])
        assert (future[~small[1:]] >= num_buckets // 2 + max_exact).all()


@fast(25)
@given(config=configs(), rel=st.lists(st.integers(-5000, 5000), min_size=1, max_size=32))
def test_buckets_match_the_float64_reference_off_boundaries(
    config: tuple[bool, int, int, int], rel: list[int], backend: str
) -> None:
    """Equal to mesh-tensorflow's formula (tests/reference/bias.py, float64 logs) except where
    the scaled log is within 1e-4 of an integer (the reference's ``t5_on_boundary``): T5 takes
    n/E and the log in float32 (~6e-8 relative each), which moves the scaled log by ~1e-5 for
    these sizes, so only near-integers may land one bucket off (then by exactly one)."""
    bidirectional, num_buckets, max_distance, _ = config
    got = buckets(np.array(rel), config, backend)
    args = (bidirectional, num_buckets, max_distance)
    for r, g in zip(rel, got, strict=True):
        expected = ref.t5_bucket(r, *args)
        if ref.t5_on_boundary(r, *args):
            assert abs(int(g) - expected) <= 1
        else:
            assert g == expected, (r, g, expected)


def test_the_most_negative_int64_offset_lands_in_range(backend: str) -> None:
    """The range property at the one offset hypothesis above does not draw: r = -2^63 (int64's
    minimum, whose absolute value does not exist in int64: it gave bucket -2^63)."""
    got = buckets(np.array([-(2**63)]), (True, 32, 128, 8), backend)
    assert 0 <= got[0] < 32
