"""FIRE: progressive interpolation and the MLP bias against the float64 reference."""

from __future__ import annotations

import math

import array_api_strict as xps
import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from tests.encodings.bias_helpers import BiasCall, fire_reference


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("init_threshold", [512.0, 3.5])
def test_bias_matches_reference(init_threshold: float, bidirectional: bool) -> None:
    pe = posenc.build(
        "fire",
        n_heads=3,
        hidden=8,
        init_threshold=init_threshold,
        init_c=0.3,
        bidirectional=bidirectional,
    )
    q_pos = torch.tensor([[5, 6, 7], [0, 1, 2]])
    k_pos = torch.tensor([[0, 1, 2, 3, 5, 6, 7], [0, 0, 0, 0, 0, 1, 2]])
    got = pe.bias(q_pos, k_pos)
    assert got.shape == (2, 3, 3, 7) and got.dtype == torch.float32
    torch.testing.assert_close(got, torch.from_numpy(fire_reference(pe, q_pos, k_pos)).float())


def test_distance_is_progressively_interpolated() -> None:
    """ψ(i - j) / ψ(max(L, i)): the normaliser is ψ(L) before L and ψ(i) after, so every key of a
    query at i >= L maps into [0, 1], the farthest (j = 0) to 1."""
    c, L = torch.tensor(0.1, dtype=torch.float64), torch.tensor(16.0, dtype=torch.float64)
    pos = torch.arange(200)
    x = PF.fire_distance(pos, pos, c, L, eps=0.0)  # (T, T)
    psi = lambda v: math.log(0.1 * v + 1)  # noqa: E731
    torch.testing.assert_close(x[10, 0].item(), psi(10) / psi(16))  # before L: fixed normaliser
    torch.testing.assert_close(x[100, 0].item(), 1.0)  # after L: the farthest key is at 1
    torch.testing.assert_close(x[150, 75].item(), psi(75) / psi(150))
    causal = torch.ones(200, 200, dtype=torch.bool).tril()
    assert x[causal].min() >= 0 and x[causal].max() <= 1 + 1e-12
    assert not torch.equal(x, x.T)  # normalised by the query's position, not symmetric
    np_x = PF.fire_distance(pos.numpy(), pos.numpy(), c.numpy(), L.numpy(), eps=0.0)
    np.testing.assert_allclose(np_x, x.numpy(), rtol=1e-14)


def test_bidirectional_distance_is_symmetric_in_unit_range_and_causal_on_past_keys() -> None:
    """ψ(|i - j|) / ψ(max(L, i, j)): symmetric in i and j, in [0, 1] on every pair (the causal
    form's normaliser ψ(max(L, i)) puts keys far right of an early query above 1), and the
    causal form itself on keys j <= i, the pairs a decoder sees."""
    c, L = torch.tensor(0.1, dtype=torch.float64), torch.tensor(16.0, dtype=torch.float64)
    pos = torch.arange(200)
    both = PF.fire_distance(pos, pos, c, L, eps=0.0, bidirectional=True)  # (T, T)
    causal = PF.fire_distance(pos, pos, c, L, eps=0.0)
    torch.testing.assert_close(both, both.T, rtol=0, atol=0)
    assert both.min() >= 0 and both.max() <= 1 + 1e-12
    assert causal.max() > 1.5  # query 0 against key 199: ψ(199) / ψ(16)
    past = torch.ones(200, 200, dtype=torch.bool).tril()
    torch.testing.assert_close(both[past], causal[past], rtol=0, atol=0)
    psi = lambda v: math.log(0.1 * v + 1)  # noqa: E731
    torch.testing.assert_close(both[3, 150].item(), psi(147) / psi(150))
    batch = PF.fire_distance(pos[None, 5:9], pos.expand(2, 200), c, L, bidirectional=True)
    one = PF.fire_distance(pos[5:9], pos, c, L, bidirectional=True)  # (4, 200)
    torch.testing.assert_close(batch, one.expand(2, 4, 200))  # batch dims broadcast


