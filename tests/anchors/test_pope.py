"""PoPE against x-transformers."""

from __future__ import annotations

import pytest
import torch

import posenc


@pytest.mark.anchor
def test_matches_x_transformers() -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    T, D, H = 7, 16, 4
    theirs = xt.PolarEmbedding(D, H)
    ours = posenc.build("pope", head_dim=D, n_heads=H)
    with torch.no_grad():
        theirs.learned_bias.uniform_(-7.0, 0.5)
        ours.delta.copy_(theirs.learned_bias[:, 0])
    freqs, bias = theirs(torch.arange(T))
    q, k = torch.randn(2, H, T, D), torch.randn(2, H, T, D)
    want_q = xt.apply_polar_pos_emb(q, freqs)
    want_k = xt.apply_polar_pos_emb(k, freqs + bias)
    got_q, got_k = ours.rotate(q, k, torch.arange(T), torch.arange(T))
    torch.testing.assert_close(
        got_q @ got_k.transpose(-2, -1), want_q @ want_k.transpose(-2, -1), rtol=1e-4, atol=1e-4
    )
    plain = posenc.build("pope", head_dim=D, n_heads=H, phase_bias=False)
    got_q, got_k = plain.rotate(q, k, torch.arange(T), torch.arange(T))
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)  # same feature layout
    torch.testing.assert_close(got_k, xt.apply_polar_pos_emb(k, freqs), rtol=1e-5, atol=1e-5)
