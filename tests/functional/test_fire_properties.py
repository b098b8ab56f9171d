"""FIRE (Li et al. 2023): ψ is a monotone, symmetric transform; the interpolated distance lies
in [0, 1] on causal pairs, grows with |i - j|, and is a function of i - j alone for queries
before the threshold; the piecewise-linear MLP form equals the MLP."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc import functional as PF
from tests.functional._properties import BACKENDS, EPS, fast, float_arrays, to_backend, to_numpy

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
cs = st.floats(1e-3, 100.0)  # c > 0 (the paper's ψ(x) = log(cx + 1))
thresholds = st.floats(0.0, 1e5)


def scalar(v: float, backend: str):
    return to_backend(np.array(v, dtype=np.float64), backend)


def distance(q: list[int], k: list[int], c: float, L: float, backend: str) -> np.ndarray:
    q_pos, k_pos = (to_backend(np.asarray(x, dtype=np.int64), backend) for x in (q, k))
    out = to_numpy(PF.fire_distance(q_pos, k_pos, scalar(c, backend), scalar(L, backend)))
    assert out.dtype == np.float64 and out.shape == (len(q), len(k))
    return out


@fast(40)
@given(x=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=16), c=cs)
def test_psi_is_zero_at_zero_symmetric_and_monotone(x: list[float], c: float, backend: str) -> None:
    """ψ(0) = 0, ψ(-x) = ψ(x), ψ >= 0, and ψ non-decreasing in |x| (monotone float steps)."""
    a = np.sort(np.abs(np.array([0.0, *x])))
    psi = to_numpy(PF.fire_psi(to_backend(a, backend), scalar(c, backend)))
    neg = to_numpy(PF.fire_psi(to_backend(-a, backend), scalar(c, backend)))
    assert psi[0] == 0.0 and (psi >= 0).all() and (np.diff(psi) >= 0).all()
    np.testing.assert_array_equal(neg, psi)


@fast(40)
@given(
    i=st.integers(0, 10**6), keys=st.lists(st.integers(0, 10**6), max_size=16), c=cs, L=thresholds
)
def test_causal_distances_lie_in_unit_interval_and_grow_with_the_offset(
    i: int, keys: list[int], c: float, L: float, backend: str
) -> None:
    """For keys 0 <= j <= i: ψ(i - j) <= ψ(i) <= ψ(max(L, i)), so the distance is in [0, 1)
    (the normaliser adds eps > 0), 0 at j = i, and non-increasing in j (growing with i - j)."""
    js = sorted({i, 0, *(j % (i + 1) for j in keys)})
    d = distance([i], js, c, L, backend)[0]
    assert (d >= 0).all() and (d < 1).all() and d[-1] == 0.0
    assert (np.diff(d) <= 0).all()


@fast(40)
@given(
    q=st.lists(st.integers(0, 1000), min_size=1, max_size=8),
    k=st.lists(st.integers(-1000, 1000), min_size=1, max_size=8),
    shift=st.integers(0, 1000),
    c=cs,
)
def test_queries_before_the_threshold_see_a_relative_function(
    q: list[int], k: list[int], shift: int, c: float, backend: str
) -> None:
    """With L >= every query position (before and after a shift s), the normaliser is ψ(L) for
    all of them, so the distance depends on i - j alone: shifting queries and keys together
    changes nothing, bit for bit (same integer offsets, same normaliser)."""
    L = float(max(q) + shift)
    moved = distance([x + shift for x in q], [x + shift for x in k], c, L, backend)
    np.testing.assert_array_equal(moved, distance(q, k, c, L, backend))


@fast(25)
@given(data=st.data(), hidden=st.integers(1, 16), H=st.integers(1, 4))
def test_mlp_pieces_equal_the_mlp(data: st.DataObject, hidden: int, H: int, backend: str) -> None:
    """fire_mlp(x, *fire_mlp_pieces(w1, b1, w2, b2)) = w2·relu(w1 x + b1) + b2 at any x,
    including kinks shared by several units and constant units (w1 = 0). Each form rounds
    ~hidden products and sums of terms |w2_hk|·(|w1_k x| + |b1_k|), and a unit within rounding
    of its kink contributes ~EPS of that term in either form: tolerance
    4·(hidden + 2)·EPS·(Σ_k |w2_hk|(|w1_k x| + |b1_k|) + |b2_h|)."""
    w1 = data.draw(float_arrays((hidden,), 10.0), "w1")
    b1 = data.draw(float_arrays((hidden,), 10.0), "b1")
    w2 = data.draw(float_arrays((H, hidden), 10.0), "w2")
    b2 = data.draw(float_arrays((H,), 10.0), "b2")
    x = data.draw(float_arrays((data.draw(st.integers(1, 16), "N"),), 100.0), "x")
    kinks = -b1[w1 != 0] / w1[w1 != 0]  # also evaluate exactly at the kinks
    x = np.concatenate([x, kinks[np.abs(kinks) <= 1e6]])
    pieces = PF.fire_mlp_pieces(*(to_backend(a, backend) for a in (w1, b1, w2, b2)))
    got = to_numpy(PF.fire_mlp(to_backend(x, backend), *pieces))  # (H, N)
    pre = np.outer(x, w1) + b1  # (N, hidden)
    expected = (np.maximum(pre, 0.0) @ w2.T + b2).T
    size = (np.abs(np.outer(x, w1)) + np.abs(b1)) @ np.abs(w2).T + np.abs(b2)  # (N, H)
    assert got.shape == (H, x.shape[0])
    assert (np.abs(got - expected) <= 4 * (hidden + 2) * EPS * size.T).all()
