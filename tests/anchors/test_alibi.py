"""ALiBi against BLOOM (transformers) and x-transformers: slopes, rows, bidirectional bias."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc import functional as PF


@pytest.mark.anchor
@pytest.mark.parametrize("n_heads", [1, 3, 8, 12, 16, 20, 24, 40])
def test_slopes_and_rows_match_bloom(n_heads: int) -> None:
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    T = 9
    mask = torch.ones(2, T, dtype=torch.long)
    bloom = build_alibi_tensor(mask, n_heads, torch.float32).view(2, n_heads, 1, T)
    torch.testing.assert_close(
        bloom[0, :, 0, 1], torch.from_numpy(PF.alibi_slopes(n_heads)).float()
    )
    # BLOOM adds m_h·j to row i; ours adds -m_h·(i - j): the same up to a per-row constant, which
    # softmax ignores, so the attention probabilities agree on the causal (allowed) keys.
    ours = posenc.build("alibi", n_heads=n_heads).bias(torch.arange(T), torch.arange(T))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = torch.randn(2, n_heads, T, T)
    p_ours = torch.softmax((scores + ours).masked_fill(~causal, -math.inf), -1)
    p_bloom = torch.softmax((scores + bloom).masked_fill(~causal, -math.inf), -1)
    torch.testing.assert_close(p_ours, p_bloom)


@pytest.mark.anchor
@pytest.mark.parametrize("n_heads", [4, 12, 16])
def test_bidirectional_bias_matches_x_transformers(n_heads: int) -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    theirs = xt.AlibiPositionalBias(heads=n_heads)
    q_pos = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])
    k_pos = torch.tensor([[0, 1, 2, 3, 4, 5], [2, 4, 8, 16, 32, 64]])
    expected = theirs.forward_custom_pos(q_pos, k_pos)  # (B, H, Tq, Tk)
    ours = posenc.build("alibi", n_heads=n_heads, bidirectional=True).bias(q_pos, k_pos)
    torch.testing.assert_close(ours, expected)
    slopes = torch.tensor(xt.AlibiPositionalBias._get_slopes(n_heads), dtype=torch.float64)
    torch.testing.assert_close(torch.from_numpy(PF.alibi_slopes(n_heads)), slopes)
