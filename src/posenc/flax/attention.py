"""Flax multi-head attention calling the encoding hooks: torch's ``posenc.attention.Attention``
on its explicit path (scores = rotate(q)·rotate(k)/√D + bias(q_pos, k_pos), masked, the
encoding's relative terms, softmax in float32 or wider, relative values, projection)."""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from .._validate import (
    check_encoding_heads,
    check_positions_given,
    check_positions_match,
)
from ..attention.config import AttentionConfig
from ..attention.flow import (
    AttentionFlow,
    CachedKeys,
    CrossAttentionFlow,
    check_embedded,
    explicit_weights,
)
from .base import (
    PositionalEncoding,
    PositionContext,
    batch_positions,
    check_ndim,
    check_positions,
)
from .kv_cache import KVCache

Array = jax.Array


def context(
    pe: PositionalEncoding, B: int, T: int, pos: Any, cache: KVCache | None
) -> PositionContext:
    """The context of T new tokens at ``pos`` (default: after the cache's entries; given for
    an encoding of A > 1 axes; checked once): ``pe.prepare`` of them and of every key's
    position with the cache."""
    axes = pe.axes
    check_positions_given(pos, axes, pe.name)
    if pos is None:
        pos = (0 if cache is None else cache.offset()) + jnp.arange(T)
    pos = check_positions(pos, "pos", axes)  # one JAX array for every hook (NumPy: once)
    check_positions_match(pos, B, T, "pos", axes)
    keys = pos if cache is None else cache.key_positions(batch_positions(pos, B, axes))
    return pe.prepare(pos, keys)


class Attention(AttentionFlow, CrossAttentionFlow, nnx.Module):
    """As torch's ``Attention`` and ``CrossAttention`` in one layer (one explicit path: no
    query blocks or fused backends), with parameters ``qkv`` (C -> C + 2·Hkv·D) and ``proj``
    (C -> C); dropout acts on the attention probabilities in training. ``config``: the other
    ``AttentionConfig`` arguments (causal, n_kv_heads, dropout, bias, window, chunk), checked
    as torch's. ``__call__``, ``project_memory`` and ``cross``: ``posenc.attention.flow``;
    ``masks`` are ``padding_mask`` (B, T) bool and ``segment_ids`` (B, T) integer, as torch's.
    ``return_weights=True`` also returns the softmax weights (B, H, T, L); ``embedded``: as
    torch's, required (True) around an additive encoding, whose ``embed`` the caller adds to
    the input (the layer never calls it)."""

    cache_type = KVCache

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        pe: PositionalEncoding,
        rngs: nnx.Rngs,
        embedded: bool = False,
        **config: Any,
    ) -> None:
        c = AttentionConfig(d_model=d_model, n_heads=n_heads, **config)
        if not isinstance(pe, PositionalEncoding):
            raise TypeError(f"pe must be a posenc.flax PositionalEncoding, got {type(pe).__name__}")
        check_encoding_heads(pe, n_heads, c.head_dim)
        check_embedded(pe, embedded)
        self.embedded = embedded
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, c.head_dim
        self.n_kv_heads: int = c.n_kv_heads or n_heads
        self.causal, self.pe = c.causal, pe
        self.window, self.chunk = c.window, c.chunk
        width = d_model + 2 * self.n_kv_heads * c.head_dim
        self.qkv = nnx.Linear(d_model, width, use_bias=c.bias, rngs=rngs)
        self.proj = nnx.Linear(d_model, d_model, use_bias=c.bias, rngs=rngs)
        self.drop = nnx.Dropout(c.dropout, rngs=rngs)

    __call__ = AttentionFlow.forward

    check_ndim = staticmethod(check_ndim)
    batch_positions = staticmethod(batch_positions)
    check_positions = staticmethod(check_positions)

    def new_context(
        self, pos: Any, B: int, T: int, cache: KVCache | None, x: Array
    ) -> PositionContext:
        return context(self.pe, B, T, pos, cache)

    def default_positions(self, T: int, x: Array) -> Array:
        return jnp.arange(T)

    def cache_offset(self, cache: KVCache | None) -> Any:
        return 0 if cache is None else cache.offset()  # a traced scalar when preallocated

    def key_count(self, cache: KVCache | None, offset: Any, T: int) -> Any:
        return T if cache is None else cache.capacity or offset + T

    def streams(self, cache: KVCache) -> bool:
        return False  # a Flax cache keeps every entry at its position

    def plain(self, padding_mask: Any, segment_ids: Any, offset: Any) -> bool:
        return False  # one explicit path: the mask is always built

    def _rows(self, x: Array, start: int, end: int | None) -> Array:
        """x times the ``qkv`` columns start:end (with their bias): the query part (0:C) or
        the key/value part (C:) of the projection."""
        y = x @ self.qkv.kernel[...][:, start:end]
        bias = self.qkv.bias
        return y if bias is None else y + bias[...][start:end]

    def _project(self, x: Array) -> tuple[Array, Array, Array]:
        B, T, _ = x.shape
        D, H, Hkv = self.head_dim, self.n_heads, self.n_kv_heads
        q, k, v = jnp.split(self.qkv(x), [H * D, (H + Hkv) * D], axis=-1)
        q, k, v = (y.reshape(B, T, h, D) for y, h in ((q, H), (k, Hkv), (v, Hkv)))
        return q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2)  # (B, H|Hkv, T, D)

    def project_queries(self, x: Array) -> Array:
        B, T, C = x.shape
        return self._rows(x, 0, C).reshape(B, T, self.n_heads, self.head_dim).swapaxes(1, 2)

    def project_keys(self, memory: Array) -> tuple[Array, Array]:
        B, S, C = memory.shape
        k, v = jnp.split(self._rows(memory, C, None), 2, axis=-1)  # (B, S, Hkv·D) x2
        k, v = (y.reshape(B, S, self.n_kv_heads, self.head_dim).swapaxes(1, 2) for y in (k, v))
        return k, v  # (B, Hkv, S, D)

    def attend(
        self, q: Array, keys: CachedKeys, ctx: PositionContext, allowed: Array, offset: Any
    ) -> Array:
        return self.attend_weights(q, keys, ctx, allowed, offset)[0]

    def attend_weights(
        self, q: Array, keys: CachedKeys, ctx: PositionContext, allowed: Array, offset: Any
    ) -> tuple[Array, Array]:
        """The explicit path (Flax's only one): (B, H, T, D) and the weights (B, H, T, L)."""
        groups = self.n_heads // self.n_kv_heads
        k, v = (jnp.repeat(x, groups, axis=1) for x in (keys.k, keys.v))  # (B, H, L, D)
        softmax = partial(jax.nn.softmax, axis=-1)
        return explicit_weights(
            self.pe,
            q,
            k,
            v,
            allowed,
            ctx,
            (ctx.q_pos, ctx.k_pos),
            head_dim=self.head_dim,
            softmax=softmax,
            dropout=self.drop,
        )
