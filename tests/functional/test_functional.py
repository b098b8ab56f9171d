"""posenc.functional: each formula against the float64 reference, on NumPy and torch."""

from __future__ import annotations

import array_api_strict as xps
import numpy as np
import pytest
import torch

from posenc import functional as PF
from tests.reference.absolute import sinusoidal as ref_sinusoidal
from tests.reference.rotary import rope as ref_rope


@pytest.mark.parametrize("base", [10000.0, 100.0])
def test_sinusoidal_table_matches_reference_numpy_and_torch(base: float) -> None:
    expected = ref_sinusoidal(50, 16, base)
    got_np = PF.sinusoidal_table(50, 16, base=base)
    got_t = PF.sinusoidal_table(torch.arange(50), 16, base=base)
    assert isinstance(got_np, np.ndarray) and got_np.dtype == np.float64
    np.testing.assert_allclose(got_np, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_t, torch.from_numpy(expected), rtol=0, atol=1e-12)
    torch.testing.assert_close(got_t.float(), torch.from_numpy(expected).float())


@pytest.mark.parametrize("dim", [1, 5, 9])
def test_odd_width_tables_end_on_a_sine_column(dim: int) -> None:
    """An odd width keeps the formula in every column: the last, c = dim - 1 = 2i, is
    sin(p / base^((dim - 1)/dim)) (the XLM/DistilBERT definition), on NumPy, torch and the
    array API; the columns before it are the pairs of that width's frequencies."""
    expected = ref_sinusoidal(30, dim)
    np.testing.assert_allclose(PF.sinusoidal_table(30, dim), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        PF.sinusoidal_table(torch.arange(30), dim), torch.from_numpy(expected), rtol=0, atol=1e-12
    )
    got = PF.sinusoidal_table(xps.arange(30, dtype=xps.int64), dim)
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-12)
    last = np.sin(np.arange(30) / 10000.0 ** ((dim - 1) / dim))
    np.testing.assert_allclose(PF.sinusoidal_table(30, dim)[:, -1], last, rtol=0, atol=1e-12)


def test_sinusoidal_table_on_array_api_strict() -> None:
    got = PF.sinusoidal_table(xps.arange(20, dtype=xps.int64), 8)
    np.testing.assert_allclose(np.asarray(got), ref_sinusoidal(20, 8), atol=1e-12)


def test_sinusoidal_bounded_and_rows_unique() -> None:
    table = PF.sinusoidal_table(10_000, 64)
    assert np.abs(table).max() <= 1.0
    rounded = np.round(table, 6)
    assert len(np.unique(rounded, axis=0)) == 10_000
    # every pair of rows differs clearly, not just in the last digit
    gram = table @ table.T
    norms = np.diag(gram)
    dist2 = norms[:, None] + norms[None, :] - 2 * gram
    np.fill_diagonal(dist2, np.inf)
    assert dist2.min() > 1e-3


@pytest.mark.parametrize("k", [1, 5, 37])
def test_sinusoidal_shift_is_a_fixed_block_rotation(k: int) -> None:
    """PE[p + k] = M_k PE[p] for every p, M_k block-diagonal 2x2 rotations (Vaswani sec 3.5)."""
    dim, n = 16, 200
    table = PF.sinusoidal_table(n + k, dim)
    inv_freq = PF.rope_inv_freq(dim)
    M = np.zeros((dim, dim))
    for i, w in enumerate(inv_freq):
        c, s = np.cos(k * w), np.sin(k * w)
        # (sin(a + b), cos(a + b)) = [[cos b, sin b], [-sin b, cos b]] (sin a, cos a)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    shifted = table[:n] @ M.T
    np.testing.assert_allclose(shifted, table[k : n + k], atol=1e-12)


