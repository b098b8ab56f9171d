"""Flax multi-head attention calling the encoding hooks: torch's ``posenc.attention.Attention``
on its explicit path (scores = rotate(q)·rotate(k)/√D + bias(q_pos, k_pos), masked, the
encoding's relative terms, softmax in float32 or wider, relative values, projection)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from .._validate import (
    check_context,
    check_cross,
    check_cross_context,
    check_encoding_heads,
    check_memory,
    check_positions_given,
    check_positions_match,
)
from ..encodings.configs import AttentionConfig
from ..functional.masks import allowed_keys
from ..functional.masks import mask_inputs as default_masks
from .base import (
    Ctx,
    PositionalEncoding,
    PositionContext,
    batch_positions,
    check_ndim,
    check_positions,
)
from .kv_cache import CachedKeys, KVCache

Array = jax.Array


class Memory(NamedTuple):
    """As torch's ``Memory``: an encoder output's cross-attention keys and values, computed
    once, and the source padding mask (B, S) or None."""

    keys: CachedKeys
    padding_mask: Array | None


class Attention(nnx.Module):
    """As torch's ``Attention`` (one explicit path: no query blocks or fused backends), with
    parameters ``qkv`` (C -> C + 2·Hkv·D) and ``proj`` (C -> C); dropout acts on the attention
    probabilities in training. ``config``: the other ``AttentionConfig`` arguments (causal,
    n_kv_heads, dropout, bias), checked as torch's."""

    def __init__(
        self, d_model: int, n_heads: int, *, pe: PositionalEncoding, rngs: nnx.Rngs, **config: Any
    ) -> None:
        c = AttentionConfig(d_model=d_model, n_heads=n_heads, **config)
        if not isinstance(pe, PositionalEncoding):
            raise TypeError(f"pe must be a posenc.flax PositionalEncoding, got {type(pe).__name__}")
        check_encoding_heads(pe, n_heads, c.head_dim)
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, c.head_dim
        self.n_kv_heads: int = c.n_kv_heads or n_heads
        self.causal, self.pe = c.causal, pe
        width = d_model + 2 * self.n_kv_heads * c.head_dim
        self.qkv = nnx.Linear(d_model, width, use_bias=c.bias, rngs=rngs)
        self.proj = nnx.Linear(d_model, d_model, use_bias=c.bias, rngs=rngs)
        self.drop = nnx.Dropout(c.dropout, rngs=rngs)

    def __call__(
        self,
        x: Array,
        pos: Array | None = None,
        *,
        ctx: Ctx = None,
        cache: KVCache | None = None,
        **masks: Array | None,
    ) -> Array:
        """As torch's ``forward``: x (B, T, C) at positions (T,) or (B, T) (default: cache
        length + 0..T-1; (T, A) or (B, T, A) for an encoding of A axes, given), or those of
        ``ctx``, the forward's context -> (B, T, C). ``masks``:
        ``padding_mask`` (B, T) bool, ``segment_ids`` (B, T) integer, as torch's."""
        check_ndim(x, 3, "x", "(B, T, C)")
        B, T, C = x.shape
        if C != self.d_model:
            raise ValueError(f"x must have C = d_model = {self.d_model} features, got {C}")
        offset = 0 if cache is None else cache.offset()  # a traced scalar when preallocated
        if ctx is None:
            ctx = context(self.pe, B, T, pos, cache)
        else:
            check_context(ctx, pos, T, T if cache is None else cache.capacity or offset + T)
        q, k, v = self._project(x)  # (B, H, T, D), (B, Hkv, T, D) x2
        rerotate = cache is not None and self.pe.kv_policy == "rerotate"
        if not rerotate:
            q, k = self.pe.rotate(q, k, ctx.q_pos, ctx.q_pos, ctx=ctx)
        pos_b = batch_positions(ctx.q_pos, B, ctx.axes)  # (B, T) | (B, T, A)
        new = CachedKeys(k, v, pos_b, *mask_inputs(B, T, cache, **masks))
        keys = new if cache is None else cache.append(new)
        if rerotate:  # the cache holds unrotated keys: rotate all with the current frequencies
            q, k_all = self.pe.rotate(q, keys.k, ctx.q_pos, ctx.k_pos, ctx=ctx)
            keys = keys._replace(k=k_all)
        allowed = allowed_keys(
            keys.valid, new.segment, keys.segment, causal=self.causal, offset=offset
        )
        out = self._attend(q, keys, ctx, allowed)  # (B, H, T, D)
        return self.proj(jnp.swapaxes(out, 1, 2).reshape(B, T, C))  # (B, T, C)

    def project_memory(
        self, memory: Array, pos: Any, padding_mask: Array | None = None, *, axes: int = 1
    ) -> Memory:
        """As torch's: keys and values (B, Hkv, S, D) of an encoder output ``memory`` (B, S, C)
        by the key/value columns of ``qkv``, at source positions ``pos`` (S,) | (B, S) (an
        encoder of ``axes`` A > 1: (S, A) | (B, S, A))."""
        pos = check_memory(
            memory, pos, self.d_model, axes=axes, ndim=check_ndim, positions=check_positions
        )
        B, S, C = memory.shape
        D, Hkv = self.head_dim, self.n_kv_heads
        k, v = jnp.split(self._rows(memory, C, None), 2, axis=-1)  # (B, S, Hkv·D) x2
        k, v = (y.reshape(B, S, Hkv, D).swapaxes(1, 2) for y in (k, v))  # (B, Hkv, S, D)
        valid, segment = mask_inputs(B, S, padding_mask=padding_mask)
        keys = CachedKeys(k, v, batch_positions(pos, B, axes), valid, segment)
        return Memory(keys, padding_mask)

    def cross(self, x: Array, memory: Memory, pos: Any = None, *, ctx: Ctx = None) -> Array:
        """As torch's ``cross``: decoder states x (B, T, C) at ``pos`` (default 0..T-1) over
        ``memory``, no causal mask, padded source keys masked -> (B, T, C)."""
        check_cross(x, memory, Memory, self.d_model, self.causal, ndim=check_ndim)
        B, T, C = x.shape
        keys = memory.keys
        if ctx is None:
            pos = check_positions(jnp.arange(T) if pos is None else pos, "pos")
            check_positions_match(pos, B, T, "pos")
            ctx = self.pe.prepare(pos, keys.pos)
        else:
            check_cross_context(ctx, pos, T, keys.pos)
        q = self._rows(x, 0, C).reshape(B, T, self.n_heads, self.head_dim).swapaxes(1, 2)
        q, k = self.pe.rotate(q, keys.k, ctx.q_pos, ctx.k_pos, ctx=ctx)  # (B, H|Hkv, T|S, D)
        q_segment = jnp.zeros((B, T), dtype=keys.segment.dtype)
        allowed = allowed_keys(keys.valid, q_segment, keys.segment, causal=False)  # (B,1,T,S)
        out = self._attend(q, keys._replace(k=k), ctx, allowed)  # (B, H, T, D)
        return self.proj(jnp.swapaxes(out, 1, 2).reshape(B, T, C))  # (B, T, C)

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

    def _attend(self, q: Array, keys: CachedKeys, ctx: PositionContext, allowed: Array) -> Array:
        groups = self.n_heads // self.n_kv_heads
        k, v = (jnp.repeat(x, groups, axis=1) for x in (keys.k, keys.v))  # (B, H, L, D)
        q_pos, k_pos = ctx.q_pos, ctx.k_pos
        scores = (q @ jnp.swapaxes(k, -2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, L)
        bias = self.pe.bias(q_pos, k_pos, ctx=ctx)  # (B|1, H|1, T, L) or None
        if bias is not None:
            scores = scores + bias.astype(scores.dtype)
        scores = jnp.where(allowed, scores, -jnp.inf)
        scores = self.pe.relative_logits(scores, q, k, q_pos, k_pos, ctx=ctx)
        work = jnp.promote_types(scores.dtype, jnp.float32)  # bf16 logits: softmax in float32
        probs = self.drop(jax.nn.softmax(scores.astype(work), axis=-1).astype(q.dtype))
        out = probs @ v  # (B, H, T, D)
        extra = self.pe.relative_values(probs, q_pos, k_pos, ctx=ctx)
        return out if extra is None else out + extra


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


def mask_inputs(
    B: int,
    T: int,
    cache: KVCache | None = None,
    *,
    padding_mask: Array | None = None,
    segment_ids: Array | None = None,
) -> tuple[Array, Array]:
    """As torch's: ``PF.mask_inputs`` of the masks given (checked) or the defaults."""
    for x, what, kind, dtype in (
        (padding_mask, "padding_mask", "a bool", jnp.bool_),
        (segment_ids, "segment_ids", "an integer", jnp.integer),
    ):
        if x is not None and (tuple(x.shape) != (B, T) or not jnp.issubdtype(x.dtype, dtype)):
            raise ValueError(
                f"{what} must be {kind} array of shape ({B}, {T}), got {x.dtype} {tuple(x.shape)}"
            )
    padding_mask, segment_ids = (
        None if x is None else jnp.asarray(x) for x in (padding_mask, segment_ids)
    )
    last = None if cache is None else cache.last_segment()  # (B, 1) or None
    return default_masks(B, T, padding_mask, segment_ids, last, xp=jnp)
