"""Flax multi-head attention calling the encoding hooks: torch's ``posenc.attention.Attention``
and ``CrossAttention`` on their explicit path (scores = rotate(q)·rotate(k)/√D + bias(q_pos,
k_pos), masked, the encoding's relative terms, softmax in float32 or wider, relative values,
projection), written here for JAX."""

from __future__ import annotations

import math
from typing import Any, Literal, overload

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .._validate import (
    check_context,
    check_cross,
    check_cross_context,
    check_encoding_heads,
    check_mask_tensor,
    check_memory,
    check_positions_given,
    check_positions_match,
    check_real_floating,
)
from ..attention.config import AttentionConfig
from ..functional import masks
from ..functional._xp import device_of, namespace
from ..functional.masks import allowed_keys, local_keys
from .base import (
    Encoding,
    PositionalEncoding,
    PositionState,
    batch_positions,
    check_ndim,
    check_positions,
    tables_dtype,
)
from .data_dependent import DataDependent
from .kv_cache import CachedKeys, KVCache, Memory

Array = jax.Array
#: A padding mask (B, T) bool or segment ids (B, T) integer: JAX or NumPy.
MaskArray = Array | np.ndarray


def position_state(
    pe: Encoding, B: int, T: int, pos: Array | np.ndarray | None, cache: KVCache | None, x: Array
) -> PositionState:
    """``pe.prepare`` of T new tokens at ``pos`` (default: after the cache's entries; given for
    an encoding of A > 1 axes; checked once) and of every key's position with the cache, for
    activations like ``x`` (B, T, C). Returns the encoding's own state."""
    axes = pe.axes
    check_positions_given(pos, axes, pe.name)
    if pos is None:
        pos = (0 if cache is None else cache.offset()) + jnp.arange(T)
    checked = check_positions(pos, "pos", axes)  # one JAX array for every hook (NumPy: once)
    check_positions_match(checked, B, T, "pos", axes)
    keys = checked if cache is None else cache.key_positions(batch_positions(checked, B, axes))
    return pe.prepare(checked, keys, dtype=x.dtype, batch=B)


def mask_inputs(
    B: int,
    T: int,
    like: Array,
    padding_mask: MaskArray | None,
    segment_ids: MaskArray | None,
    cache: KVCache | None = None,
) -> tuple[Array, Array]:
    """Validity (B, T) bool and segment ids (B, T) (the widest int) of T new tokens: the masks
    given (checked: ``padding_mask`` (B, T) bool, ``segment_ids`` (B, T) integer), or the
    defaults after the entries of ``cache`` (``functional.masks.mask_inputs``), on ``like``'s
    device."""
    if padding_mask is not None:
        check_mask_tensor(padding_mask, "padding_mask", "bool", (B, T), arrays=True)
        padding_mask = jnp.asarray(padding_mask)
    if segment_ids is not None:
        check_mask_tensor(segment_ids, "segment_ids", "integer", (B, T), arrays=True)
        segment_ids = jnp.asarray(segment_ids)
    last = None if cache is None else cache.last_segment()  # (B, 1) or None
    valid, segment = masks.mask_inputs(
        B, T, padding_mask, segment_ids, last, xp=namespace(like), device=device_of(like)
    )
    return valid, segment


def adds_to_embeddings(pe: Encoding) -> bool:
    """True for an encoding whose ``embed`` adds to token embeddings (sinusoidal, learned, their
    grid forms, randomized positions around one)."""
    return bool(pe.embeds)


def check_embedded(pe: Encoding, embedded: object) -> None:
    """Refuse to build an attention layer around an additive encoding unless the caller says
    its input already holds the embedding (``embedded=True``): the layer never calls ``embed``.

    Raises: TypeError for an ``embedded`` that is not a bool; ValueError for an additive
    encoding with ``embedded=False``.
    """
    if not isinstance(embedded, bool):
        raise TypeError(f"embedded must be a bool, got {type(embedded).__name__}")
    if adds_to_embeddings(pe) and not embedded:
        raise ValueError(
            f"encoding {pe.name!r} is additive: an additive encoding is applied to token "
            "embeddings, not inside attention: call pe.embed(x, pos) on the layer's input and "
            "build the layer with embedded=True, or use TinyTransformer (which does both)"
        )


def check_attention_form(pe: Encoding, c: AttentionConfig) -> None:
    """Refuse a layer an encoding computing its own attention (``DataDependent``) cannot be:
    its forms are causal self-attention over every key, with no mask of positions and no
    dropout on weights it never materialises.

    Raises: ValueError naming the encoding and the option."""
    if not isinstance(pe, DataDependent):
        return
    problem = (
        "a bidirectional layer (causal=False): its forms are causal"
        if not c.causal
        else "a sliding window or chunk: it attends to every key of its segment"
        if c.window is not None or c.chunk is not None
        else f"attention dropout ({c.dropout}): it never materialises the weights"
        if c.dropout
        else ""
    )
    if problem:
        raise ValueError(
            f"encoding {pe.name!r} computes attention itself; it cannot take {problem}"
        )


