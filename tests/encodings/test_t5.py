"""T5 relative bias: buckets against the mesh-tensorflow reference, Hugging Face, x-transformers."""

from __future__ import annotations

from typing import Any

import array_api_strict as xps
import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from tests.reference import bias as ref

# (32, 939) and (24, 2058): float64 logs would move a bucket (n = 728 and 294) off T5's float32
CONFIGS = [(32, 128), (16, 64), (8, 16), (64, 256), (32, 939), (24, 2058), (6, 5)]


def _buckets(rel: Any, bidirectional: bool, num_buckets: int, max_distance: int) -> Any:
    return PF.t5_relative_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize(("num_buckets", "max_distance"), CONFIGS)
def test_buckets_match_reference(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    """Exact on every offset except float32 boundary cases, which may round to either side."""
    rel = np.concatenate([np.arange(-600, 600), [-5000, -728, -294, 294, 728, 10**6]])
    args = (bidirectional, num_buckets, max_distance)
    expected = np.array([ref.t5_bucket(int(r), *args) for r in rel])
    boundary = np.array([ref.t5_on_boundary(int(r), *args) for r in rel])
    for got in (_buckets(torch.from_numpy(rel), *args).numpy(), _buckets(rel, *args)):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got[~boundary], expected[~boundary])
        assert (np.abs(got[boundary] - expected[boundary]) <= 1).all()


@pytest.mark.parametrize("bidirectional", [False, True])
def test_bucket_properties(bidirectional: bool) -> None:
    num_buckets, max_distance = 32, 128
    per_side = num_buckets // 2 if bidirectional else num_buckets
    exact = per_side // 2  # 16 causal, 8 bidirectional
    dist = torch.arange(0, 2000)
    back = _buckets(-dist, bidirectional, num_buckets, max_distance)  # keys before the query
    assert back[0] == 0
    torch.testing.assert_close(back[:exact], dist[:exact])  # one bucket per distance
    large = back[exact:]
    assert (large >= exact).all() and (large <= per_side - 1).all()
    assert (large.diff() >= 0).all()  # monotone
    assert (back[max_distance:] == per_side - 1).all()  # clamped past max_distance
    assert len(large.unique()) == per_side - exact  # every log bucket is used
    widths = torch.bincount(large - exact)  # logarithmic: bucket widths grow
    assert widths[-2] > widths[0] >= 1
    fwd = _buckets(dist, bidirectional, num_buckets, max_distance)  # keys after the query
    if bidirectional:
        torch.testing.assert_close(fwd[1:], back[1:] + per_side)
    else:
        assert (fwd == 0).all()


@pytest.mark.parametrize("bidirectional", [False, True])
def test_bias_matches_reference(bidirectional: bool) -> None:
    pe = posenc.build("t5", n_heads=3, num_buckets=8, max_distance=20, bidirectional=bidirectional)
    torch.nn.init.normal_(pe.weight)
    q_pos = torch.tensor([[30, 31, 32], [0, 1, 2]])
    k_pos = torch.tensor([[0, 5, 10, 20, 30, 31, 32, 40], [0, 0, 0, 1, 2, 3, 4, 5]])
    expected = ref.t5(
        q_pos.numpy(), k_pos.numpy(), pe.weight.detach().double().numpy(), bidirectional, 20
    )
    got = pe.bias(q_pos, k_pos)
    assert got.shape == (2, 3, 3, 8) and got.dtype == torch.float32
    torch.testing.assert_close(got, torch.from_numpy(expected).float())


def test_init_is_small_and_bias_stays_float32_under_bf16() -> None:
    pe = posenc.build("t5", n_heads=8)
    assert pe.weight.shape == (32, 8)
    assert 0.01 < pe.weight.std().item() < 0.03 and pe.weight.abs().max().item() < 0.15
    bias = pe.to(torch.bfloat16).bias(torch.arange(4), torch.arange(4))
    assert bias.dtype == torch.float32


def test_buckets_use_float32_logs_like_t5() -> None:
    got = _buckets(torch.tensor([-728]), False, 32, 939)
    assert got.item() == 31  # float64: floor(16 + log(728/16)/log(939/16)*16) = 30


def test_functional_runs_on_array_api_strict() -> None:
    rel = xps.arange(-300, 300, dtype=xps.int64)
    got = PF.t5_relative_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128)
    expected = [ref.t5_bucket(r, True, 32, 128) for r in range(-300, 300)]
    np.testing.assert_array_equal(np.asarray(got), expected)


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"num_buckets": 1}, ValueError, "num_buckets must be an integer >= 2, got 1"),
        ({"num_buckets": 3, "bidirectional": True}, ValueError, "num_buckets must be .* >= 4"),
        ({"max_distance": 0}, ValueError, "max_distance must be an integer >= 1, got 0"),
        ({"max_distance": 16}, ValueError, "max_distance must be > 16 .*got 16"),
        ({"n_heads": 0}, ValueError, "n_heads must be an integer >= 1"),
        ({"bidirectional": 1}, TypeError, "bidirectional must be a bool"),
        ({"init_std": 0.0}, ValueError, "init_std must be a finite number > 0"),
    ],
)
def test_bad_config_raises(config: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        posenc.build("t5", **{"n_heads": 2, **config})


def test_non_integer_offsets_raise() -> None:
    with pytest.raises(TypeError, match="relative_position must be integer"):
        PF.t5_relative_bucket(torch.arange(3.0), bidirectional=False)
