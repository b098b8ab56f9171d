"""Offset-only biases through the zero-copy Toeplitz view equal the dense and blockwise paths."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.attention.backends import offset_table_for
from posenc.kernels.flex import OffsetTable
from posenc.kernels.toeplitz import arithmetic_start, toeplitz_bias_attention

NAMES = ["alibi", "t5", "kerple"]


def _toeplitz(q, k, v, pe, q_pos, k_pos, **kwargs):  # type: ignore[no-untyped-def]
    """The kernel with the encoding's bias at every offset of the call (as ``Attention``'s
    backend reads it); a one-column table where there are no positions to size one by."""
    table = offset_table_for(pe, q_pos, k_pos, q.shape[-3]) or OffsetTable(torch.zeros(4, 1), 0)
    return toeplitz_bias_attention(q, k, v, table, q_pos, k_pos, **kwargs)


def _dense(q, k, v, pe, q_pos, k_pos, causal):  # type: ignore[no-untyped-def]
    """softmax(q k^T / sqrt(D) + bias, causal by cache index) v with the whole (T, L) bias."""
    T, L = q.shape[2], k.shape[2]
    bias = pe.bias(q_pos, k_pos).expand(q.shape[0], q.shape[1], T, L).to(q.dtype)
    if causal:
        allowed = torch.ones(T, L, dtype=torch.bool).tril(L - T)
        bias = bias.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias, enable_gqa=k.shape[1] != q.shape[1]
    )


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("T", "L", "a"), [(37, 37, 0), (20, 53, 33), (9, 9, 1000)])
def test_functional_matches_dense(name: str, causal: bool, T: int, L: int, a: int) -> None:
    """Consecutive positions with a cache prefix (L > T) and a start offset; blocks of 8."""
    torch.manual_seed(0)
    pe = posenc.build_for_model(name, dim=32, n_heads=4, max_len=2048)
    q, k, v = torch.randn(2, 4, T, 8), torch.randn(2, 2, L, 8), torch.randn(2, 2, L, 8)
    q_pos = torch.arange(a + L - T, a + L)
    k_pos = torch.arange(a, a + L)[None].expand(2, L)  # (B, L) with equal rows
    with torch.no_grad():
        got = _toeplitz(q, k, v, pe, q_pos, k_pos, causal=causal, block=8)
        expected = _dense(q, k, v, pe, q_pos, k_pos, causal)
    assert got is not None
    torch.testing.assert_close(got, expected, atol=2e-6, rtol=1e-5)


def test_non_consecutive_positions_fall_back() -> None:
    assert arithmetic_start(torch.arange(5, 9)) == 5
    assert arithmetic_start(torch.tensor([[0, 1, 2], [1, 2, 3]])) is None  # rows differ
    assert arithmetic_start(torch.tensor([0, 2, 4])) is None
    q, k, v = torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8)
    pe = posenc.build("alibi", n_heads=4)
    gapped = torch.tensor([0, 1, 2, 5, 6, 7])
    assert _toeplitz(q, k, v, pe, gapped, gapped, causal=True) is None


def _pair(name: str, causal: bool) -> tuple[posenc.Attention, posenc.Attention]:
    torch.manual_seed(0)
    pe = posenc.build_for_model(name, dim=32, n_heads=4, max_len=256)
    blocks = posenc.Attention(32, 4, pe=pe, causal=causal, n_kv_heads=2, bias_backend="blocks")
    auto = posenc.Attention(32, 4, pe=pe, causal=causal, n_kv_heads=2)
    auto.load_state_dict(blocks.state_dict())
    return blocks, auto


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [True, False])
def test_attention_default_equals_blocks(name: str, causal: bool) -> None:
    blocks, auto = _pair(name, causal)
    x = torch.randn(2, 300, 32)  # 300 > the causal block: several blocks
    for pos in (None, torch.arange(50, 350), torch.arange(300) * 2):  # last: not consecutive
        with torch.no_grad():
            torch.testing.assert_close(auto(x, pos), blocks(x, pos), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [True, False])
def test_training_gradients_equal_blocks(name: str, causal: bool) -> None:
    """Gradients through the view, learned tables included (T5's buckets, Kerple's r1/r2: the
    window gradients summed back onto the per-offset table), equal the gathered blocks'."""
    blocks, auto = _pair(name, causal)
    blocks, auto = blocks.double(), auto.double()  # one shared encoding, now float64
    x = torch.randn(2, 270, 32, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(7, 277)
    grads = []
    for layer in (auto, blocks):
        x.grad = None
        layer.zero_grad(set_to_none=True)
        layer(x, pos).square().sum().backward()
        grads.append([x.grad, *(p.grad for p in layer.parameters())])
    assert any(p.requires_grad for p in auto.pe.parameters()) == (name != "alibi")
    for g, e in zip(*grads, strict=True):
        assert g is not None and e is not None
        torch.testing.assert_close(g, e, atol=1e-10, rtol=1e-9)


def test_bf16_matches_blocks_and_decode_with_cache_still_works() -> None:
    blocks, auto = _pair("alibi", True)
    blocks, auto = blocks.to(torch.bfloat16), auto.to(torch.bfloat16)
    x = torch.randn(1, 40, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(auto(x).float(), blocks(x).float(), atol=2e-2, rtol=2e-2)
        full = auto(x)
        cache = posenc.KVCache()
        steps = [auto(x[:, :30], cache=cache)] + [
            auto(x[:, t : t + 1], cache=cache) for t in range(30, 40)
        ]
    torch.testing.assert_close(torch.cat(steps, 1).float(), full.float(), atol=3e-2, rtol=3e-2)


def test_explicit_scale_is_used() -> None:
    pe = posenc.build("alibi", n_heads=2)
    q, k, v = torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    pos = torch.arange(5)
    scale = 0.5 / math.sqrt(16)
    got = _toeplitz(q, k, v, pe, pos, pos, causal=False, scale=scale)
    bias = pe.bias(pos, pos).expand(1, 2, 5, 5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    assert got is not None
    torch.testing.assert_close(got, expected)


def test_a_subclass_rewriting_bias_loses_the_offset_only_claim() -> None:
    from posenc.encodings.bias import ALiBi
    from posenc.encodings.capabilities import Capabilities

    class Rewritten(ALiBi):
        def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, **_: Any) -> torch.Tensor | None:
            out = super().bias(q_pos, k_pos)
            return None if out is None else out * (1 + q_pos[..., :, None].float())

    class Declared(Rewritten):
        capabilities = Capabilities(bias="offset")

        def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, **_: Any) -> torch.Tensor | None:
            return ALiBi.bias(self, q_pos, k_pos)

    assert ALiBi.capabilities.bias == "offset" and Rewritten.capabilities.bias == "positions"
    assert Declared.capabilities.bias == "offset"


def test_empty_positions_and_short_causal_keys_decline() -> None:
    """No queries (T = 0), no batch rows (B = 0) or a causal call with fewer keys than queries
    (rows that see no key): None, the caller's blocks, instead of a crash."""
    assert arithmetic_start(torch.zeros(0, dtype=torch.long)) is None
    assert arithmetic_start(torch.zeros(0, 5, dtype=torch.long)) is None
    pe = posenc.build("alibi", n_heads=4)
    empty = torch.randn(1, 4, 0, 8)
    none = torch.arange(0)
    for causal in (True, False):
        assert _toeplitz(empty, empty, empty, pe, none, none, causal=causal) is None
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 4, 4, 8)
    q_pos, k_pos = torch.arange(6), torch.arange(4)
    assert _toeplitz(q, k, k, pe, q_pos, k_pos, causal=True, block=1) is None


