"""ALiBi (Press et al. 2022): the slope series for every head count, and a bias linear in the
offset i - j."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc import functional as PF
from tests.functional._properties import BACKENDS, EPS, fast, to_backend, to_numpy, xp_of
from tests.reference import bias as ref

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
heads = st.integers(1, 1024)
POS = 2**30  # positions; offsets stay exact integers in float64
position_lists = st.lists(st.integers(-POS, POS), min_size=1, max_size=6)


def slopes(n_heads: int, backend: str) -> np.ndarray:
    got = PF.alibi_slopes(n_heads, xp=xp_of(backend))
    assert isinstance(got, torch.Tensor) == (backend == "torch")
    got = to_numpy(got)
    assert got.dtype == np.float64 and got.shape == (n_heads,)
    return got


def bias(
    q: list[int], k: list[int], m: np.ndarray, backend: str, bidirectional: bool
) -> np.ndarray:
    q_pos, k_pos = (to_backend(np.asarray(p, dtype=np.int64), backend) for p in (q, k))
    out = to_numpy(PF.alibi_bias(q_pos, k_pos, to_backend(m, backend), bidirectional=bidirectional))
    assert out.shape == (len(m), len(q), len(k))
    return out


@fast(40)
@given(exponent=st.integers(0, 10))
def test_power_of_two_heads_get_the_geometric_series(exponent: int, backend: str) -> None:
    """H = 2^e: m_h = 2^(-8h/H), h = 1..H, a geometric series with start and ratio 2^(-8/H),
    ending at 2^-8 exactly. 8h/H is exact (H a power of two), so each slope is one pow within
    1 ulp; the comparison series ratio^h carries the rounding of ratio (EPS/2) times h <= H:
    rtol 2·EPS·H; a ratio of two slopes, 4 EPS."""
    H = 2**exponent
    m = slopes(H, backend)
    ratio = 2.0 ** (-8.0 / H)
    np.testing.assert_allclose(m, ratio ** np.arange(1, H + 1), rtol=2 * EPS * H)
    np.testing.assert_allclose(m[1:] / m[:-1], ratio, rtol=4 * EPS)
    assert math.isclose(m[0], ratio, rel_tol=2 * EPS) and m[-1] == 2.0**-8  # 2^-8: exact


@fast(60)
@given(n_heads=heads)
def test_other_head_counts_interleave_the_next_power_of_two(n_heads: int, backend: str) -> None:
    """M = 2^floor(log2 H) < H < 2M: the M slopes of M heads, then the odd-numbered slopes
    (h = 1, 3, 5, ...) of 2M heads, H - M of them (the official code's rule, also BLOOM's),
    as in the reference.
    Every slope is a power of two with an exact exponent: rtol 2 EPS."""
    M = 1 << (n_heads.bit_length() - 1)
    m = slopes(n_heads, backend)
    np.testing.assert_allclose(m[:M], slopes(M, backend), rtol=2 * EPS)
    np.testing.assert_allclose(m[M:], slopes(2 * M, backend)[0::2][: n_heads - M], rtol=2 * EPS)
    np.testing.assert_allclose(m, ref.alibi_slopes(n_heads), rtol=2 * EPS * n_heads)


@fast(60)
@given(n_heads=heads)
def test_slopes_are_distinct_and_between_two_to_minus_eight_and_one(
    n_heads: int, backend: str
) -> None:
    """0 < 2^-8 <= m_h < 1, every head its own slope; the first M fall strictly, then restart
    (the series is not monotone past M, as documented)."""
    m = slopes(n_heads, backend)
    assert (m >= 2.0**-8).all() and (m < 1.0).all()
    assert len(np.unique(m)) == n_heads
    M = 1 << (n_heads.bit_length() - 1)
    assert (np.diff(m[:M]) < 0).all() and (np.diff(m[M:]) < 0).all()
    log2 = -np.log2(m) * (2 * M) / 8  # the exponent as a multiple of 8/(2M): an integer
    np.testing.assert_allclose(log2, np.round(log2), rtol=0, atol=1e-9)


@fast(40)
@given(
    n_heads=st.integers(1, 40),
    q=position_lists,
    k=position_lists,
    mid=position_lists,
    shift=st.integers(-POS, POS),
    bidirectional=st.booleans(),
)
def test_bias_is_linear_in_the_offset(
    n_heads: int,
    q: list[int],
    k: list[int],
    mid: list[int],
    shift: int,
    bidirectional: bool,
    backend: str,
) -> None:
    """B[h, i, j] = -m_h·(i - j) (bidirectional: -m_h·|i - j|): it depends on i - j alone (shifting
    both positions changes nothing, bit for bit: the offset is the same integer, exact in
    float64 below 2^53), is 0 on the diagonal, and (causal form) is additive along a path,
    B(i, l) + B(l, j) = B(i, j). Each entry is one rounded product: additivity holds to
    EPS·(|B(i,l)| + |B(l,j)| + |B(i,j)|)."""
    m = slopes(n_heads, backend)
    b = bias(q, k, m, backend, bidirectional)
    offset = np.subtract.outer(q, k).astype(np.float64)
    expected = -m[:, None, None] * (np.abs(offset) if bidirectional else offset)
    np.testing.assert_array_equal(b, expected)  # one product per entry, same as ours
    moved = bias([p + shift for p in q], [p + shift for p in k], m, backend, bidirectional)
    np.testing.assert_array_equal(moved, b)
    np.testing.assert_array_equal(bias(q, q, m, backend, bidirectional).diagonal(0, 1, 2), 0.0)
    if not bidirectional:
        b_il, b_lj = bias(q, mid, m, backend, False), bias(mid, k, m, backend, False)
        for l_idx in range(len(mid)):
            total = b_il[:, :, l_idx, None] + b_lj[:, None, l_idx, :]
            tol = EPS * (np.abs(b_il[:, :, l_idx, None]) + np.abs(b_lj[:, None, l_idx, :]))
            assert (np.abs(total - b) <= tol + EPS * np.abs(b)).all()


def test_slope_exponents_are_the_published_ones(backend: str) -> None:
    """A worked case of the rule above: H = 12 -> 2^-1 .. 2^-8 (M = 8), then 2^-0.5, 2^-1.5,
    2^-2.5, 2^-3.5 (the odd slopes of 16 heads)."""
    expected = [2.0**-e for e in [*range(1, 9), 0.5, 1.5, 2.5, 3.5]]
    np.testing.assert_allclose(slopes(12, backend), expected, rtol=2 * EPS)
    assert math.isclose(slopes(1, backend)[0], 2.0**-8, rel_tol=0)
