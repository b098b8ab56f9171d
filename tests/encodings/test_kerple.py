"""Kerple: both kernels against the float64 reference; the official parametrisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from tests.encodings.bias_helpers import BiasCall
from tests.reference import bias as ref

Q_POS = torch.tensor([[4, 5, 6], [0, 1, 2]])
K_POS = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 1, 2]])


@pytest.mark.parametrize("variant", ["log", "power"])
def test_bias_matches_reference(variant: str) -> None:
    pe = posenc.build("kerple", n_heads=4, variant=variant)
    r1, r2 = (p.detach().double().tolist() for p in pe.kernel_parameters())
    expected = ref.kerple(Q_POS.numpy(), K_POS.numpy(), r1, r2, variant)
    got = pe.bias(Q_POS, K_POS)
    assert got.shape == (2, 4, 3, 7) and got.dtype == torch.float32
    torch.testing.assert_close(got, torch.from_numpy(expected).float())
    got64 = PF.kerple_bias(
        Q_POS.numpy(), K_POS.numpy(), np.array(r1), np.array(r2), variant=variant
    )
    np.testing.assert_allclose(got64, expected, rtol=1e-14, atol=1e-14)


def test_power_kernel_with_alibi_slopes_and_unit_exponent_is_alibi() -> None:
    pos = torch.arange(20)
    slopes = torch.from_numpy(PF.alibi_slopes(8))
    kerple = PF.kerple_bias(pos, pos, slopes, torch.ones(8, dtype=torch.float64), variant="power")
    alibi = PF.alibi_bias(pos, pos, slopes, bidirectional=True)
    torch.testing.assert_close(kerple, alibi)


@pytest.mark.parametrize(
    ("variant", "r1_high", "r2_high"), [("log", 2.0, 1.0), ("power", 1.0, 2.0)]
)
def test_init_follows_the_official_code(variant: str, r1_high: float, r2_high: float) -> None:
    pe = posenc.build("kerple", n_heads=4096, variant=variant)
    for p, high in ((pe.r1, r1_high), (pe.r2, r2_high)):
        assert 0.0 <= p.min().item() and p.max().item() <= high
        assert abs(p.mean().item() - high / 2) < 0.05 * high  # uniform on (0, high)
    fixed = posenc.build("kerple", n_heads=3, variant=variant, init_r1=0.7, init_r2=0.4)
    assert (fixed.r1 == 0.7).all() and (fixed.r2 == 0.4).all()


def test_parameters_are_clamped_in_value_with_straight_through_gradient() -> None:
    pe = posenc.build("kerple", n_heads=3, variant="power")
    with torch.no_grad():
        pe.r1.copy_(torch.tensor([-1.0, 0.005, 0.5]))
        pe.r2.copy_(torch.tensor([3.0, -0.2, 1.5]))
    r1, r2 = pe.kernel_parameters()
    torch.testing.assert_close(r1, torch.tensor([0.01, 0.01, 0.5]))
    torch.testing.assert_close(r2, torch.tensor([2.0, 0.01, 1.5]))
    bias = pe.bias(torch.arange(5), torch.arange(5))
    expected = ref.kerple(np.arange(5), np.arange(5), r1.tolist(), r2.tolist(), "power")
    torch.testing.assert_close(bias, torch.from_numpy(expected).float())
    bias.sum().backward()
    assert pe.r1.grad is not None and pe.r2.grad is not None
    assert (pe.r1.grad != 0).all() and (pe.r2.grad != 0).all()  # clamped heads can recover
    assert torch.isfinite(pe.r2.grad).all()  # d^r2 at d = 0 has a finite gradient


@pytest.mark.parametrize("variant", ["log", "power"])
def test_gradcheck_float64(variant: str) -> None:
    pos_q, pos_k = torch.tensor([3, 4, 7]), torch.tensor([0, 1, 3, 4, 7])

    def kernel(r1: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
        return PF.kerple_bias(pos_q, pos_k, r1, r2, variant=variant)

    r1 = torch.tensor([0.3, 1.2], dtype=torch.float64, requires_grad=True)
    r2 = torch.tensor([0.6, 1.7], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(kernel, (r1, r2))
    pe = BiasCall(posenc.build("kerple", n_heads=2, variant=variant).double())

    def module(r1: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(pe, {"pe.r1": r1, "pe.r2": r2}, (pos_q, pos_k))

    assert torch.autograd.gradcheck(module, (r1, r2))


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"variant": "cubic"}, r"variant must be one of \('log', 'power'\), got 'cubic'"),
        ({"n_heads": 0}, "n_heads must be an integer >= 1, got 0"),
        ({"eps": 0.0}, "eps must be a finite number > 0, got 0.0"),
        ({"eps": 1.5}, r"eps \(the floor of r1, r2\) must be in \(0, 1\), got 1.5"),
        ({"init_r1": -1.0}, "init_r1 must be a finite number > 0, got -1.0"),
        ({"init_r2": 0.0}, "init_r2 must be a finite number > 0, got 0.0"),
        ({"variant": "power", "init_r2": 2.5}, r"init_r2 must be in \(0, 2.0\] for 'power'"),
    ],
)
def test_bad_config_raises(config: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        posenc.build("kerple", **{"n_heads": 2, **config})


def test_functional_rejects_unknown_variant() -> None:
    r = torch.ones(2)
    with pytest.raises(ValueError, match="variant must be one of"):
        PF.kerple_bias(torch.arange(3), torch.arange(3), r, r, variant="exp")  # type: ignore[arg-type]
