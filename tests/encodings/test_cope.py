"""CoPE (Golovneva et al. 2024): gates -> contextual positions -> interpolated embeddings."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from posenc import Attention
from posenc import functional as PF
from tests.encodings._helpers import (
    causal_mask,
    heads_of,
    masked_scores,
    merge_heads,
    qkv,
    softmax_attention,
)
from tests.reference import families as ref


def _cope(head_dim: int = 8, n_positions: int = 4) -> posenc.PositionalEncoding:
    pe = posenc.build("cope", head_dim=head_dim, n_positions=n_positions).double()
    with torch.no_grad():
        pe.pos_emb.normal_(generator=torch.Generator().manual_seed(6))
    return pe


@pytest.mark.parametrize("n_positions", [2, 4, 64])
def test_logits_equal_reference(n_positions: int) -> None:
    pe = _cope(n_positions=n_positions)
    q, k, _ = qkv(Tq=5, Tk=7)
    scores = masked_scores(q, k)
    got = pe.relative_logits(scores, q, k, torch.arange(2, 7), torch.arange(7))
    want = ref.cope_logits(q.numpy(), scores.numpy(), pe.pos_emb.detach().numpy())
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-12)


def test_saturated_gates_count_tokens() -> None:
    """Gates all 1 make p_ij = i - j + 1 (tokens from j to i): ordinary relative positions."""
    logits = torch.full((6, 6), 60.0, dtype=torch.float64)
    logits = logits.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
    p = PF.cope_positions(logits, n_positions=100)
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    torch.testing.assert_close(p, torch.where(j <= i, i - j + 1, 0).double())
    assert PF.cope_positions(logits, n_positions=3).max() == 2  # clamped to n_positions - 1


def test_masked_gates_are_zero_with_finite_gradients() -> None:
    logits = torch.tensor(
        [[0.3, -1e4, float("-inf"), 80.0]], dtype=torch.float64, requires_grad=True
    )
    p = PF.cope_positions(logits, n_positions=10)
    want = [sum(1 / (1 + math.exp(-z)) for z in (0.3, 80.0)), 1.0, 1.0, 1.0]
    torch.testing.assert_close(p[0], torch.tensor(want, dtype=torch.float64))
    p.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_numpy_equals_torch() -> None:
    scores = masked_scores(*qkv()[:2])
    per_position = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    p = PF.cope_positions(scores, n_positions=4)
    p_np = PF.cope_positions(scores.numpy(), n_positions=4)
    np.testing.assert_allclose(p_np, p.numpy(), rtol=1e-14)
    got = PF.cope_interpolate(p_np, per_position.numpy())
    np.testing.assert_allclose(got, PF.cope_interpolate(p, per_position).numpy(), rtol=1e-14)


def test_attention_layer_equals_explicit_definition() -> None:
    torch.manual_seed(0)
    pe = _cope(head_dim=8, n_positions=5)
    attn = Attention(24, 3, pe=pe, causal=True).double()
    x = torch.randn(2, 6, 24, dtype=torch.float64)
    q, k, v = heads_of(attn, x)
    logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(8) + causal_mask(6, 6)
    logits = ref.cope_logits(q, logits, pe.pos_emb.detach().numpy())
    with torch.no_grad():
        got = attn(x)
    want = merge_heads(attn, softmax_attention(logits, v))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"n_positions": 1}, ValueError, "n_positions must be an integer >= 2, got 1"),
        ({"n_positions": 4.0}, TypeError, "n_positions must be an int"),
        ({"head_dim": 0}, ValueError, "head_dim must be an integer >= 1, got 0"),
    ],
)
def test_bad_config_raises(config: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        posenc.build("cope", **({"head_dim": 8} | config))


def test_wrong_head_dim_raises() -> None:
    pe = _cope(head_dim=8)
    q, k, _ = qkv(D=6)
    with pytest.raises(ValueError, match="head_dim=8 features, got 6"):
        pe.relative_logits(masked_scores(q, k), q, k, torch.arange(5), torch.arange(5))
