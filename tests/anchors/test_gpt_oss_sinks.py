"""Learned sink logits against transformers' gpt-oss eager attention
(``transformers.models.gpt_oss.modeling_gpt_oss.eager_attention_forward``): the functional
forms and ``Attention(sink_logits=True)`` on the same projections, grouped heads included."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import posenc
from posenc import functional as PF
from posenc.attention import Attention, positions_from_padding
from posenc.models import KVCache

pytestmark = pytest.mark.anchor
B, H, Hkv, T, D = 2, 4, 2, 11, 8


def gpt_oss(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, mask=None):
    """gpt-oss's eager attention, (B, H, T, D) in and out, causal unless ``mask`` (additive)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    module = SimpleNamespace(
        num_key_value_groups=q.shape[1] // k.shape[1], sinks=sinks, training=False
    )
    if mask is None:
        T, L = q.shape[2], k.shape[2]
        causal = torch.ones(T, L, dtype=torch.bool).tril(L - T)
        mask = torch.zeros(T, L, dtype=q.dtype).masked_fill(~causal, -math.inf)
    out, _ = eager_attention_forward(module, q, k, v, mask, scaling=q.shape[-1] ** -0.5)
    return out.transpose(1, 2)  # theirs is (B, T, H, D)


def test_functional_forms_match_gpt_oss() -> None:
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, Hkv, T, D), torch.randn(B, Hkv, T, D)
    q, k, v = q.double(), k.double(), v.double()
    sinks = torch.randn(H, dtype=torch.float64) * 2
    want = gpt_oss(q, k, v, sinks)
    torch.testing.assert_close(PF.attention_with_sinks(q, k, v, sinks, block_size=4), want)
    decode = PF.attention_with_sinks(q[:, :, -3:], k, v, sinks, block_size=4)
    torch.testing.assert_close(decode, gpt_oss(q[:, :, -3:], k, v, sinks))
    scores = (q @ k.repeat_interleave(H // Hkv, 1).transpose(-1, -2)) / math.sqrt(D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    probs = PF.softmax_with_sinks(scores.masked_fill(~causal, -math.inf), sinks)
    torch.testing.assert_close(probs @ v.repeat_interleave(H // Hkv, 1), want)


def layer(n_kv_heads: int = Hkv) -> Attention:
    torch.manual_seed(0)
    attn = Attention(
        32, H, pe=posenc.build("nope"), causal=True, n_kv_heads=n_kv_heads, sink_logits=True
    ).double()
    with torch.no_grad():
        attn.sink_logits.copy_(torch.randn(H, dtype=torch.float64))
    return attn


@pytest.mark.parametrize("n_kv_heads", [H, Hkv])
def test_attention_layer_matches_gpt_oss(n_kv_heads: int) -> None:
    attn = layer(n_kv_heads)
    x = torch.randn(B, T, 32, dtype=torch.float64)
    with torch.no_grad():
        q, k, v = attn._project(x)
        theirs = gpt_oss(q, k, v, attn.sink_logits)  # (B, H, T, D)
        want = attn.proj(theirs.transpose(1, 2).reshape(B, T, 32))
        torch.testing.assert_close(attn(x), want)


def test_attention_layer_sinks_decode_pad_and_learn() -> None:
    attn = layer()
    x = torch.randn(B, T, 32, dtype=torch.float64)
    with torch.no_grad():
        full = attn(x)
        cache = KVCache()
        steps = [attn(x[:, :4], cache=cache)] + [
            attn(x[:, t : t + 1], cache=cache) for t in range(4, T)
        ]
        torch.testing.assert_close(torch.cat(steps, dim=1), full)
        mask = torch.ones(B, T, dtype=torch.bool)
        mask[1, :3] = False  # row 1 left-padded by 3
        padded = attn(x, positions_from_padding(mask), padding_mask=mask)
        torch.testing.assert_close(padded[1:, 3:], attn(x[1:, 3:]))
    attn(x).sum().backward()
    assert attn.sink_logits.grad is not None and attn.sink_logits.grad.abs().sum() > 0
    assert "sink_logits" in dict(attn.named_parameters())


def test_sink_logits_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="sink_logits must be a bool"):
        Attention(32, 4, pe=posenc.build("nope"), causal=True, sink_logits=1)  # type: ignore[arg-type]
