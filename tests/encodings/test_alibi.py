"""ALiBi: slopes and bias against the paper's reference, BLOOM and x-transformers."""

from __future__ import annotations

import math

import array_api_strict as xps
import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from tests.reference import bias as ref


@pytest.mark.parametrize("n_heads", [*range(1, 34), 48, 64, 96])
def test_slopes_match_reference(n_heads: int) -> None:
    got = PF.alibi_slopes(n_heads)
    assert got.dtype == np.float64 and got.shape == (n_heads,)
    np.testing.assert_allclose(got, ref.alibi_slopes(n_heads), rtol=1e-14, atol=0)


@pytest.mark.parametrize("n_heads", [8, 16])
def test_slopes_are_the_published_geometric_series(n_heads: int) -> None:
    slopes = PF.alibi_slopes(n_heads)
    expected = [2.0 ** (-8.0 * h / n_heads) for h in range(1, n_heads + 1)]
    np.testing.assert_allclose(slopes, expected, rtol=1e-15)
    ratios = slopes[1:] / slopes[:-1]
    np.testing.assert_allclose(ratios, 2.0 ** (-8.0 / n_heads), rtol=1e-14)
    assert slopes[-1] == 2.0**-8


@pytest.mark.parametrize("n_heads", [12, 20, 24])
def test_slopes_for_head_counts_not_a_power_of_two(n_heads: int) -> None:
    """Closest lower power of two M's slopes, then 2M's slopes at odd indices 1, 3, 5, ..."""
    M = 2 ** int(math.log2(n_heads))
    head = [2.0 ** (-8.0 * h / M) for h in range(1, M + 1)]
    tail = [2.0 ** (-8.0 * h / (2 * M)) for h in range(1, 2 * M + 1, 2)][: n_heads - M]
    np.testing.assert_allclose(PF.alibi_slopes(n_heads), head + tail, rtol=1e-15)
    if n_heads == 12:  # the documented non-monotone series: ... 2^-8, then 2^-0.5
        np.testing.assert_allclose(PF.alibi_slopes(12)[7:9], [2.0**-8, 2.0**-0.5])


@pytest.mark.parametrize("bidirectional", [False, True])
def test_bias_matches_reference(bidirectional: bool) -> None:
    q_pos = np.array([[3, 4, 5, 6], [0, 0, 1, 2]])  # batch rows: offset, left padding
    k_pos = np.array([[0, 1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 1, 2]])
    expected = ref.alibi(q_pos, k_pos, ref.alibi_slopes(6), bidirectional)
    pe = posenc.build("alibi", n_heads=6, bidirectional=bidirectional)
    got = pe.bias(torch.from_numpy(q_pos), torch.from_numpy(k_pos))
    assert got.shape == (2, 6, 4, 7) and got.dtype == torch.float32
    torch.testing.assert_close(got, torch.from_numpy(expected).float())
    got64 = PF.alibi_bias(q_pos, k_pos, PF.alibi_slopes(6), bidirectional=bidirectional)
    np.testing.assert_allclose(got64, expected, rtol=1e-14, atol=1e-14)


def test_bias_at_distance_d_is_minus_slope_times_d() -> None:
    pe = posenc.build("alibi", n_heads=8)
    bias = pe.bias(torch.tensor([1000]), torch.arange(1001))[0, :, 0]  # (H, Tk), last query
    d = torch.arange(1000, -1, -1, dtype=torch.float64)  # distance of key j from query 1000
    expected = -torch.from_numpy(PF.alibi_slopes(8))[:, None] * d
    torch.testing.assert_close(bias.double(), expected, rtol=1e-6, atol=0)
    assert (bias[:, -1] == 0).all()


def test_functional_runs_on_array_api_strict() -> None:
    pos = xps.arange(5, dtype=xps.int64)
    slopes = PF.alibi_slopes(4, xp=xps)
    got = PF.alibi_bias(pos, pos, slopes, bidirectional=True)
    expected = ref.alibi(np.arange(5), np.arange(5), ref.alibi_slopes(4), True)[0]
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-14)


def test_custom_slopes_and_bias_dtype_under_bf16_and_double() -> None:
    pe = posenc.build("alibi", n_heads=2, slopes=[0.3, 1.7]).to(torch.bfloat16)
    assert pe.slopes64.dtype == torch.float64
    bias = pe.bias(torch.arange(3), torch.arange(3))
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias[0, :, 2, 0], torch.tensor([-0.6, -3.4]))
    bias64 = pe.double().bias(torch.tensor([10**6]), torch.tensor([0]))
    assert bias64.dtype == torch.float64
    torch.testing.assert_close(bias64[0, :, 0, 0], torch.tensor([-0.3e6, -1.7e6]).double())


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"n_heads": 0}, ValueError, "n_heads must be an integer >= 1, got 0"),
        ({"n_heads": 2.0}, TypeError, "n_heads must be an int"),
        ({"n_heads": 2, "slopes": [0.5, 0.0]}, ValueError, "each ALiBi slope must be .* > 0"),
        ({"n_heads": 2, "slopes": [0.5, -1.0]}, ValueError, "each ALiBi slope must be .* > 0"),
        ({"n_heads": 2, "slopes": [0.5]}, ValueError, "slopes must hold n_heads=2 values, got 1"),
        ({"n_heads": 2, "bidirectional": "yes"}, TypeError, "bidirectional must be a bool"),
    ],
)
def test_bad_config_raises(config: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        posenc.build("alibi", **config)


def test_bad_positions_raise() -> None:
    pe = posenc.build("alibi", n_heads=2)
    with pytest.raises(TypeError, match="q_pos must be an integer tensor"):
        pe.bias(torch.arange(3.0), torch.arange(3))
    with pytest.raises(ValueError, match="must agree on B"):
        pe.bias(torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"k_pos must have shape \(T,\) or \(B, T\)"):
        pe.bias(torch.arange(3), torch.zeros(1, 1, 3, dtype=torch.long))
