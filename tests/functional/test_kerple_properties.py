"""KERPLE (Chi et al. 2022): the log and power kernel biases are shift invariant, symmetric,
<= 0, zero at distance 0, non-increasing in distance, and conditionally positive definite
(the property the paper builds them on); power with r2 = 1 is symmetric ALiBi."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc import functional as PF
from tests.functional._properties import BACKENDS, EPS, fast, to_backend, to_numpy

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
POS = 2**30
position_lists = st.lists(st.integers(-POS, POS), min_size=1, max_size=8)
# r1, r2 > 0 per head (the modules clamp them to >= eps); power: r2 in (0, 2]
r1s = st.lists(st.floats(1e-3, 10.0), min_size=1, max_size=4)


@st.composite
def params(draw: st.DrawFn) -> tuple[str, np.ndarray, np.ndarray]:
    variant = draw(st.sampled_from(PF.KERPLE_VARIANTS))
    r1 = np.array(draw(r1s))
    high = 2.0 if variant == "power" else 10.0
    r2 = np.array(draw(st.lists(st.floats(1e-3, high), min_size=len(r1), max_size=len(r1))))
    return variant, r1, r2


def bias(q: list[int], k: list[int], p: tuple[str, np.ndarray, np.ndarray], backend: str):
    variant, r1, r2 = p
    q_pos, k_pos = (to_backend(np.asarray(x, dtype=np.int64), backend) for x in (q, k))
    out = PF.kerple_bias(
        q_pos, k_pos, to_backend(r1, backend), to_backend(r2, backend), variant=variant
    )
    out = to_numpy(out)
    assert out.dtype == np.float64 and out.shape == (len(r1), len(q), len(k))
    return out


@fast(40)
@given(p=params(), q=position_lists, k=position_lists, shift=st.integers(-POS, POS))
def test_bias_is_a_symmetric_nonpositive_function_of_the_distance(
    p: tuple[str, np.ndarray, np.ndarray], q: list[int], k: list[int], shift: int, backend: str
) -> None:
    """B(i, j) depends on |i - j| alone: unchanged by a common shift and by swapping queries
    and keys (the same integer distance), <= 0, and exactly 0 at i = j (log1p(0) = 0,
    0^r2 = 0). Not bit for bit: torch's vectorised pow/log1p and its scalar tail may round the
    same distance 1 ulp apart depending on where it sits in the tensor: rtol 2 EPS."""
    b = bias(q, k, p, backend)
    moved = bias([x + shift for x in q], [x + shift for x in k], p, backend)
    np.testing.assert_allclose(moved, b, rtol=2 * EPS, atol=0)
    np.testing.assert_allclose(bias(k, q, p, backend).transpose(0, 2, 1), b, rtol=2 * EPS, atol=0)
    assert (b <= 0).all()
    same = np.equal.outer(q, k)
    assert (b[:, same] == 0).all()


@fast(40)
@given(p=params(), far=st.lists(st.integers(0, 2 * POS), max_size=8))
def test_bias_never_increases_with_distance(
    p: tuple[str, np.ndarray, np.ndarray], far: list[int], backend: str
) -> None:
    """-r1·log(1 + r2·d) and -r1·d^r2 are non-increasing in d for r1, r2 > 0; every float
    step (product, log1p, pow) is monotone, so the computed row is too, exactly."""
    d = np.unique(np.concatenate([np.arange(64), far]))
    b = bias([0], list(d), p, backend)[:, 0, :]  # key j = d: distance d
    assert (np.diff(b, axis=-1) <= 0).all()
    variant, r1, r2 = p
    d = d.astype(np.float64)
    formula = (
        -r1[:, None] * np.log1p(r2[:, None] * d)
        if variant == "log"
        else -r1[:, None] * d ** r2[:, None]
    )
    # one product, a log1p/pow within 1 ulp and one more product each side: 4 EPS relative
    np.testing.assert_allclose(b, formula, rtol=4 * EPS, atol=0)


@fast(40)
@given(p=params(), pos=position_lists, data=st.data())
def test_bias_matrix_is_conditionally_positive_definite(
    p: tuple[str, np.ndarray, np.ndarray], pos: list[int], data: st.DataObject, backend: str
) -> None:
    """Σ_ij c_i c_j B(i, j) >= 0 for every c with Σ c_i = 0 (Chi et al.: -log(1 + r2|i-j|) and
    -|i-j|^r2, 0 < r2 <= 2, are CPD). Positions are small (|i| <= 64, so the form is not
    dominated by rounding of huge entries). Rounding: each entry to 4 EPS, the sum over T²
    terms T² EPS, and c sums to 0 only up to T·EPS·max|c|: tolerance 8·T²·EPS·|c|ᵀ|B||c|."""
    pos = [x % 129 - 64 for x in pos]
    c = np.array(data.draw(st.lists(st.floats(-10, 10), min_size=len(pos), max_size=len(pos))))
    c = c - c.mean()
    b = bias(pos, pos, p, backend)
    form = np.einsum("i,hij,j->h", c, b, c)
    tol = 8 * len(pos) ** 2 * EPS * np.einsum("i,hij,j->h", np.abs(c), np.abs(b), np.abs(c))
    assert (form >= -tol).all(), (form, tol)


@fast(30)
@given(n_heads=st.integers(1, 16), q=position_lists, k=position_lists)
def test_power_kernel_with_unit_exponent_and_alibi_slopes_is_symmetric_alibi(
    n_heads: int, q: list[int], k: list[int], backend: str
) -> None:
    """r2 = 1, r1 = ALiBi's slopes: -m_h·|i - j|^1 = ALiBi's encoder form; d^1 = d exactly, so
    equal bit for bit."""
    m = PF.alibi_slopes(n_heads)
    kerple = bias(q, k, ("power", m, np.ones(n_heads)), backend)
    q_pos, k_pos = (to_backend(np.asarray(x, dtype=np.int64), backend) for x in (q, k))
    alibi = to_numpy(PF.alibi_bias(q_pos, k_pos, to_backend(m, backend), bidirectional=True))
    np.testing.assert_array_equal(kerple, alibi)
