"""``posenc.models.KVCache``: its checks, and that it is what ``Attention`` reads from a cache
(``posenc.attention.cache.KeyValueCache``), so attention needs nothing else of it."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.attention import CachedKeys
from posenc.attention.cache import CacheCheck
from posenc.models import KVCache


def test_kv_cache_rejects_shape_changes() -> None:
    cache = KVCache()

    def entry(B: int, H: int) -> CachedKeys:
        return CachedKeys(
            torch.zeros(B, H, 3, 4),
            torch.zeros(B, H, 3, 4),
            torch.zeros(B, 3, dtype=torch.long),
            torch.ones(B, 3, dtype=torch.bool),
            torch.zeros(B, 3, dtype=torch.long),
        )

    cache.append(entry(1, 2))
    with pytest.raises(ValueError, match="new keys must match B, Hkv, D"):
        cache.append(entry(1, 3))
    for _ in range(10):  # grows past its initial capacity
        keys = cache.append(entry(1, 2))
    assert keys.k.shape == (1, 2, 33, 4) and len(cache) == 33


class _Delegating:
    """A cache of the caller's own: only the Protocol's members, each handed to a KVCache."""

    def __init__(self) -> None:
        self._inner = KVCache()
        self.keep: int | None = None

    @property
    def consecutive(self) -> bool:
        return self._inner.consecutive

    @consecutive.setter
    def consecutive(self, value: bool) -> None:
        self._inner.consecutive = value

    @property
    def terms(self) -> torch.Tensor | None:
        return self._inner.terms

    @terms.setter
    def terms(self, value: torch.Tensor | None) -> None:
        self._inner.terms = value

    @property
    def streams(self) -> bool:
        return self._inner.streams

    @property
    def position_start(self) -> int:
        return self._inner.position_start

    def __len__(self) -> int:
        return len(self._inner)

    def key_positions(self, pos: torch.Tensor) -> torch.Tensor:
        return self._inner.key_positions(pos)

    def last_segment(self) -> torch.Tensor | None:
        return self._inner.last_segment()

    def append(self, new: CachedKeys) -> CachedKeys:
        return self._inner.append(new)


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_attention_reads_a_cache_only_through_the_protocol(name: str) -> None:
    """KVCache is a KeyValueCache (mypy checks it where ``Attention`` takes one); a cache with
    only the Protocol's members decodes as it does (the same bits), and anything else is
    refused naming what came."""
    assert isinstance(KVCache(), CacheCheck) and isinstance(_Delegating(), CacheCheck)
    assert not isinstance([], CacheCheck)
    torch.manual_seed(0)
    pe = posenc.build_for_model(name, dim=32, n_heads=4, max_len=64)
    attn = posenc.Attention(32, 4, pe=pe, causal=True).eval()
    x = torch.randn(2, 9, 32)
    outs = []
    with torch.no_grad():
        for cache in (KVCache(), _Delegating()):
            steps = [attn(x[:, :5], cache=cache)] + [
                attn(x[:, t : t + 1], cache=cache) for t in range(5, 9)
            ]
            outs.append(torch.cat(steps, 1))
        torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
        torch.testing.assert_close(outs[0], attn(x), atol=1e-5, rtol=1e-5)
        with pytest.raises(TypeError, match=r"cache must be a KVCache .*, got list"):
            attn(x, cache=[])  # type: ignore[arg-type]
