"""xPos (Sun et al. 2022): the query/key scale product depends only on the offset, decays with
distance, and the overflow limit is the largest safe position; with RoPE the scaled score is a
function of n - m alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from posenc import functional as PF
from tests.functional._properties import (
    BACKENDS,
    EPS,
    bases,
    fast,
    float_arrays,
    to_backend,
    to_numpy,
)

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
POS = 8192
positions = st.integers(-POS, POS)
scale_bases = st.floats(64.0, 4096.0)
gammas = st.floats(0.05, 2.0)
dims = st.integers(1, 32).map(lambda p: 2 * p)


def scale(pos: list[int], d: int, sb: float, g: float, backend: str) -> np.ndarray:
    p = to_backend(np.asarray(pos, dtype=np.int64), backend)
    out = to_numpy(PF.xpos_scale(p, d, scale_base=sb, gamma=g))
    assert out.dtype == np.float64 and out.shape == (len(pos), d // 2)
    return out


def rtol(g: float, sb: float, n: np.ndarray, m: np.ndarray) -> np.ndarray:
    """ζ^(x) with the exponent x = p/scale_base rounded (EPS/2 relative) moves by
    |ln ζ_0|·|x|·EPS/2 (ζ_0 = γ/(1 + γ), the smallest); pow ~1 ulp, the product 1 more:
    8·EPS·(1 + |ln ζ_0|·(|n| + |m|)/scale_base)."""
    return 8 * EPS * (1 + abs(math.log(g / (1 + g))) * (np.abs(n) + np.abs(m)) / sb)


@fast(40)
@given(
    n=st.lists(positions, min_size=1, max_size=8), shift=positions, d=dims, sb=scale_bases, g=gammas
)
def test_query_times_key_scale_depends_only_on_the_offset(
    n: list[int], shift: int, d: int, sb: float, g: float, backend: str
) -> None:
    """Queries at n get ζ^(n/sb), keys at m ζ^(-m/sb): the product is ζ^((n - m)/sb), the same
    for (n, m) and (n + s, m + s). Positions within float64's xpos_max_position (past it the
    scales overflow to inf, as documented)."""
    m = [x - shift for x in n]  # offset n - m = shift for every pair
    limit = PF.xpos_max_position(d, float(np.finfo(np.float64).max), scale_base=sb, gamma=g)
    assume(max(map(abs, n + m)) <= limit)
    prod = scale(n, d, sb, g, backend) * scale([-x for x in m], d, sb, g, backend)
    direct = scale([shift] * len(n), d, sb, g, backend)
    tol = rtol(g, sb, np.array(n), np.array(m))[:, None]
    assert (np.abs(prod - direct) <= tol * np.abs(direct)).all()


@fast(40)
@given(far=st.lists(st.integers(0, POS), max_size=8), d=dims, sb=scale_bases, g=gammas)
def test_scale_decays_with_position_and_less_on_slower_pairs(
    far: list[int], d: int, sb: float, g: float, backend: str
) -> None:
    """ζ^(n/sb) with ζ_i = (2i/d + γ)/(1 + γ) in (0, 1): 1 at n = 0, in (0, 1] for n >= 0,
    non-increasing in n, and its reciprocal at -n; ζ_i grows with i, so at n > 0 higher pairs
    decay less. Against the formula and the reciprocal: ``rtol`` (exponent rounding, pow)."""
    n = np.unique(np.concatenate([np.arange(8), far]))
    s = scale(list(n), d, sb, g, backend)
    zeta = (2 * np.arange(d // 2) / d + g) / (1 + g)
    formula = zeta ** (n[:, None] / sb)
    tol = rtol(g, sb, n, np.zeros_like(n))[:, None]
    assert (np.abs(s - formula) <= tol * formula).all()
    assert (s[0] == 1).all() and (s > 0).all() and (s <= 1).all()
    assert (np.diff(s, axis=0) <= 0).all() and (np.diff(s[n > 0], axis=1) >= 0).all()
    inv = scale(list(-n), d, sb, g, backend)
    assert (np.abs(s * inv - 1) <= tol).all()


@fast(40)
@given(d=dims, sb=scale_bases, g=gammas, exponent=st.sampled_from([5, 38, 100, 300]))
def test_max_position_is_the_largest_safe_position(
    d: int, sb: float, g: float, exponent: int, backend: str
) -> None:
    """L = xpos_max_position(max_value): the fastest key scale ζ_0^(-L/sb) is at most
    max_value/100 and at L + 1 it is above (up to the float64 pow rounding, 1e-12 relative),
    and check_xpos_range accepts ±L and refuses L + 1. max_value 1e5 (float16's 6.5e4 order),
    1e38 (float32, bfloat16), 1e100, 1e300."""
    del backend  # a plain-Python function; run once per backend anyway (cheap)
    max_value = 10.0**exponent
    L = PF.xpos_max_position(d, max_value, scale_base=sb, gamma=g)
    zeta0 = g / (1 + g)
    assert L >= 0
    assert zeta0 ** (-L / sb) <= max_value / 100 * (1 + 1e-12)
    assert zeta0 ** (-(L + 1) / sb) > max_value / 100 * (1 - 1e-12)
    PF.check_xpos_range(L, d, max_value, "test", scale_base=sb, gamma=g)
    PF.check_xpos_range(-L, d, max_value, "test", scale_base=sb, gamma=g)
    with pytest.raises(ValueError, match="overflows"):
        PF.check_xpos_range(L + 1, d, max_value, "test", scale_base=sb, gamma=g)


@fast(30)
@given(
    data=st.data(),
    P=st.integers(1, 16),
    base=bases,
    sb=scale_bases,
    g=gammas,
    layout=st.sampled_from(PF.LAYOUTS),
)
def test_scaled_rotary_score_depends_only_on_the_offset(
    data: st.DataObject, P: int, base: float, sb: float, g: float, layout: str, backend: str
) -> None:
    """q at n: R(n)·ζ^(n/sb) q; k at m: R(m)·ζ^(-m/sb) k (apply_rope with the tables scaled).
    Their dot product equals that of q at n - m and k at 0. Tolerance: RoPE's angle error
    (|n| + |m|)·EPS plus the scales' relative error (``rtol``), times Σ_i |s_i|‖q_i‖‖k_i‖
    <= max(s)·‖q‖‖k‖, plus D ulp of the sum."""
    n = data.draw(positions, "n")
    m = data.draw(positions, "m")
    q = data.draw(float_arrays((1, 2 * P)), "q")
    k = data.draw(float_arrays((1, 2 * P)), "k")
    xp = PF.np_xp if backend == "numpy" else PF.torch_xp
    inv = PF.rope_inv_freq(2 * P, base=base, xp=xp)

    def encode(x: np.ndarray, pos: int, sign: int) -> np.ndarray:
        p = to_backend(np.array([pos], dtype=np.int64), backend)
        cos, sin = PF.rope_cos_sin(p, inv)
        s = PF.xpos_scale(sign * p, 2 * P, scale_base=sb, gamma=g)
        return to_numpy(PF.apply_rope(to_backend(x, backend), cos * s, sin * s, layout=layout))

    lhs = float(np.sum(encode(q, n, 1) * encode(k, m, -1)))
    rhs = float(np.sum(encode(q, n - m, 1) * encode(k, 0, -1)))
    smax = float(scale([abs(n - m), -abs(n - m)], 2 * P, sb, g, backend).max())
    err = 2 * EPS * (abs(n) + abs(m) + 2 * P + 8) + rtol(g, sb, np.array(n), np.array(m))
    tol = err * smax * np.linalg.norm(q) * np.linalg.norm(k)
    assert abs(lhs - rhs) <= tol, (lhs, rhs, tol)
