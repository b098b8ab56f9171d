"""The family formulas run unchanged on a strict array-API namespace (the road to JAX)."""

from __future__ import annotations

import array_api_strict as xps
import numpy as np
import torch

from posenc import functional as PF


def _strict(t: torch.Tensor):  # type: ignore[no-untyped-def]
    return xps.asarray(t.numpy())


def _close(got, want: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-12, atol=1e-13)


def test_shaw_formulas() -> None:
    g = torch.Generator().manual_seed(0)
    q, table = (
        torch.randn(2, 3, 4, 8, generator=g, dtype=torch.float64),
        torch.randn(5, 8, generator=g, dtype=torch.float64),
    )
    probs = torch.softmax(torch.randn(2, 3, 4, 6, generator=g, dtype=torch.float64), dim=-1)
    q_pos, k_pos = torch.tensor([[2, 3, 4, 5], [0, 1, 2, 3]]), torch.arange(6)
    index = PF.shaw_relative_index(q_pos, k_pos, max_distance=2)
    s_index = PF.shaw_relative_index(_strict(q_pos), _strict(k_pos), max_distance=2)
    _close(s_index, index)
    _close(
        PF.relative_key_logits(_strict(q), _strict(table), s_index),
        PF.relative_key_logits(q, table, index),
    )
    _close(
        PF.relative_value_output(_strict(probs), _strict(table), s_index),
        PF.relative_value_output(probs, table, index),
    )


def test_transformer_xl_terms() -> None:
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64) for _ in range(2))
    r_proj = torch.randn(8, 6, generator=g, dtype=torch.float64)
    u, v = (torch.randn(2, 4, generator=g, dtype=torch.float64) for _ in range(2))
    pos = torch.arange(5)
    want = PF.transformer_xl_terms(q, k, pos, pos, r_proj=r_proj, u=u, v=v)
    got = PF.transformer_xl_terms(
        *(_strict(t) for t in (q, k, pos, pos)), r_proj=_strict(r_proj), u=_strict(u), v=_strict(v)
    )
    _close(got, want)


def test_xpos_and_pope() -> None:
    pos = torch.tensor([0, 5, 100, 2000])
    _close(PF.xpos_scale(_strict(pos), 8), PF.xpos_scale(pos, 8))
    x = torch.randn(2, 4, 6, dtype=torch.float64)
    ang = torch.randn(4, 6, dtype=torch.float64)
    _close(
        PF.pope_polar(_strict(x), _strict(ang.cos()), _strict(ang.sin())),
        PF.pope_polar(x, ang.cos(), ang.sin()),
    )
    _close(PF.softplus(_strict(x)), torch.nn.functional.softplus(x))


def test_cope_formulas() -> None:
    logits = torch.randn(2, 5, 5, dtype=torch.float64).masked_fill(
        ~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")
    )
    per_position = torch.randn(2, 5, 3, dtype=torch.float64)
    p = PF.cope_positions(logits, n_positions=3)
    s_p = PF.cope_positions(_strict(logits), n_positions=3)
    _close(s_p, p)
    _close(PF.cope_interpolate(s_p, _strict(per_position)), PF.cope_interpolate(p, per_position))


def test_scatter_add_last_matches_one_hot_sum_and_gradient() -> None:
    """torch's scatter-add path equals the one-hot sum (NumPy), forward and backward; rows no
    index names stay 0 and an index broadcast over heads is expanded, not misread."""
    from posenc.functional._xp import scatter_add_last, take_along_last

    g = torch.Generator().manual_seed(1)
    values = torch.randn(2, 3, 4, 7, generator=g, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 4, (2, 1, 4, 7), generator=g)  # size 6: rows 4 and 5 unused
    got = scatter_add_last(values, index, 6)  # (2, 3, 4, 6)
    want = scatter_add_last(values.detach().numpy(), index.numpy(), 6)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-13)
    assert torch.all(got[..., 4:] == 0)
    weights = torch.randn(2, 3, 4, 6, generator=g, dtype=torch.float64)
    (got * weights).sum().backward()
    assert values.grad is not None  # d/dv_i = weights[index_i]
    want_grad = take_along_last(weights.numpy(), np.broadcast_to(index.numpy(), values.shape))
    np.testing.assert_allclose(values.grad.numpy(), want_grad, rtol=1e-12, atol=1e-13)
