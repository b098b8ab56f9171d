"""attention_weights composes the hooks exactly as Attention does: probs @ v is its output."""

from __future__ import annotations

import pytest
import torch

from posenc.analysis import attention_weights, subject
from posenc.analysis.subjects import D_MODEL, probe_positions, tiny_attention
from posenc.registry import info, names

#: Encodings computing attention from the data (FoX, stick-breaking, PaTH) have no softmax
#: weights to return (``Attention`` refuses ``return_weights``).
WEIGHTED = [n for n in names() if not info(n).cls.capabilities.attention_form]


@pytest.mark.parametrize("name", WEIGHTED)
def test_weights_reproduce_the_attention_output(name: str) -> None:
    attn = tiny_attention(subject(name))
    x = torch.randn(2, 10, D_MODEL, dtype=torch.float64)
    pos = probe_positions(attn.pe, 10)  # (T,) | (T, A) for grid encodings
    with torch.no_grad():
        probs = attention_weights(attn, x, pos)  # (B, H, T, T)
        _, _, v = attn._project(x)
        out = probs @ v.repeat_interleave(attn.n_heads // attn.n_kv_heads, dim=1)
        extra = attn.pe.relative_values(probs, pos, pos)
        out = out if extra is None else out + extra
        expected = attn(x, pos)
    got = attn.proj(out.transpose(1, 2).reshape(2, 10, D_MODEL))
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, attn.n_heads, 10, dtype=torch.float64))
    assert probs.triu(1).abs().max() == 0  # causal
