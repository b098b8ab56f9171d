"""Streaming past the window with attention sinks: ``KVCache(window=W, sinks=S)``.

Reference (Xiao et al. 2023, StreamingLLM, arXiv:2309.17453, sec. 3.2): decoding token t attends
to the first S tokens and the last W (itself included), with positions assigned inside the
cache: the L kept keys at 0..L-1 and the query at L-1.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc.attention import Attention
from posenc.models import KVCache
from tests.reference.bias import alibi, alibi_slopes
from tests.reference.rotary import rope_vector

W, S = 6, 2
STEPS = 4 * W  # decode 4x the window
STREAMABLE = [
    n
    for n in posenc.names(axes=1)
    if n not in {"cope", "learned", "randomized", "shaw"}
    and not posenc.info(n).cls.capabilities.attention_form  # (refused: test_data_dependent)
]
STREAMABLE = [n for n in STREAMABLE if n not in {"sinusoidal", "transformer_xl"}]


def kept(t: int) -> list[int]:
    """Tokens token t attends to: the first S and the last W up to t, in order."""
    return sorted(set(range(min(S, t + 1))) | set(range(max(0, t - W + 1), t + 1)))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def reference_step(attn: Attention, x: np.ndarray, t: int, bias: str) -> np.ndarray:
    """float64 output (C,) of token t from the formula: attention over kept(t) with the L keys
    at positions 0..L-1 and the query at L-1 (RoPE rotations or an ALiBi bias)."""
    H, Hkv, D = attn.n_heads, attn.n_kv_heads, attn.head_dim
    w = attn.qkv.weight.detach().double().numpy()
    q_all, k_all, v_all = np.split(x @ w.T, [H * D, H * D + Hkv * D], axis=-1)
    idx = kept(t)
    L = len(idx)
    slopes = alibi_slopes(H)
    heads = []
    for h in range(H):
        g = h // (H // Hkv)  # the key/value head this query head reads
        q = q_all[t, h * D : (h + 1) * D]
        ks = [k_all[i, g * D : (g + 1) * D] for i in idx]
        vs = np.stack([v_all[i, g * D : (g + 1) * D] for i in idx])
        if bias == "rope":
            q = rope_vector(q, L - 1)
            ks = [rope_vector(k, j) for j, k in enumerate(ks)]
        scores = np.array([q @ k for k in ks]) / np.sqrt(D)
        if bias == "alibi":
            scores = scores + alibi(np.array([L - 1]), np.arange(L), slopes, False)[0, h, 0]
        heads.append(_softmax(scores) @ vs)
    return np.concatenate(heads) @ attn.proj.weight.detach().double().numpy().T


@pytest.mark.parametrize("encoding", ["rope", "alibi"])
def test_decoding_4x_the_window_equals_the_formula(encoding: str) -> None:
    """One token at a time for 4x the window: every output finite and equal (float64) to the
    reference built from the formula."""
    torch.manual_seed(0)
    D, H = 8, 4
    pe = posenc.build(encoding, **({"head_dim": D} if encoding == "rope" else {"n_heads": H}))
    attn = Attention(H * D, H, pe=pe, causal=True, n_kv_heads=2).double().eval()
    x = torch.randn(1, STEPS, H * D, dtype=torch.float64)
    cache = KVCache(window=W, sinks=S)
    with torch.no_grad():
        out = torch.cat([attn(x[:, t : t + 1], cache=cache) for t in range(STEPS)], dim=1)
    assert torch.isfinite(out).all()
    assert len(cache) == S + W - 1
    want = np.stack([reference_step(attn, x[0].numpy(), t, encoding) for t in range(STEPS)])
    np.testing.assert_allclose(out[0].numpy(), want, atol=1e-12, rtol=1e-10)


def _one_layer(encoding: str, n_layers: int = 1) -> posenc.TinyTransformer:
    torch.manual_seed(1)
    model = posenc.TinyTransformer(
        vocab_size=19, pe=encoding, d_model=32, n_heads=4, n_layers=n_layers, max_len=128
    ).double()
    with torch.no_grad():  # larger weights than the 0.02 init: position effects well above rounding
        for p in model.parameters():
            p.mul_(8.0 if p.ndim > 1 else 1.0)
    return model.eval()


@pytest.mark.parametrize("encoding", STREAMABLE)
def test_streamed_model_equals_a_fresh_forward_on_the_kept_tokens(encoding: str) -> None:
    """A one-layer model's keys and values depend on their token alone, so its streamed logits
    at step t are those of a fresh forward (no cache) on kept(t) at positions 0..L-1."""
    model = _one_layer(encoding)
    tokens = torch.randint(0, 19, (2, STEPS), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache(window=W, sinks=S)
    with torch.no_grad():
        streamed = torch.cat([model(tokens[:, t : t + 1], cache=cache) for t in range(STEPS)], 1)
        fresh = torch.stack([model(tokens[:, kept(t)])[:, -1] for t in range(STEPS)], dim=1)
    assert torch.isfinite(streamed).all()
    torch.testing.assert_close(streamed, fresh, atol=1e-10, rtol=1e-10)


def test_a_deep_model_streams_finite_and_matches_the_plain_cache_within_the_window() -> None:
    model = _one_layer("rope", n_layers=3)
    tokens = torch.randint(0, 19, (1, STEPS), generator=torch.Generator().manual_seed(3))
    stream, plain = model.new_cache(window=W, sinks=S), model.new_cache()
    with torch.no_grad():
        a = torch.cat([model(tokens[:, t : t + 1], cache=stream) for t in range(STEPS)], 1)
        b = torch.cat([model(tokens[:, t : t + 1], cache=plain) for t in range(STEPS)], 1)
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a[:, : S + W], b[:, : S + W], atol=1e-10, rtol=1e-10)
    assert not torch.allclose(a[:, -1], b[:, -1])  # past the window the streams differ
    assert [len(c) for c in stream] == [S + W - 1] * 3 and len(plain[0]) == STEPS


def test_a_long_prefill_then_decoding_keeps_sinks_and_window() -> None:
    """A chunk attends to the cache plus all its tokens; the next step keeps the first S and
    the latest W - 1 of them. For one layer (keys of a token alone) decoding after a 3W-token
    prefill equals decoding after token-by-token steps."""
    torch.manual_seed(4)
    attn = Attention(16, 2, pe=posenc.build("rope", head_dim=8), causal=True).double().eval()
    x = torch.randn(1, STEPS, 16, dtype=torch.float64)
    chunked, single = KVCache(window=W, sinks=S), KVCache(window=W, sinks=S)
    with torch.no_grad():
        attn(x[:, : 3 * W], cache=chunked)
        for t in range(3 * W):
            attn(x[:, t : t + 1], cache=single)
        a = [attn(x[:, t : t + 1], cache=chunked) for t in range(3 * W, STEPS)]
        b = [attn(x[:, t : t + 1], cache=single) for t in range(3 * W, STEPS)]
    torch.testing.assert_close(torch.cat(a, 1), torch.cat(b, 1), atol=1e-12, rtol=1e-12)


def test_streaming_under_autograd_equals_inference() -> None:
    model = _one_layer("rope", n_layers=2)
    tokens = torch.randint(0, 19, (1, 3 * W), generator=torch.Generator().manual_seed(5))
    logits = []
    for grad in (False, True):
        cache = model.new_cache(window=W, sinks=S)
        with torch.set_grad_enabled(grad):
            logits.append(
                torch.cat([model(tokens[:, t : t + 1], cache=cache) for t in range(3 * W)], 1)
            )
    logits[1].sum().backward()
    assert all(p.grad is not None for p in model.blocks[0].attn.qkv.parameters())
    torch.testing.assert_close(logits[1].detach(), logits[0], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(
    ("encoding", "match"),
    [
        ("sinusoidal", "adds positions to the token embeddings"),
        ("learned", "adds positions to the token embeddings"),
        ("shaw", "relative terms"),
        ("transformer_xl", "relative terms"),
        ("rope_2d", "2 position axes"),
    ],
)
def test_encodings_streaming_cannot_reassign_are_refused(encoding: str, match: str) -> None:
    model = posenc.TinyTransformer(vocab_size=11, pe=encoding, d_model=16, n_heads=2, max_len=32)
    with pytest.raises(ValueError, match=match):
        model(torch.zeros(1, 3, dtype=torch.long), cache=model.new_cache(window=4))


def test_bad_streaming_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="window must be an int"):
        KVCache(window=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        KVCache(window=0)
    with pytest.raises(ValueError, match="sinks must be an integer >= 0"):
        KVCache(window=4, sinks=-1)
    with pytest.raises(ValueError, match="needs a window"):
        KVCache(sinks=4)
    model = _one_layer("rope")
    idx = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="assigns positions inside the cache"):
        model(idx, torch.arange(3), cache=model.new_cache(window=4))
    pad, cache = torch.tensor([[False, True, True]]), model.new_cache(window=4)
    with pytest.raises(ValueError, match="unpadded"):
        model(idx, padding_mask=pad, cache=cache)
