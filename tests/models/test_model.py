"""Review of Attention / TinyTransformer / KVCache / position helpers: gradients through cached
decoding, chunked prefill, and input checks of the position helpers."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.attention import CachedKeys, decode_positions
from posenc.models import KVCache

ALL = posenc.names(axes=1)  # sequences; grids: test_grid_attention.py


def _model(name: str, n_kv_heads: int | None = None) -> posenc.TinyTransformer:
    torch.manual_seed(0)
    model = posenc.TinyTransformer(
        vocab_size=23, pe=name, d_model=32, n_heads=4, n_kv_heads=n_kv_heads, max_len=64
    ).double()
    with torch.no_grad():  # larger weights than the 0.02 init: position effects well above rounding
        for p in model.parameters():
            p.mul_(10.0 if p.ndim > 1 else 1.0)
    return model.eval()


def _tokens(B: int = 2, T: int = 12) -> torch.Tensor:
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("name", ALL)
def test_gradients_through_cached_decoding_equal_the_full_forward(name: str) -> None:
    """Chunked prefill, then one token at a time, with autograd on: the same logits and the
    same gradients as one full forward. The cache used to write each step in place into the
    buffer earlier steps had read, so backward raised "modified by an inplace operation"."""
    model, idx = _model(name, n_kv_heads=2), _tokens()
    weights = torch.randn(
        2, 12, 23, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    grads = []
    for chunks in ([(0, 12)], [(0, 4), (4, 7)] + [(t, t + 1) for t in range(7, 12)]):
        model.zero_grad(set_to_none=True)
        cache = model.new_cache() if len(chunks) > 1 else None
        logits = torch.cat([model(idx[:, s:e], cache=cache) for s, e in chunks], dim=1)
        (logits * weights).sum().backward()
        grads.append((logits.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (full, full_grads), (cached, cached_grads) = grads
    torch.testing.assert_close(cached, full, atol=1e-10, rtol=1e-10)
    for n, g in full_grads.items():
        if g is None:
            assert cached_grads[n] is None, n
        else:
            torch.testing.assert_close(cached_grads[n], g, atol=1e-9, rtol=1e-9, msg=n)


def test_kv_cache_keeps_earlier_views_intact_under_autograd() -> None:
    """Views an append returned stay what they were after later appends (autograd versions too)."""
    cache = KVCache()

    def entries(t0: int, T: int, requires_grad: bool) -> CachedKeys:
        k = torch.arange(t0, t0 + T, dtype=torch.float64).view(1, 1, T, 1).expand(1, 2, T, 3)
        k = k.clone().requires_grad_(requires_grad)
        pos = torch.arange(t0, t0 + T)[None]
        return CachedKeys(
            k, 2 * k, pos, torch.ones(1, T, dtype=torch.bool), torch.zeros(1, T, dtype=torch.long)
        )

    first = cache.append(entries(0, 3, True))
    loss = (first.k * first.v).sum()  # mul saves both views for its backward
    for t in range(3, 40):  # past the first capacity (16) and its doubling
        cache.append(entries(t, 1, True))
    loss.backward()  # no in-place write reached first's buffer
    all_keys = cache.append(entries(40, 1, False))
    assert all_keys.k[0, 0, :, 0].tolist() == list(range(41))
    assert all_keys.pos[0].tolist() == list(range(41))
    assert len(cache) == 41


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((2.5, 2), TypeError),
        ((2, 2.0), TypeError),
        ((-1, 2), ValueError),
        ((3, -1), ValueError),
    ],
)
def test_decode_positions_rejects_bad_lengths(args: tuple[object, object], error: type) -> None:
    """A fractional prefix length used to be truncated silently (2.5 -> [2, 3]); a negative
    count raised torch's "upper bound and lower bound inconsistent"."""
    with pytest.raises(error, match=r"prefix_len|n_new"):
        decode_positions(*args)  # type: ignore[arg-type]


def test_decode_positions_values() -> None:
    assert decode_positions(6, 3).tolist() == [6, 7, 8]
    assert decode_positions(0, 0).shape == (0,)


def test_an_encoder_by_name_gets_the_encoder_form_of_its_encoding() -> None:
    """T5's decoder buckets put every key right of the query in one bucket: an encoder built
    with pe="t5" used to get them; now it gets the bidirectional ones unless configured."""
    from posenc import TinyTransformer

    def t5(causal: bool, **config: bool) -> bool:
        model = TinyTransformer(
            vocab_size=8, pe="t5", d_model=16, n_heads=2, causal=causal, pe_config=config or None
        )
        return bool(model.pe.bidirectional)

    assert t5(causal=False) and not t5(causal=True)
    assert not t5(causal=False, bidirectional=False)


@pytest.mark.parametrize("name", ["nope", "rope", "alibi", "t5"])
def test_decode_steps_after_a_packed_prefill_continue_the_last_document(name: str) -> None:
    """A step without segment_ids used to join segment 0, the row's first document, and attend
    to it silently; it now continues the row's latest segment, as decoding the document alone."""
    from posenc import TinyTransformer, packed_positions

    torch.manual_seed(0)
    model = TinyTransformer(vocab_size=13, pe=name, d_model=16, n_heads=2, n_layers=2).eval()
    doc0, doc1 = torch.randint(0, 13, (1, 3)), torch.randint(0, 13, (1, 6))
    segments = torch.tensor([[0, 0, 0, 1, 1, 1, 1]])
    packed = torch.cat([doc0, doc1[:, :4]], dim=1)
    with torch.no_grad():
        cache = model.new_cache()
        model(packed, packed_positions(segments), segment_ids=segments, cache=cache)
        got = [model(doc1[:, t : t + 1], torch.tensor([t]), cache=cache) for t in (4, 5)]
        alone = model.new_cache()
        model(doc1[:, :4], cache=alone)
        want = [model(doc1[:, t : t + 1], cache=alone) for t in (4, 5)]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
