"""The additive tables, CoPE, PoPE, the array-API helper and the registry (the Flax twins are
in ``tests/flax/test_tables_cope_pope.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from posenc.functional._xp import take_along_last
from posenc.registry import build_for_model


def test_sinusoidal_table_equals_vaswani_formula() -> None:
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...), at positions past 10^5."""
    pos = np.array([[0, 1, 7], [99_998, 99_999, 100_000]])
    d = 10
    want = np.zeros((*pos.shape, d))
    for idx in np.ndindex(*pos.shape):
        for i in range(d // 2):
            angle = int(pos[idx]) / 10000.0 ** (2 * i / d)
            want[(*idx, 2 * i)], want[(*idx, 2 * i + 1)] = math.sin(angle), math.cos(angle)
    got = posenc.build("sinusoidal", dim=d).double().embed(torch.zeros(2, 3, d), torch.tensor(pos))
    np.testing.assert_allclose(got.numpy(), want.astype(np.float32), rtol=0, atol=1e-7)
    # float64 angles near 1e5 rad carry ~1e-11 rad of rounding, whichever way they are formed
    np.testing.assert_allclose(PF.sinusoidal_table(pos, d), want, rtol=0, atol=1e-10)


def test_take_along_last_broadcasts_on_torch_as_on_numpy() -> None:
    """An index with a leading dim of 1 broadcasts (the array API's take_along_axis, NumPy and
    JAX); torch's gather silently read only the first row of x instead."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    index = torch.randint(0, 4, (1, 3, 5), generator=g)
    want = np.take_along_axis(x.numpy(), index.numpy(), axis=-1)  # (2, 3, 5)
    got = take_along_last(x, index)
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(take_along_last(x.numpy(), index.numpy()), want)


def test_cope_interpolate_broadcast_agrees_between_torch_and_numpy() -> None:
    g = torch.Generator().manual_seed(1)
    positions = 3 * torch.rand(1, 2, 5, 5, generator=g, dtype=torch.float64)  # shared by rows
    per_position = torch.randn(2, 2, 5, 4, generator=g, dtype=torch.float64)  # (B, H, Tq, P)
    want = PF.cope_interpolate(positions.numpy(), per_position.numpy())
    got = PF.cope_interpolate(positions, per_position)
    assert tuple(got.shape) == want.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-14, atol=1e-14)


SCORES_ERROR = r"scores must have shape \(B, H, Tq, Tk\) = \(2, 3, 5, 5\)"


@pytest.mark.parametrize(
    "scores_shape", [(2, 3, 3, 5), (1, 3, 5, 5), (2, 1, 5, 5), (2, 3, 5, 4)], ids=str
)
def test_cope_rejects_scores_that_do_not_match_q_and_k(scores_shape: tuple[int, ...]) -> None:
    """scores (B, H, Tq, Tk) must be q's (B, H, Tq) and k's Tk: a mismatched one gave logits
    from a subset of the query rows, silently."""
    pe = posenc.build("cope", head_dim=8, n_positions=4)
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    scores = torch.randn(scores_shape)
    with pytest.raises(ValueError, match=SCORES_ERROR):
        pe.relative_logits(scores, q, k, torch.arange(5), torch.arange(5))


def test_cope_per_row_positions_and_offsets_change_nothing() -> None:
    """Contextual positions come from the gates, so explicit per-row position ids and offsets
    leave the logits unchanged."""
    pe = posenc.build("cope", head_dim=8, n_positions=5).double()
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 3, 4, 8, generator=g, dtype=torch.float64) for _ in range(2))
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(
        ~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf")
    )
    base = pe.relative_logits(scores, q, k, torch.arange(4), torch.arange(4))
    rows = torch.tensor([[10, 11, 12, 13], [1000, 1001, 1002, 1003]])
    torch.testing.assert_close(pe.relative_logits(scores, q, k, rows, rows), base)


def test_pope_polar_rejects_sin_of_another_width() -> None:
    """cos was checked against x's D features, sin was not: a (..., 1) sin broadcast silently."""
    x = torch.randn(2, 4, 6)
    with pytest.raises(ValueError, match="PoPE needs one phase per feature: x has 6, sin has 1"):
        PF.pope_polar(x, torch.ones(4, 6), torch.ones(4, 1))


@pytest.mark.parametrize(
    ("geometry", "match"),
    [
        ({"dim": 64, "n_heads": 0}, "n_heads must be an integer >= 1, got 0"),
        ({"dim": 60, "n_heads": 7}, "dim must be divisible by n_heads, got 60 and 7"),
    ],
)
def test_build_for_model_rejects_bad_head_split(geometry: dict, match: str) -> None:
    """n_heads = 0 raised ZeroDivisionError; dim 60 with 7 heads built head_dim 8 silently."""
    with pytest.raises(ValueError, match=match):
        build_for_model("rope", max_len=16, **geometry)