def test_functional_runs_on_array_api_strict() -> None:
    pos = xps.arange(6, dtype=xps.int64)
    c, L = xps.asarray(0.2, dtype=xps.float64), xps.asarray(4.0, dtype=xps.float64)
    got = PF.fire_distance(pos, pos, c, L)
    psi = lambda v: math.log(abs(0.2 * v) + 1)  # noqa: E731
    expected = [[psi(i - j) / (psi(max(4.0, i)) + 1e-6) for j in range(6)] for i in range(6)]
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-14)


def test_init_follows_the_paper_pseudocode() -> None:
    pe = posenc.build("fire", n_heads=4)
    assert pe.mlp_in.weight.shape == (32, 1) and pe.mlp_out.weight.shape == (4, 32)
    assert pe.c.item() == pytest.approx(0.1) and pe.threshold.item() == 512.0
    assert pe.eps == 1e-6


def test_bias_stays_float32_under_bf16() -> None:
    pe = posenc.build("fire", n_heads=2)
    pos = torch.arange(40)
    expected = pe.bias(pos, pos)
    pe = pe.to(torch.bfloat16)
    got = pe.bias(pos, pos)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=0.05, rtol=0.05)


def test_gradcheck_float64() -> None:
    """Every learned parameter (c, threshold scale, both MLP layers) in float64 gradcheck; the
    threshold L = 6.5 lies inside the positions so both branches of max(L, i) are used."""
    pe = BiasCall(posenc.build("fire", n_heads=2, hidden=4, init_threshold=6.5).double())
    names = [n for n, _ in pe.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in pe.parameters())
    q_pos, k_pos = torch.tensor([2, 5, 9]), torch.tensor([0, 1, 2, 4, 5, 8, 9])

    def bias(*values: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(pe, dict(zip(names, values, strict=True)), (q_pos, k_pos))

    assert len(params) == 6
    assert torch.autograd.gradcheck(bias, params)


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"n_heads": 0}, ValueError, "n_heads must be an integer >= 1, got 0"),
        ({"hidden": 0}, ValueError, "hidden must be an integer >= 1, got 0"),
        ({"hidden": 3.0}, TypeError, "hidden must be an int"),
        ({"init_c": 0.0}, ValueError, "init_c must be a finite number > 0, got 0.0"),
        ({"init_threshold": -5.0}, ValueError, "init_threshold must be a finite number > 0"),
        ({"eps": -1e-6}, ValueError, "eps must be a finite number > 0"),
        ({"bidirectional": 1}, TypeError, "bidirectional must be a bool"),
    ],
)
def test_bad_config_raises(config: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        posenc.build("fire", **{"n_heads": 2, **config})


def test_mlp_pieces_equal_the_mlp_and_its_gradients() -> None:
    """The piecewise-linear form is the MLP itself: values and parameter gradients, with
    constant units (w1 = 0, on and off) and two units sharing a kink."""
    torch.manual_seed(3)
    pe = posenc.build("fire", n_heads=3, hidden=8).double()
    with torch.no_grad():
        pe.mlp_in.weight[0, 0], pe.mlp_in.bias[0] = 0.0, 0.5  # constant, on
        pe.mlp_in.weight[1, 0], pe.mlp_in.bias[1] = 0.0, -0.5  # constant, off
        pe.mlp_in.weight[2, 0], pe.mlp_in.bias[2] = 2.0, -1.0  # kink at 0.5 ...
        pe.mlp_in.weight[3, 0], pe.mlp_in.bias[3] = -4.0, 2.0  # ... shared, opposite slope
    x = torch.linspace(-3, 3, 2001, dtype=torch.float64)

    def direct() -> torch.Tensor:
        return pe.mlp_out(torch.relu(pe.mlp_in(x[:, None])))  # (N, H)

    def pieces() -> torch.Tensor:
        w1, b1 = pe.mlp_in.weight[:, 0], pe.mlp_in.bias
        return PF.fire_mlp(x, *PF.fire_mlp_pieces(w1, b1, pe.mlp_out.weight, pe.mlp_out.bias)).T

    torch.testing.assert_close(pieces(), direct(), rtol=1e-12, atol=1e-12)
    params = list(pe.mlp_in.parameters()) + list(pe.mlp_out.parameters())
    g = torch.randn(x.shape[0], 3, dtype=torch.float64)
    expected = torch.autograd.grad(direct(), params, g)
    got = torch.autograd.grad(pieces(), params, g)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
