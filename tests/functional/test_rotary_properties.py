"""RoPE (Su et al. 2021): the rotation properties the method rests on, for arbitrary positions,
head dims and bases, in float64, on both layouts and on the NumPy and torch implementations.

Error model used by the tolerances: the angle p·θ_i is one float64 product, so it is off by at
most |p|·θ_i·EPS/2 <= |p|·EPS/2 rad (θ_i <= 1); cos/sin add ~1 ulp, the 2x2 rotation ~2 ulp of
the pair's norm, a D-term dot product D ulp of ‖q‖‖k‖. Tolerances are twice those bounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
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
    xp_of,
)
from tests.reference.rotary import rope_vector

MAX_POS = 10**6  # a million-token context; the tolerances grow with |p|
positions = st.integers(-MAX_POS, MAX_POS)

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
each_layout = pytest.mark.parametrize("layout", PF.LAYOUTS)


def tables(pos: list[int], n_pairs: int, base: float, backend: str) -> tuple[Any, Any]:
    """cos, sin (T, n_pairs) for ``pos`` from rotary dim 2·n_pairs, in ``backend``."""
    xp = xp_of(backend)
    inv_freq = PF.rope_inv_freq(2 * n_pairs, base=base, xp=xp)
    return PF.rope_cos_sin(to_backend(np.asarray(pos, dtype=np.int64), backend), inv_freq)


def rope(
    x: np.ndarray, pos: list[int], base: float, layout: str, backend: str, n_pairs: int = 0
) -> np.ndarray:
    """apply_rope of x (T, D) at ``pos`` (T,), rotating the first 2·n_pairs features (0: all)."""
    cos, sin = tables(pos, n_pairs or x.shape[-1] // 2, base, backend)
    return to_numpy(PF.apply_rope(to_backend(x, backend), cos, sin, layout=layout))


@st.composite
def rows(draw: st.DrawFn, n_arrays: int = 1, n_positions: int = 1) -> tuple[Any, ...]:
    """T rows of D = 2P features (``n_arrays`` arrays), ``n_positions`` position lists, a base."""
    P = draw(st.integers(1, 16))
    T = draw(st.integers(1, 3))
    arrays = [draw(float_arrays((T, 2 * P))) for _ in range(n_arrays)]
    pos = [draw(st.lists(positions, min_size=T, max_size=T)) for _ in range(n_positions)]
    return (*arrays, *pos, draw(bases))


@each_layout
@fast(20)
@given(case=rows())
def test_rotation_preserves_the_norm_of_every_pair(
    case: tuple[Any, ...], backend: str, layout: str
) -> None:
    """Each feature pair is turned by a rotation, so each pair's norm (hence the vector's) is
    kept whatever the angle: |c² + s² - 1| and the rotation's roundings are a few ulp, so the
    norm moves by at most ~4 EPS relative; 16 EPS allowed."""
    x, pos, base = case
    out = rope(x, pos, base, layout, backend)
    P = x.shape[-1] // 2
    pair = (
        (lambda a: np.hypot(a[..., :P], a[..., P:]))
        if layout == "half"
        else (lambda a: np.hypot(a[..., 0::2], a[..., 1::2]))
    )
    np.testing.assert_allclose(pair(out), pair(x), rtol=16 * EPS)
    np.testing.assert_allclose(
        np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=16 * EPS
    )


@each_layout
@fast(20)
@given(case=rows(n_arrays=2, n_positions=2))
def test_scores_depend_only_on_the_offset(case: tuple[Any, ...], backend: str, layout: str) -> None:
    """<R(m) q, R(n) k> = <q, R(n - m) k> for any integer positions m, n (Su et al. eq. 16).

    Tolerance: the three angles m·θ, n·θ, (n - m)·θ are each off by |p|·EPS/2, cos/sin/rotation
    and the D-term sum by (D + 8) ulp of ‖q‖‖k‖: 2·EPS·‖q‖‖k‖·(|m| + |n| + D + 8)."""
    q, k, m, n, base = case
    lhs = np.sum(rope(q, m, base, layout, backend) * rope(k, n, base, layout, backend), axis=-1)
    offset = [b - a for a, b in zip(m, n, strict=True)]
    rhs = np.sum(q * rope(k, offset, base, layout, backend), axis=-1)
    D = q.shape[-1]
    scale = np.linalg.norm(q, axis=-1) * np.linalg.norm(k, axis=-1)
    tol = 2 * EPS * scale * (np.abs(m) + np.abs(n) + D + 8)
    assert (np.abs(lhs - rhs) <= tol).all(), (lhs, rhs, tol)


@each_layout
@fast(20)
@given(case=rows(n_positions=2))
def test_rotating_by_m_then_n_is_rotating_by_m_plus_n(
    case: tuple[Any, ...], backend: str, layout: str
) -> None:
    """R(n) R(m) x = R(m + n) x (a one-parameter group; with n = -m, R(-m) undoes R(m)).

    Tolerance per row: angles off by (|m| + |n| + |m + n|)·EPS/2 <= (|m| + |n|)·EPS, plus ~6
    ulp of rounding (two rotations against one): 2·EPS·‖x‖·(|m| + |n| + 8)."""
    x, m, n, base = case
    twice = rope(rope(x, m, base, layout, backend), n, base, layout, backend)
    once = rope(x, [a + b for a, b in zip(m, n, strict=True)], base, layout, backend)
    tol = 2 * EPS * np.linalg.norm(x, axis=-1) * (np.abs(m) + np.abs(n) + 8)
    assert (np.abs(twice - once) <= tol[:, None]).all()


@each_layout
@fast(20)
@given(case=rows())
def test_position_zero_is_the_identity(case: tuple[Any, ...], backend: str, layout: str) -> None:
    """cos 0 = 1 and sin 0 = 0 exactly, so a·1 - b·0 = a: bit for bit (up to the sign of 0)."""
    x, pos, base = case
    np.testing.assert_array_equal(rope(x, [0] * len(pos), base, layout, backend), x)


@each_layout
@fast(20)
@given(data=st.data())
def test_partial_rotary_rotates_the_leading_features_and_passes_the_rest(
    data: st.DataObject, backend: str, layout: str
) -> None:
    """With cos/sin of R < D/2 pairs, features past 2R come back bit-identical and the first 2R
    are the full rotation of x[..., :2R] (explicit 2x2 rotations, tests/reference/rotary.py).

    The reference takes base**(-2i/d) (one rounding fewer than 1/base**(2i/d)), so its angles
    differ by ~|p|·EPS: tolerance 2·EPS·‖x‖·(|p| + 8) per row."""
    R = data.draw(st.integers(1, 16), "rotated pairs")
    D = 2 * R + 2 * data.draw(st.integers(1, 16), "passed-through pairs")
    T = data.draw(st.integers(1, 4), "T")
    x = data.draw(float_arrays((T, D)), "x")
    pos = data.draw(st.lists(positions, min_size=T, max_size=T), "pos")
    base = data.draw(bases, "base")
    out = rope(x, pos, base, layout, backend, n_pairs=R)
    np.testing.assert_array_equal(out[:, 2 * R :], x[:, 2 * R :])
    expected = np.stack(
        [rope_vector(x[t], pos[t], base=base, layout=layout, rotary_dim=2 * R) for t in range(T)]
    )
    tol = 2 * EPS * np.linalg.norm(x, axis=-1) * (np.abs(pos) + 8)
    assert (np.abs(out - expected) <= tol[:, None]).all()


@fast(20)
@given(case=rows())
def test_layouts_are_one_rotation_up_to_a_feature_permutation(
    case: tuple[Any, ...], backend: str
) -> None:
    """Interleaved pairs (2i, 2i + 1) are half pairs (i, i + P) after moving the even features
    first: rope_interleaved(x) = perm⁻¹(rope_half(perm x)). Same products on the same numbers;
    only an FMA contraction may differ, 1 ulp of a·c or b·s: 4·EPS·max|x| per row."""
    x, pos, base = case
    order = np.concatenate([np.arange(0, x.shape[-1], 2), np.arange(1, x.shape[-1], 2)])
    inter = rope(x, pos, base, "interleaved", backend)
    half = np.empty_like(x)
    half[:, order] = rope(x[:, order], pos, base, "half", backend)
    tol = 4 * EPS * np.abs(x).max(axis=-1, initial=0.0)
    assert (np.abs(inter - half) <= tol[:, None]).all()


@fast(20)
@given(n_pairs=st.integers(1, 256), base=bases)
def test_inverse_frequencies_are_the_geometric_series(
    n_pairs: int, base: float, backend: str
) -> None:
    """θ_i = base^(-2i/d): θ_0 = 1, each ratio θ_(i+1)/θ_i = base^(-2/d), all in (0, 1] and
    strictly decreasing (base > 1). The exponent 2i/d is rounded (EPS/2 relative), which moves
    base^e by ln(base)·EPS/2; pow and the reciprocal ~2 ulp: rtol EPS·(4 + ln base), ratios
    twice that."""
    d = 2 * n_pairs
    inv = to_numpy(PF.rope_inv_freq(d, base=base, xp=xp_of(backend)))
    assert inv.shape == (n_pairs,) and inv.dtype == np.float64
    rtol = EPS * (4 + np.log(base))
    assert inv[0] == 1.0
    np.testing.assert_allclose(inv, base ** (-2.0 * np.arange(n_pairs) / d), rtol=rtol)
    np.testing.assert_allclose(inv[1:] / inv[:-1], base ** (-2.0 / d), rtol=2 * rtol)
    assert (inv > 0).all() and (inv <= 1).all() and (np.diff(inv) < 0).all()


@fast(20)
@given(
    n_pairs=st.integers(1, 64), base=bases, pos=st.lists(st.integers(-(2**40), 2**40), max_size=8)
)
def test_cos_sin_tables_lie_on_the_unit_circle(
    n_pairs: int, base: float, pos: list[int], backend: str
) -> None:
    """cos² + sin² = 1 to a few ulp at any position (here up to 2^40): each is within 1 ulp of
    the true value at the rounded angle, so the sum is within ~4 EPS of 1."""
    cos, sin = map(to_numpy, tables(pos, n_pairs, base, backend))
    assert cos.shape == sin.shape == (len(pos), n_pairs)
    np.testing.assert_allclose(cos**2 + sin**2, 1.0, rtol=0, atol=4 * EPS)


@fast(20)
@given(case=rows(), copies=st.integers(1, 300))
@each_layout
def test_every_torch_path_computes_the_same_rotation(
    case: tuple[Any, ...], copies: int, backend: str, layout: str
) -> None:
    """On torch, apply_rope (out of place, in place, x or cos/sin needing gradients) and the
    modules' default eager kernel (``posenc.kernels.rope``, kernel="eager": a swap copy, or
    half-width products on x over 128 KiB, in place, custom backward) must all equal the NumPy
    formula on the same tables (NumPy's own sin/cos or pow may differ from torch's by an ulp,
    which position |p| would amplify), on x repeated ``copies`` times with cos/sin broadcast.
    Same products, up to an FMA contraction: 1 ulp of each, 4·EPS·max|x| per row."""
    if backend == "numpy":  # the reference side of the comparison
        return
    from posenc.kernels.rope import rotate_pair

    x, pos, base = case
    cos_np, sin_np = tables(pos, x.shape[-1] // 2, base, "numpy")
    cos, sin = torch.from_numpy(cos_np), torch.from_numpy(sin_np)
    expected = to_numpy(PF.apply_rope(x, cos_np, sin_np, layout=layout))
    t = torch.from_numpy(np.tile(x, (copies, 1, 1)))  # (copies, T, D)

    def kernel(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        args = (cos, sin, cos, sin)
        return rotate_pair(x, x.clone(), *args, layout=layout, inplace=inplace, kernel="eager")[0]

    outs = {
        "functional": PF.apply_rope(t, cos, sin, layout=layout),
        "functional inplace": PF.apply_rope(t.clone(), cos, sin, layout=layout, inplace=True),
        "functional grad x": PF.apply_rope(t.clone().requires_grad_(), cos, sin, layout=layout),
        "functional grad cos/sin": PF.apply_rope(
            t, cos.clone().requires_grad_(), sin.clone().requires_grad_(), layout=layout
        ),
        "eager kernel": kernel(t),
        "eager kernel inplace": kernel(t.clone(), inplace=True),
        "eager kernel grad x": kernel(t.clone().requires_grad_()),
    }
    tol = 4 * EPS * np.abs(x).max(axis=-1, initial=0.0)[:, None]
    for name, out in outs.items():
        assert out.shape == t.shape, name
        assert (np.abs(out.detach().numpy() - expected) <= tol).all(), name


@fast(20)
@given(case=rows(n_arrays=2))
@each_layout
def test_the_gradient_is_the_inverse_rotation(
    case: tuple[Any, ...], backend: str, layout: str
) -> None:
    """R(θ) is orthogonal, so d<g, R(θ) x>/dx = R(θ)ᵀ g = R(-θ) g: the backward of apply_rope
    (autograd through the formula) and of the eager kernel (its own backward) equal the
    rotation of g by the negated angles (cos, -sin), to 4 ulp of max|g|. torch only."""
    if backend == "numpy":
        return
    from posenc.kernels.rope import rotate_pair

    x, g, pos, base = case
    cos, sin = tables(pos, x.shape[-1] // 2, base, "torch")
    expected = to_numpy(PF.apply_rope(torch.from_numpy(g), cos, -sin, layout=layout))
    tol = 4 * EPS * np.abs(g).max(axis=-1, initial=0.0)[:, None]
    for name in ("functional", "eager kernel"):
        t = torch.from_numpy(x).requires_grad_()
        if name == "functional":
            out = PF.apply_rope(t, cos, sin, layout=layout)
        else:
            out = rotate_pair(t, t.detach(), cos, sin, cos, sin, layout=layout, kernel="eager")[0]
        out.backward(torch.from_numpy(g))
        assert t.grad is not None and (np.abs(t.grad.numpy() - expected) <= tol).all(), name