def test_bad_inputs_raise_clear_errors() -> None:
    pe = posenc.build("alibi", n_heads=4)
    q, k = torch.randn(1, 4, 10, 8), torch.randn(1, 2, 10, 8)
    pos = torch.arange(10)

    def call(q=q, k=k, v=k, q_pos=pos, k_pos=pos, pe=pe):  # type: ignore[no-untyped-def]
        return _toeplitz(q, k, v, pe, q_pos, k_pos, causal=False)

    with pytest.raises(ValueError, match=r"q_pos must have shape \(10,\) or \(1, 10\), got \(3,\)"):
        call(q_pos=torch.arange(3))  # was read for its start only
    with pytest.raises(ValueError, match=r"k_pos must have shape \(10,\)"):
        call(k_pos=torch.arange(4))
    with pytest.raises(TypeError, match="k_pos must be an integer tensor"):
        call(k_pos=pos.float())
    with pytest.raises(ValueError, match="q must have 4 dimensions"):
        call(q=q[0])
    with pytest.raises(ValueError, match="k and v must be"):
        call(v=torch.randn(1, 2, 10, 4))
    with pytest.raises(TypeError, match="q, k, v must share a dtype"):
        call(q=q.double())
    with pytest.raises(ValueError, match="'alibi' gives a bias for 3 heads, attention has 4"):
        call(pe=posenc.build("alibi", n_heads=3))
    table = offset_table_for(pe, pos, pos, 4)
    assert table is not None
    with pytest.raises(
        ValueError, match=r"offset table must be \(H, n\) with H = 4, got \(3, 19\)"
    ):
        toeplitz_bias_attention(
            q, k, k, OffsetTable(table.values[:3], table.lo), pos, pos, causal=False
        )
    with pytest.raises(ValueError, match=r"covers offsets -8..9, the call needs -9..9"):
        toeplitz_bias_attention(
            q, k, k, OffsetTable(table.values[:, 1:], -8), pos, pos, causal=False
        )