class Attention(nnx.Module):
    """As torch's ``Attention`` and ``CrossAttention`` in one layer (one explicit path: no
    query blocks or fused backends), with parameters ``qkv`` (C -> C + 2·Hkv·D) and ``proj``
    (C -> C); dropout acts on the attention probabilities in training. ``config``: the other
    ``AttentionConfig`` arguments (causal, n_kv_heads, dropout, bias, window, chunk), checked
    as torch's. ``embedded``: as torch's, required (True) around an additive encoding, whose
    ``embed`` the caller adds to the input (the layer never calls it).

    Shapes: x (B, T, C); q (B, H, T, D); keys (B, Hkv, L, D) (L = cached + new)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        pe: Encoding,
        rngs: nnx.Rngs,
        embedded: bool = False,
        **config: Any,
    ) -> None:
        c = AttentionConfig(d_model=d_model, n_heads=n_heads, **config)
        if not isinstance(pe, PositionalEncoding):
            raise TypeError(f"pe must be a posenc.flax PositionalEncoding, got {type(pe).__name__}")
        check_encoding_heads(pe, n_heads, c.head_dim)
        check_embedded(pe, embedded)
        check_attention_form(pe, c)
        self.embedded = embedded
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, c.head_dim
        self.n_kv_heads: int = c.n_kv_heads or n_heads
        self.causal, self.pe = c.causal, pe
        self.window, self.chunk = c.window, c.chunk
        width = d_model + 2 * self.n_kv_heads * c.head_dim
        self.qkv = nnx.Linear(d_model, width, use_bias=c.bias, rngs=rngs)
        self.proj = nnx.Linear(d_model, d_model, use_bias=c.bias, rngs=rngs)
        self.drop = nnx.Dropout(c.dropout, rngs=rngs)

    @overload
    def __call__(
        self,
        x: Array,
        pos: Array | np.ndarray | None = None,
        *,
        padding_mask: MaskArray | None = None,
        segment_ids: MaskArray | None = None,
        cache: KVCache | None = None,
        ctx: PositionState | None = None,
        return_weights: Literal[False] = False,
    ) -> Array: ...

    @overload
    def __call__(
        self,
        x: Array,
        pos: Array | np.ndarray | None = None,
        *,
        padding_mask: MaskArray | None = None,
        segment_ids: MaskArray | None = None,
        cache: KVCache | None = None,
        ctx: PositionState | None = None,
        return_weights: Literal[True],
    ) -> tuple[Array, Array]: ...

    def __call__(
        self,
        x: Array,
        pos: Array | np.ndarray | None = None,
        *,
        padding_mask: MaskArray | None = None,
        segment_ids: MaskArray | None = None,
        cache: KVCache | None = None,
        ctx: PositionState | None = None,
        return_weights: bool = False,
    ) -> Array | tuple[Array, Array]:
        """Self-attention of x (B, T, C) at positions ``pos`` (T,) or (B, T) (default: cache
        length + 0..T-1), or (T, A) or (B, T, A) for an encoding of A position axes, or those
        of ``ctx``, the forward's position state (``pe.prepare``: its q_pos this call's
        positions, its k_pos the cached keys' then these). ``padding_mask`` (B, T) bool, True
        for real tokens; ``segment_ids`` (B, T) integer, tokens attend within their segment.
        Returns (B, T, C); with ``return_weights=True`` also the softmax weights (B, H, T, L)
        of every query over the L keys it sees (cached ones first), 0 where masked."""
        check_ndim(x, 3, "x", "(B, T, C)")
        check_real_floating(x, "x")  # token ids go through an embedding first
        B, T, C = x.shape
        if self.d_model != C:
            raise ValueError(f"x must have C = d_model = {self.d_model} features, got {C}")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (one layer's), got {type(cache).__name__}")
        if return_weights and isinstance(self.pe, DataDependent):
            raise ValueError(
                f"encoding {self.pe.name!r} computes attention itself, blockwise: it has no "
                "softmax weights to return"
            )
        offset = 0 if cache is None else cache.offset()  # a traced scalar when preallocated
        if ctx is None:
            ctx = position_state(self.pe, B, T, pos, cache, x)
        else:
            # a growing cache's offset is an int (only a preallocated one's is traced)
            keys_seen = T if cache is None else cache.capacity or int(offset) + T
            check_context(ctx, pos, T, keys_seen)
        q, k, v = self.project(x)  # (B, H, T, D), (B, Hkv, T, D) x2
        # unrotated keys in the cache, all rotated at their current positions (dynamic scaling)
        rerotate = cache is not None and self.pe.kv_policy == "rerotate"
        if not rerotate:  # this call's own keys sit at the queries' positions
            q, k = self.pe.rotate(q, k, ctx.q_pos, ctx.q_pos, ctx=ctx.new_keys())
        valid, segment = mask_inputs(B, T, x, padding_mask, segment_ids, cache)
        new = CachedKeys(k, v, batch_positions(ctx.q_pos, B, ctx.axes), valid, segment)
        keys = new if cache is None else cache.append(new)
        if isinstance(self.pe, DataDependent):  # the encoding's own causal attention (FoX, ...)
            out = self.attend_form(self.pe, x, q, new.valid, keys, cache, offset)  # (B, H, T, D)
            return self.proj(out.swapaxes(1, 2).reshape(B, T, C))
        if rerotate:  # the cache holds unrotated keys: rotate all with the current frequencies
            q, k_all = self.pe.rotate(q, keys.k, ctx.q_pos, ctx.k_pos, ctx=ctx)  # (B,Hkv,L,D)
            keys = keys._replace(k=k_all)
        local = None  # a sliding window or chunk: the keys near each query, by position
        if self.window is not None or self.chunk is not None:
            local = local_keys(new.pos, keys.pos, window=self.window, chunk=self.chunk)
        allowed = allowed_keys(
            keys.valid, new.segment, keys.segment, causal=self.causal, offset=offset, local=local
        )  # (B, 1, T, L)
        out, weights = self.attend(q, keys, ctx, allowed)  # (B, H, T, D), (B, H, T, L)
        y = self.proj(out.swapaxes(1, 2).reshape(B, T, C))  # (B, T, C)
        return (y, weights) if return_weights else y

    def project_memory(
        self,
        memory: Array,
        pos: Array | np.ndarray,
        padding_mask: MaskArray | None = None,
        *,
        axes: int = 1,
    ) -> Memory:
        """Cross-attention keys and values of an encoder output ``memory`` (B, S, C), projected
        once per source by the key/value rows of ``qkv``, at source positions ``pos`` (S,) |
        (B, S) ((S, A) | (B, S, A) for an encoder of ``axes`` A > 1); ``padding_mask`` (B, S)
        bool, True for real tokens. Keys are kept unrotated: ``cross`` rotates them."""
        checked = check_memory(
            memory, pos, self.d_model, axes=axes, ndim=check_ndim, positions=check_positions
        )
        B, S, C = memory.shape
        k, v = jnp.split(self.rows(memory, C, None), 2, axis=-1)  # (B, S, Hkv·D) x2
        k, v = (y.reshape(B, S, self.n_kv_heads, self.head_dim).swapaxes(1, 2) for y in (k, v))
        valid, segment = mask_inputs(B, S, memory, padding_mask, None)
        keys = CachedKeys(k, v, batch_positions(checked, B, axes), valid, segment)
        return Memory(keys, None if padding_mask is None else jnp.asarray(padding_mask))

    def cross(
        self,
        x: Array,
        memory: Memory,
        pos: Array | np.ndarray | None = None,
        *,
        ctx: PositionState | None = None,
    ) -> Array:
        """Cross-attention of decoder states x (B, T, C) over an encoder's ``memory``: queries
        projected by the query rows of ``qkv``, keys and values those of ``memory``; no causal
        mask, padded source tokens masked. The encoding's hooks see the queries at ``pos``
        (T,) | (B, T) (default 0..T-1) and the keys at their source positions (``ctx`` =
        ``pe.prepare(pos, memory positions)``, made here when not given). Returns (B, T, C)."""
        check_cross(x, memory, Memory, self.d_model, self.causal, ndim=check_ndim)
        B, T, C = x.shape
        keys = memory.keys
        if ctx is None:
            checked = check_positions(jnp.arange(T) if pos is None else pos, "pos")
            check_positions_match(checked, B, T, "pos")
            ctx = self.pe.prepare(checked, keys.pos, dtype=x.dtype, batch=B)
        else:
            check_cross_context(ctx, pos, T, keys.pos)
        q = self.rows(x, 0, C).reshape(B, T, self.n_heads, self.head_dim).swapaxes(1, 2)
        q, k = self.pe.rotate(q, keys.k, ctx.q_pos, ctx.k_pos, ctx=ctx)  # (B, H|Hkv, T|S, D)
        q_segment = jnp.zeros((B, T), dtype=keys.segment.dtype)
        allowed = allowed_keys(keys.valid, q_segment, keys.segment, causal=False)  # (B,1,T,S)
        out, _ = self.attend(q, keys._replace(k=k), ctx, allowed)  # (B, H, T, D)
        return self.proj(out.swapaxes(1, 2).reshape(B, T, C))  # (B, T, C)

    def rows(self, x: Array, start: int, end: int | None) -> Array:
        """x times the ``qkv`` columns start:end (with their bias): the query part (0:C) or
        the key/value part (C:) of the projection."""
        y = x @ self.qkv.kernel[...][:, start:end]
        bias = self.qkv.bias
        return y if bias is None else y + bias[...][start:end]

    def project(self, x: Array) -> tuple[Array, Array, Array]:
        """q (B, H, T, D), k, v (B, Hkv, T, D) of x (B, T, C)."""
        B, T, _ = x.shape
        D, H, Hkv = self.head_dim, self.n_heads, self.n_kv_heads
        q, k, v = jnp.split(self.qkv(x), [H * D, (H + Hkv) * D], axis=-1)
        q, k, v = (y.reshape(B, T, h, D) for y, h in ((q, H), (k, Hkv), (v, Hkv)))
        return q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2)

    def attend(
        self, q: Array, keys: CachedKeys, ctx: PositionState, allowed: Array
    ) -> tuple[Array, Array]:
        """softmax(q kᵀ / √D + bias, masked, then the relative terms) v + relative values, the
        encoding's hooks at ctx's positions: (B, H, T, D) and the softmax weights (B, H, T, L)
        (before dropout, which the output's weights go through). D = ``head_dim``, not q's
        width (PoPE doubles it).

        Shapes: q (B, H, T, D); keys (B, Hkv, L, D); ``allowed`` bool (B, 1, T, L)."""
        pe, q_pos, k_pos = self.pe, ctx.q_pos, ctx.k_pos
        groups = self.n_heads // self.n_kv_heads
        k, v = (jnp.repeat(x, groups, axis=1) for x in (keys.k, keys.v))  # (B, H, L, D)
        scores = (q / math.sqrt(self.head_dim)) @ k.swapaxes(-2, -1)  # (B, H, T, L)
        bias = pe.bias(q_pos, k_pos, ctx=ctx)  # (B|1, H|1, T, L) or None
        if bias is not None:
            scores = scores + bias
        scores = jnp.where(allowed, scores, -math.inf)
        scores = pe.relative_logits(scores, q, k, q_pos, k_pos, ctx=ctx)
        work = tables_dtype(scores.dtype)  # float64 stays float64
        weights = jax.nn.softmax(scores.astype(work), axis=-1).astype(q.dtype)
        probs = self.drop(weights)
        out = probs @ v  # (B, H, T, D)
        extra = pe.relative_values(probs, q_pos, k_pos, ctx=ctx)
        return (out if extra is None else out + extra), weights

    def attend_form(
        self,
        pe: DataDependent,
        x: Array,
        q: Array,
        new_valid: Array,
        keys: CachedKeys,
        cache: KVCache | None,
        offset: int | Array,
    ) -> Array:
        """``pe``'s attention of this call: x (B, T, C), q (B, H, T, D), their validity
        ``new_valid`` (B, T) and every key
        (``keys``, cached first), the terms of this call's keys (``pe.attention_terms``) kept
        in the cache after those of the cached keys, padding put in a segment of its own below
        every other (so no real query sees it). A preallocated cache holds the new keys at
        ``offset``, mid-buffer: keys, values and terms are rolled so that they come last, the
        unwritten slots (invalid, in the padding's segment) first. Returns (B, H, T, D)."""
        T = x.shape[1]
        if T == 0:  # no new token: nothing to attend, nothing to cache
            return q
        new_terms = pe.attention_terms(x, new_valid)  # (B, T, E)
        terms = new_terms if cache is None else cache.join_terms(new_terms, offset)  # (B, L, E)
        k, v, valid, segment = keys.k, keys.v, keys.valid, keys.segment
        if cache is not None and cache.capacity is not None:  # queries at offset..offset+T-1
            shift = cache.capacity - (offset + T)
            k, v = jnp.roll(k, shift, axis=2), jnp.roll(v, shift, axis=2)
            terms, valid, segment = (jnp.roll(a, shift, axis=1) for a in (terms, valid, segment))
        apart = jnp.min(segment) - 1  # a segment id no real key has
        segment_ids = jnp.where(valid, segment, apart)  # (B, L)
        return pe.attention_form(q, k, v, terms, segment_ids, 1.0 / math.sqrt(self.head_dim))
