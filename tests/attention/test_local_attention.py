"""``Attention(window=W)`` and ``Attention(chunk=C)``: equal to a float64 reference written from
the rule (each query sees the keys less than W positions before it, or its chunk's), in the
full forward and in cached decoding with a ``KVCache(keep=...)`` that holds only those."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.attention import Attention
from posenc.models.kv_cache import KVCache
from posenc.registry import build_for_model

C, H, T = 16, 2, 13


def _reference(layer: Attention, x: torch.Tensor, window: int | None, chunk: int | None):
    """softmax(q kᵀ / √D) v over the allowed keys, query by query, in float64 (NoPE)."""
    D = C // H
    q, k, v = (t.view(*x.shape[:2], H, D).transpose(1, 2) for t in layer.qkv(x).split(C, -1))
    out = torch.zeros_like(q)
    for i in range(x.shape[1]):
        keys = [
            j
            for j in range(i + 1)
            if (window is None or i - j < window) and (chunk is None or i // chunk == j // chunk)
        ]
        s = q[:, :, i : i + 1] @ k[:, :, keys].transpose(-1, -2) / math.sqrt(D)  # (B, H, 1, n)
        out[:, :, i] = (s.softmax(-1) @ v[:, :, keys])[:, :, 0]
    return layer.proj(out.transpose(1, 2).reshape(x.shape))


@pytest.mark.parametrize(("window", "chunk"), [(4, None), (None, 5), (1, None)])
def test_local_attention_equals_reference_full_and_cached(
    window: int | None, chunk: int | None
) -> None:
    torch.manual_seed(0)
    pe = build_for_model("nope", dim=C, n_heads=H, max_len=64)
    layer = Attention(C, H, pe=pe, causal=True, window=window, chunk=chunk).double()
    x = torch.randn(2, T, C, dtype=torch.float64)
    with torch.no_grad():
        expected = _reference(layer, x, window, chunk)
        torch.testing.assert_close(layer(x), expected, rtol=1e-12, atol=1e-12)
        keep = min(n - 1 for n in (window, chunk) if n is not None)
        cache = KVCache(keep=keep)
        steps = [layer(x[:, :6], cache=cache)]
        assert len(cache) <= keep
        for t in range(6, T):
            steps.append(layer(x[:, t : t + 1], cache=cache))
            assert len(cache) <= keep and cache.position_start == t + 1
        torch.testing.assert_close(torch.cat(steps, 1), expected, rtol=1e-12, atol=1e-12)


def test_rotary_sliding_layer_decodes_with_a_short_cache_as_the_full_forward() -> None:
    """RoPE keys keep their positions in a ``keep`` cache (not re-assigned as streaming)."""
    torch.manual_seed(0)
    pe = build_for_model("rope", dim=C, n_heads=H, max_len=64)
    layer = Attention(C, H, pe=pe, causal=True, window=3)
    x = torch.randn(1, T, C)
    with torch.no_grad():
        full = layer(x)
        cache = KVCache(keep=2)
        steps = [layer(x[:, t : t + 1], cache=cache) for t in range(T)]
        assert cache.capacity >= 2 and len(cache) == 2
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-6)


def test_keep_cache_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="exclude each other"):
        KVCache(keep=3, window=4)
    with pytest.raises(ValueError, match="keep"):
        KVCache(keep=-1)
    pe = build_for_model("nope", dim=C, n_heads=H, max_len=64)
    with pytest.raises(ValueError, match="window"):
        Attention(C, H, pe=pe, causal=True, window=0)
    x = torch.randn(1, 2, C)
    with pytest.raises(ValueError, match=r"needs keep >= 3"):
        Attention(C, H, pe=pe, causal=True, window=4)(x, cache=KVCache(keep=2))
    with pytest.raises(ValueError, match="every key"):
        Attention(C, H, pe=pe, causal=True)(x, cache=KVCache(keep=8))
