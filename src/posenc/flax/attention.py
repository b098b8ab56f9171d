"""Flax nnx multi-head attention calling the encoding hooks, and its KV cache (positions kept).

The same computation as ``posenc.attention.Attention``'s explicit path: scores =
rotate(q)·rotate(k)/√D + bias(q_pos, k_pos), masked (causal by cache order, padding,
segments), the encoding's relative terms, softmax in float32 or wider, relative values,
projection.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from .._validate import check_encoding_heads, check_positions_match, check_positive_int
from .base import (
    PositionalEncoding,
    batch_positions,
    check_ndim,
    check_positions,
)
from .kv_cache import CachedKeys, KVCache

Array = jax.Array


class Attention(nnx.Module):
    """Grouped-query self-attention with a pluggable Flax ``PositionalEncoding``.

    Parameters ``qkv`` (C -> C + 2·Hkv·D) and ``proj`` (C -> C) as in the torch module.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        pe: PositionalEncoding,
        causal: bool,
        n_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = False,
        rngs: nnx.Rngs,
    ) -> None:
        check_positive_int(d_model, "d_model")
        check_positive_int(n_heads, "n_heads")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_positive_int(n_kv_heads, "n_kv_heads")
        if d_model % n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got {d_model} and {n_heads}")
        if n_heads % n_kv_heads:
            raise ValueError(
                f"n_heads must be divisible by n_kv_heads, got {n_heads}, {n_kv_heads}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if not isinstance(pe, PositionalEncoding):
            raise TypeError(f"pe must be a posenc.flax PositionalEncoding, got {type(pe).__name__}")
        check_encoding_heads(pe, n_heads, d_model // n_heads)
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim, self.causal, self.pe = d_model // n_heads, causal, pe
        width = d_model + 2 * n_kv_heads * self.head_dim
        self.qkv = nnx.Linear(d_model, width, use_bias=bias, rngs=rngs)
        self.proj = nnx.Linear(d_model, d_model, use_bias=bias, rngs=rngs)
        self.drop = nnx.Dropout(dropout, rngs=rngs)  # on attention probabilities (training)

    def __call__(
        self,
        x: Array,
        pos: Array | None = None,
        *,
        padding_mask: Array | None = None,
        segment_ids: Array | None = None,
        cache: KVCache | None = None,
    ) -> Array:
        """x (B, T, C) at positions (T,) or (B, T) (default: cache length + 0..T-1) -> (B, T, C).

        ``padding_mask`` (B, T) bool, True for real tokens; ``segment_ids`` (B, T) integer
        (default one segment, or after cached entries each row's latest, as torch's).
        """
        check_ndim(x, 3, "x", "(B, T, C)")
        B, T, C = x.shape
        if C != self.d_model:
            raise ValueError(f"x must have C = d_model = {self.d_model} features, got {C}")
        offset = 0 if cache is None else cache.offset()  # a traced scalar when preallocated
        pos = offset + jnp.arange(T) if pos is None else check_positions(pos, "pos")
        check_positions_match(pos, B, T, "pos")
        q, k, v = self._project(x)  # (B, H, T, D), (B, Hkv, T, D) x2
        rerotate = cache is not None and self.pe.kv_policy == "rerotate"
        if not rerotate:
            q, k = self.pe.rotate(q, k, pos, pos)
        masks = mask_inputs(B, T, padding_mask, segment_ids, cache)
        new = CachedKeys(k, v, batch_positions(pos, B), *masks)
        keys = new if cache is None else cache.append(new)
        if rerotate:  # the cache holds unrotated keys: rotate all with the current frequencies
            q, k_all = self.pe.rotate(q, keys.k, pos, keys.pos)
            keys = keys._replace(k=k_all)
        k_pos = pos if cache is None else keys.pos
        out = self._attend(q, keys, pos, k_pos, self._allowed(new, keys, offset))  # (B, H, T, D)
        return self.proj(jnp.swapaxes(out, 1, 2).reshape(B, T, C))  # (B, T, C)

    def _project(self, x: Array) -> tuple[Array, Array, Array]:
        B, T, _ = x.shape
        D, H, Hkv = self.head_dim, self.n_heads, self.n_kv_heads
        qkv = self.qkv(x)  # (B, T, C + 2·Hkv·D)
        q, k, v = jnp.split(qkv, [H * D, (H + Hkv) * D], axis=-1)
        q = q.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B, H, T, D)
        k = k.reshape(B, T, Hkv, D).transpose(0, 2, 1, 3)  # (B, Hkv, T, D)
        v = v.reshape(B, T, Hkv, D).transpose(0, 2, 1, 3)  # (B, Hkv, T, D)
        return q, k, v

    def _allowed(self, new: CachedKeys, keys: CachedKeys, offset: Any) -> Array:
        """(B, 1, T, L) bool: valid, same segment, and (causal) not after the query by order."""
        T, L = new.pos.shape[1], keys.pos.shape[1]
        allowed = keys.valid[:, None, None, :] & (
            new.segment[:, None, :, None] == keys.segment[:, None, None, :]
        )  # (B, 1, T, L)
        if self.causal:
            order = jnp.arange(L)[None, :] <= offset + jnp.arange(T)[:, None]  # (T, L)
            allowed = allowed & order
        # A query with no visible key (e.g. a padding query) attends everywhere instead of NaN.
        return allowed | ~jnp.any(allowed, axis=-1, keepdims=True)

    def _attend(
        self, q: Array, keys: CachedKeys, q_pos: Array, k_pos: Array, allowed: Array
    ) -> Array:
        groups = self.n_heads // self.n_kv_heads
        k = jnp.repeat(keys.k, groups, axis=1) if groups > 1 else keys.k  # (B, H, L, D)
        v = jnp.repeat(keys.v, groups, axis=1) if groups > 1 else keys.v
        scores = (q @ jnp.swapaxes(k, -2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, L)
        bias = self.pe.bias(q_pos, k_pos)  # (B|1, H|1, T, L) or None
        if bias is not None:
            scores = scores + bias.astype(scores.dtype)
        scores = jnp.where(allowed, scores, -jnp.inf)
        scores = self.pe.relative_logits(scores, q, k, q_pos, k_pos)
        work = jnp.promote_types(scores.dtype, jnp.float32)  # bf16 logits: softmax in float32
        probs = jax.nn.softmax(scores.astype(work), axis=-1).astype(q.dtype)
        probs = self.drop(probs)
        out = probs @ v  # (B, H, T, D)
        extra = self.pe.relative_values(probs, q_pos, k_pos)
        return out if extra is None else out + extra


def mask_inputs(
    B: int, T: int, padding_mask: Any, segment_ids: Any, cache: KVCache | None = None
) -> tuple[Array, Array]:
    """Validity (B, T) bool and segment ids (B, T), defaults all-valid / one segment: segment
    0, or after cached entries each row's latest segment (as torch's)."""
    if padding_mask is None:
        valid = jnp.ones((B, T), dtype=bool)
    elif tuple(padding_mask.shape) != (B, T) or padding_mask.dtype != jnp.bool_:
        raise ValueError(
            f"padding_mask must be a bool array of shape ({B}, {T}), got "
            f"{padding_mask.dtype} {tuple(padding_mask.shape)}"
        )
    else:
        valid = jnp.asarray(padding_mask)
    last = None if cache is None else cache.last_segment()  # (B, 1) or None
    if segment_ids is None and last is not None and last.shape[0] == B:
        return valid, jnp.broadcast_to(last, (B, T))
    if segment_ids is None:
        return valid, jnp.zeros((B, T), dtype=jnp.int32)
    if tuple(segment_ids.shape) != (B, T) or not jnp.issubdtype(segment_ids.dtype, jnp.integer):
        raise ValueError(
            f"segment_ids must be an integer array of shape ({B}, {T}), got "
            f"{segment_ids.dtype} {tuple(segment_ids.shape)}"
        )
    return valid, jnp.asarray(segment_ids)
