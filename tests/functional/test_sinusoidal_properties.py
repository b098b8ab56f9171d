"""Sinusoidal table (Vaswani et al. 2017, sec. 3.5): bounded, and a fixed linear map per shift.

"For any fixed offset k, PE[p + k] can be represented as a linear function of PE[p]": each
(sin, cos) pair at angle (p + k)θ_i is the pair at pθ_i turned by kθ_i, so PE[p + k] = M_k PE[p]
with M_k block-diagonal 2x2 rotations read off PE[k] alone (independent of p).

Error model: the angle p·θ_i is one float64 product, off by <= |p|·EPS/2 rad (θ_i <= 1); sin and
cos add ~1 ulp each. Tolerances are about twice the resulting bound.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc import functional as PF
from tests.functional._properties import BACKENDS, EPS, bases, fast, to_backend, to_numpy
from tests.reference.absolute import sinusoidal as ref_sinusoidal

MAX_POS = 10**6
dims = st.integers(1, 64).map(lambda p: 2 * p)
position_lists = st.lists(st.integers(-MAX_POS, MAX_POS), min_size=1, max_size=8)

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def table(pos: list[int], dim: int, base: float, backend: str) -> np.ndarray:
    """sinusoidal_table at integer positions ``pos`` in ``backend`` (float64, (len(pos), dim))."""
    p = to_backend(np.asarray(pos, dtype=np.int64), backend)
    out = PF.sinusoidal_table(p, dim, base=base)
    assert isinstance(out, torch.Tensor) == (backend == "torch")
    out = to_numpy(out)
    assert out.dtype == np.float64 and out.shape == (len(pos), dim)
    return out


def shift_map(pe_k: np.ndarray) -> np.ndarray:
    """M_k (dim, dim) from PE[k] alone: block i maps (sin a, cos a) to (sin(a + b), cos(a + b))
    for b = kθ_i, i.e. [[cos b, sin b], [-sin b, cos b]] on the (sin, cos) pair."""
    dim = pe_k.shape[-1]
    M = np.zeros((dim, dim))
    for i in range(dim // 2):
        s, c = pe_k[2 * i], pe_k[2 * i + 1]
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    return M


@fast(30)
@given(pos=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=8), dim=dims, base=bases)
def test_entries_are_bounded_and_pairs_lie_on_the_unit_circle(
    pos: list[int], dim: int, base: float, backend: str
) -> None:
    """Every entry is in [-1, 1] (exactly: sin/cos never round past ±1), and each (sin, cos)
    pair has sin² + cos² = 1 within 4 EPS (each is within 1 ulp at the rounded angle)."""
    pe = table(pos, dim, base, backend)
    assert np.isfinite(pe).all() and (np.abs(pe) <= 1.0).all()
    np.testing.assert_allclose(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, 1.0, rtol=0, atol=4 * EPS)


@fast(30)
@given(pos=position_lists, shift=st.integers(-MAX_POS, MAX_POS), dim=dims, base=bases)
def test_a_shift_is_one_linear_map_for_every_position(
    pos: list[int], shift: int, dim: int, base: float, backend: str
) -> None:
    """PE[p + k] = M_k PE[p] for every p, with M_k built from PE[k] only (so it cannot depend on
    p), block-diagonal and orthogonal. The angles (p + k)θ, pθ, kθ are off by at most
    (|p| + |k|)·EPS together, the 2x2 products ~4 ulp: tolerance 2·EPS·(|p| + |k| + 4)."""
    M = shift_map(table([shift], dim, base, backend)[0])
    np.testing.assert_allclose(M @ M.T, np.eye(dim), rtol=0, atol=8 * EPS)
    shifted = table([p + shift for p in pos], dim, base, backend)
    mapped = table(pos, dim, base, backend) @ M.T
    tol = 2 * EPS * (np.abs(pos) + abs(shift) + 4)
    assert (np.abs(shifted - mapped) <= tol[:, None]).all()


@fast(30)
@given(pos=position_lists, other=position_lists, shift=st.integers(-MAX_POS, MAX_POS), dim=dims)
def test_dot_products_depend_only_on_the_offset(
    pos: list[int], other: list[int], shift: int, dim: int, backend: str
) -> None:
    """<PE[p], PE[q]> = Σ_i cos((p - q)θ_i) = <PE[p + s], PE[q + s]>. Each of the dim/2 pair
    terms is off by ~(|p| + |q| + 2|s|)·EPS (angles) plus a few ulp: tolerance
    dim·EPS·(|p| + |q| + 2|s| + 8)."""
    n = min(len(pos), len(other))
    p, q = pos[:n], other[:n]
    dots = np.sum(table(p, dim, 1e4, backend) * table(q, dim, 1e4, backend), axis=-1)
    moved = np.sum(
        table([a + shift for a in p], dim, 1e4, backend)
        * table([b + shift for b in q], dim, 1e4, backend),
        axis=-1,
    )
    exact = np.sum(np.cos(np.subtract(p, q)[:, None] * PF.rope_inv_freq(dim)), axis=-1)
    tol = dim * EPS * (np.abs(p) + np.abs(q) + 2 * abs(shift) + 8)
    assert (np.abs(dots - moved) <= tol).all()
    assert (np.abs(dots - exact) <= tol).all()


@fast(20)
@given(n=st.integers(0, 40), dim=st.integers(1, 16).map(lambda p: 2 * p), base=bases)
def test_the_table_of_n_positions_is_the_paper_formula(
    n: int, dim: int, base: float, backend: str
) -> None:
    """sinusoidal_table(N) has PE[p, 2i] = sin(p/base^(2i/dim)), PE[p, 2i+1] = cos(...), p < N
    (explicit loops, tests/reference/absolute.py), and equal to the table at positions
    0..N-1 given as an array. The reference's p/base^e and ours p·base^(-e) differ by ~2 ulp of
    the angle (<= N·2 EPS rad): tolerance 2·EPS·(N + 4)."""
    xp = PF.np_xp if backend == "numpy" else PF.torch_xp
    pe = to_numpy(PF.sinusoidal_table(n, dim, base=base, xp=xp))
    assert pe.shape == (n, dim)
    np.testing.assert_allclose(pe, ref_sinusoidal(n, dim, base), rtol=0, atol=2 * EPS * (n + 4))
    if n:
        np.testing.assert_array_equal(pe, table(list(range(n)), dim, base, backend))


@fast(30)
@given(pos=position_lists, shift=st.integers(-MAX_POS, MAX_POS), dim=st.integers(2, 65), base=bases)
def test_public_shift_matrix_maps_each_row_to_the_shifted_row(
    pos: list[int], shift: int, dim: int, base: float, backend: str
) -> None:
    """PF.shift_matrix(k, dim) is the M_k read off PE[k] (``shift_map``, float64 on the
    reference table) and maps PE[p] to PE[p + k]; an odd width's last column, a sine alone,
    is outside it: M_k is (dim - 1)², on the paired columns. Tolerance as the shift test."""
    xp = PF.np_xp if backend == "numpy" else PF.torch_xp
    M = to_numpy(PF.shift_matrix(shift, dim, base=base, xp=xp))
    paired = dim - dim % 2
    assert M.dtype == np.float64 and M.shape == (paired, paired)
    own = shift_map(table([shift], dim, base, backend)[0][:paired])
    np.testing.assert_allclose(M, own, rtol=0, atol=4 * EPS * (abs(shift) + 4))
    shifted = table([p + shift for p in pos], dim, base, backend)[:, :paired]
    mapped = table(pos, dim, base, backend)[:, :paired] @ M.T
    tol = 2 * EPS * (np.abs(pos) + abs(shift) + 4)
    assert (np.abs(shifted - mapped) <= tol[:, None]).all()


def test_shift_matrix_against_the_seed_tables_in_float64(backend: str) -> None:
    """Seed 003's check (d = 64, PE[10] from PE[5] with M_5: error ~5e-16) and seed 000's odd
    table (15 positions, width 9, base 100) against the loop reference table."""
    xp = PF.np_xp if backend == "numpy" else PF.torch_xp
    ref = ref_sinusoidal(100, 64)
    M = to_numpy(PF.shift_matrix(5, 64, xp=xp))
    assert np.linalg.norm(M @ ref[5] - ref[10]) < 1e-14
    odd = ref_sinusoidal(15, 9, 100.0)
    M9 = to_numpy(PF.shift_matrix(3, 9, base=100.0, xp=xp))  # (8, 8)
    np.testing.assert_allclose(odd[:-3, :8] @ M9.T, odd[3:, :8], rtol=0, atol=1e-14)


def test_shift_matrix_rejects_bad_arguments(backend: str) -> None:
    with pytest.raises(TypeError, match="k must be an int"):
        PF.shift_matrix(1.5, 8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dim must be an integer >= 2"):
        PF.shift_matrix(1, 1)