def test_rope_inv_freq_formula() -> None:
    got = PF.rope_inv_freq(8, base=10000.0)
    np.testing.assert_allclose(got, [10000.0 ** (-2 * i / 8) for i in range(4)], rtol=1e-15)
    wl = PF.wavelengths(got)
    np.testing.assert_allclose(wl[0], 2 * np.pi)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rope_numpy_and_torch_match_reference(layout: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 8))
    pos = np.array([0, 1, 2, 5, 100, 1000, 4096])
    cos, sin = PF.rope_cos_sin(pos, PF.rope_inv_freq(8))
    expected = ref_rope(x, pos, layout=layout)
    np.testing.assert_allclose(PF.apply_rope(x, cos, sin, layout=layout), expected, atol=1e-12)
    tx = torch.from_numpy(x)
    tcos, tsin = PF.rope_cos_sin(torch.from_numpy(pos), PF.rope_inv_freq(8, xp=PF.torch_xp))
    torch.testing.assert_close(
        PF.apply_rope(tx, tcos, tsin, layout=layout), torch.from_numpy(expected), atol=1e-12, rtol=0
    )
    strict = PF.apply_rope(xps.asarray(x), xps.asarray(cos), xps.asarray(sin), layout=layout)
    np.testing.assert_allclose(np.asarray(strict), expected, atol=1e-12)


def test_apply_rope_partial_passes_the_rest_through() -> None:
    x = np.random.default_rng(1).standard_normal((1, 1, 4, 10))
    pos = np.arange(4)
    cos, sin = PF.rope_cos_sin(pos, PF.rope_inv_freq(4))  # rotate 4 of 10 features
    out = PF.apply_rope(x, cos, sin)
    np.testing.assert_array_equal(out[..., 4:], x[..., 4:])
    np.testing.assert_allclose(out, ref_rope(x, pos, rotary_dim=4), atol=1e-12)


def test_relative_offsets_query_minus_key() -> None:
    got = PF.relative_offsets(np.array([3, 4]), np.array([0, 1, 2, 3, 4]))
    np.testing.assert_array_equal(got, [[3, 2, 1, 0, -1], [4, 3, 2, 1, 0]])
    t = PF.relative_offsets(torch.tensor([[5, 6]]), torch.tensor([[1, 6]]))
    assert t.tolist() == [[[4, -1], [5, 0]]]


def test_angles_are_float64_exact_at_large_positions() -> None:
    pos = torch.tensor([1_000_000, 999_999], dtype=torch.long)
    inv = PF.rope_inv_freq(64, xp=PF.torch_xp)
    ang = PF.angles(pos, inv)
    assert ang.dtype == torch.float64
    exact = np.array([[p * 10000.0 ** (-2 * i / 64) for i in range(32)] for p in pos.tolist()])
    np.testing.assert_allclose(ang.numpy(), exact, rtol=1e-14)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: PF.sinusoidal_table(4, 0), "dim must be an integer >= 1"),
        (lambda: PF.sinusoidal_table(-1, 8), "n_positions must be >= 0"),
        (lambda: PF.rope_inv_freq(8, base=0.0), "base must be a finite number > 0"),
        (lambda: PF.rotary_dim(64, 0.0), r"partial .* must be in \(0, 1\]"),
        (lambda: PF.rotary_dim(64, 1.5), r"must be in \(0, 1\]"),
        (lambda: PF.rotary_dim(64, 0.3), "rotated width must be a positive even"),
        (
            lambda: PF.apply_rope(np.zeros((2, 4)), np.zeros((2, 3)), np.zeros((2, 3))),
            "has only 4 features",
        ),
        (
            lambda: PF.apply_rope(np.zeros((2, 4)), np.zeros((2, 2)), np.zeros((2, 2)), layout="x"),
            "layout must be one of",
        ),
    ],
)
def test_functional_bad_input(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("backend", ["numpy", "torch", "array_api_strict"])
def test_relative_offsets_of_unsigned_positions_are_signed(backend: str) -> None:
    """i - j of uint8 positions: negative offsets, not wrapped ones (0 - 1 = 255)."""
    make = {"numpy": np.asarray, "torch": torch.tensor, "array_api_strict": xps.asarray}[backend]
    dtype = {"numpy": np.uint8, "torch": torch.uint8, "array_api_strict": xps.uint8}[backend]
    q, k = make([0, 1], dtype=dtype), make([0, 1, 2], dtype=dtype)
    np.testing.assert_array_equal(np.asarray(PF.relative_offsets(q, k)), [[0, -1, -2], [1, 0, -1]])
