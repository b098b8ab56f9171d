"""xPos against rotary-embedding-torch and x-transformers."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc import functional as PF


def _centred(x: torch.Tensor, shift: int, D: int) -> torch.Tensor:
    """Ours times ζ_i^(shift/512) per interleaved pair: the anchors rotate at n but scale at
    n - T // 2 (torchscale's centring), which multiplies q by ζ^(-c/512) and k by ζ^(c/512)."""
    zeta = PF.xpos_scale(torch.tensor(shift), D, scale_base=512.0).float()  # (P,)
    return x * zeta.repeat_interleave(2)


def _logits(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1)


@pytest.mark.anchor
def test_matches_rotary_embedding_torch() -> None:
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    T, D = 10, 16
    theirs = rotary_embedding_torch.RotaryEmbedding(dim=D, use_xpos=True, xpos_scale_base=512)
    q, k = torch.randn(2, 3, T, D), torch.randn(2, 3, T, D)
    want_q, want_k = theirs.rotate_queries_and_keys(q, k)
    ours = posenc.build("xpos", head_dim=D, layout="interleaved", scale_base=512.0)
    got_q, got_k = ours.rotate(q, k, torch.arange(T), torch.arange(T))
    torch.testing.assert_close(_centred(got_q, -(T // 2), D), want_q, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(_centred(got_k, T // 2, D), want_k, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(_logits(got_q, got_k), _logits(want_q, want_k), rtol=1e-5, atol=1e-5)


@pytest.mark.anchor
def test_matches_x_transformers() -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    T, D = 12, 16
    theirs = xt.RotaryEmbedding(D, use_xpos=True, scale_base=512)
    freqs, scale = theirs(torch.arange(T))
    q, k = torch.randn(2, 3, T, D), torch.randn(2, 3, T, D)
    want_q = xt.apply_rotary_pos_emb(q, freqs, scale)
    want_k = xt.apply_rotary_pos_emb(k, freqs, scale**-1)
    ours = posenc.build("xpos", head_dim=D, layout="interleaved", scale_base=512.0)
    got_q, got_k = ours.rotate(q, k, torch.arange(T), torch.arange(T))
    torch.testing.assert_close(_centred(got_q, -(T // 2), D), want_q, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(_centred(got_k, T // 2, D), want_k, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(_logits(got_q, got_k), _logits(want_q, want_k), rtol=1e-5, atol=1e-5)
