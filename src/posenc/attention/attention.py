"""Multi-head attention that calls the positional-encoding hooks, with explicit positions."""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import (
    check_context,
    check_cross,
    check_cross_context,
    check_encoding_heads,
    check_mask_tensor,
    check_memory,
    check_ndim,
    check_positions,
    check_positions_given,
    check_positions_match,
    check_positive_int,
)
from ..encodings.base import PositionalEncoding, batch_positions, default_positions
from ..encodings.configs import AttentionConfig
from ..encodings.context import PositionContext
from ..functional.masks import allowed_keys
from .backends import Call, attend
from .kv_cache import CachedKeys, KVCache

BIAS_BACKENDS = ("auto", "blocks", "flex")


class Memory(NamedTuple):
    """An encoder output as one cross-attention layer reads it (``Attention.project_memory``):
    its keys and values (B, Hkv, S, D) computed once, with the source positions and validity,
    and the source padding mask (B, S) or None (no padding: nothing to mask)."""

    keys: CachedKeys
    padding_mask: Tensor | None


class Attention(nn.Module):
    """Multi-head self-attention with grouped-query heads and a pluggable positional encoding.

    scores = (rotate(q) · rotate(k)) / sqrt(D) + bias(q_pos, k_pos), then the encoding's relative
    terms; softmax over allowed keys; output projection. Runs through
    ``F.scaled_dot_product_attention`` (bias as ``attn_mask``) unless the encoding rewrites
    logits or values, where an explicit path is used.

    Args:
        d_model: model width C; must be divisible by ``n_heads``.
        n_heads: query heads H. ``n_kv_heads`` (default H) key/value heads, dividing H.
        pe: the encoding whose hooks are called (shared across layers if the caller wishes).
        causal: mask keys after the query (by order in the sequence/cache, not by position id).
        block_size: queries per block when the encoding has a ``bias``, so the (Tq, Tk) bias
            is never materialised whole; default: about 4M bias entries per block (16 MiB).
        bias_backend: how a score bias reaches SDPA (``backends``). "auto" (default): on CPU,
            offset-only biases (ALiBi, T5, Kerple) at consecutive positions as a zero-copy
            Toeplitz view (``toeplitz``), FIRE in inference by one fused kernel
            (``fire_fused``), anything else by query blocks. "blocks": always by query blocks.
            "flex": offset-only biases fused into compiled FlexAttention on GPUs (as "auto" on
            CPU, where PyTorch's compiled flex kernel is wrong on AVX2). The fused forms fall
            back to blocks for padding, segments or a cache offset (flex also for dropout);
            learned tables (T5, Kerple) keep their gradients through the Toeplitz view.
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
        block_size: int | None = None,
        bias_backend: Literal["auto", "blocks", "flex"] = "auto",
    ) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        cfg = AttentionConfig(
            d_model=d_model,
            n_heads=n_heads,
            causal=causal,
            n_kv_heads=n_kv_heads,
            dropout=dropout,
            bias=bias,
        )
        if not isinstance(pe, PositionalEncoding):
            raise TypeError(f"pe must be a PositionalEncoding, got {type(pe).__name__}")
        check_encoding_heads(pe, n_heads, cfg.head_dim)
        if block_size is not None:
            check_positive_int(block_size, "block_size")
        if bias_backend not in BIAS_BACKENDS:
            raise ValueError(f"bias_backend must be one of {BIAS_BACKENDS}, got {bias_backend!r}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = cfg.head_dim
        self.causal, self.dropout = causal, dropout
        self.pe: PositionalEncoding = pe
        self.block_size = block_size  # query block for score-bias encodings (memory O(H·block·T))
        self.bias_backend = bias_backend
        kv_width = n_kv_heads * self.head_dim
        self.qkv = nn.Linear(d_model, d_model + 2 * kv_width, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: Tensor,
        pos: Tensor | None = None,
        *,
        padding_mask: Tensor | None = None,
        segment_ids: Tensor | None = None,
        cache: KVCache | None = None,
        ctx: PositionContext | None = None,
    ) -> Tensor:
        """x (B, T, C) at positions ``pos`` (T,) or (B, T) (default: cache length + 0..T-1), or
        (T, A) or (B, T, A) for an encoding of A position axes (``pe.capabilities.axes``:
        images, video, M-RoPE; no default: its positions are given).

        ``padding_mask`` (B, T) bool, True for real tokens; ``segment_ids`` (B, T) int, tokens
        attend only within their segment (packed sequences; default one segment, or after
        cached entries each row's latest: a decode step continues its document). ``ctx``: the
        forward's position context (``pe.prepare``, built by the model once for all layers:
        its q_pos are this call's positions, its k_pos the cached keys' then these); made here
        when not given. Returns (B, T, C).
        """
        check_ndim(x, 3, "x", "(B, T, C)")
        B, T, C = x.shape
        if self.d_model != C:
            raise ValueError(f"x must have C = d_model = {self.d_model} features, got {C}")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (one layer's), got {type(cache).__name__}")
        offset = 0 if cache is None else len(cache)
        if ctx is None:
            ctx = new_context(self.pe, pos, B, T, cache, x.device)
        else:
            check_context(ctx, pos, T, offset + T)
        pos = ctx.q_pos
        q, k, v = self._project(x)  # (B, H, T, D), (B, Hkv, T, D) x2
        if cache is not None and cache.streams:
            check_streamable(self.pe)
        # unrotated keys in the cache, all rotated at their current positions: dynamic
        # frequencies, or a streaming cache's positions (they move as entries are evicted)
        rerotate = cache is not None and (self.pe.kv_policy == "rerotate" or cache.streams)
        if not rerotate:
            q, k = self.pe.rotate(q, k, pos, pos, ctx=ctx)
        new = CachedKeys(
            k,
            v,
            batch_positions(pos, B, ctx.axes),
            *_mask_inputs(B, T, x, padding_mask, segment_ids, cache),
        )
        keys = new if cache is None else cache.append(new)
        k_pos = ctx.k_pos  # (T,) | (B, T) or (B, L) (with A axes: (.., A)): equal to keys.pos
        if rerotate:  # the cache holds unrotated keys: rotate all with the current frequencies
            q, k_all = self.pe.rotate(q, keys.k, pos, k_pos, ctx=ctx)  # k_all (B, Hkv, L, D)
            keys = keys._replace(k=k_all)
        allowed = None  # nothing masked beyond what ``is_causal`` expresses
        if padding_mask is not None or segment_ids is not None or offset:
            allowed = allowed_keys(
                keys.valid, new.segment, keys.segment, causal=self.causal, offset=offset
            )  # (B, 1, T, L)
        out = attend(self, Call(q, keys, ctx, allowed, offset))  # (B, H, T, D)
        return self.proj(out.transpose(1, 2).reshape(B, T, C))  # (B, T, C)

    def project_memory(
        self, memory: Tensor, pos: Tensor, padding_mask: Tensor | None = None, *, axes: int = 1
    ) -> Memory:
        """Cross-attention keys and values of an encoder output ``memory`` (B, S, C), projected
        once per source by the key/value rows of ``qkv`` (the query rows project the decoder's
        states in ``cross``), at source positions ``pos`` (S,) | (B, S) (an encoder of
        ``axes`` A > 1 position axes: (S, A) | (B, S, A)); ``padding_mask`` (B, S) bool, True
        for real tokens. Keys are kept unrotated: ``cross`` rotates them (only when its
        encoding rotates) together with the queries."""
        pos = check_memory(memory, pos, self.d_model, axes=axes)
        B, S, C = memory.shape
        D, Hkv = self.head_dim, self.n_kv_heads
        bias = None if self.qkv.bias is None else self.qkv.bias[C:]
        k, v = F.linear(memory, self.qkv.weight[C:], bias).split([Hkv * D, Hkv * D], dim=-1)
        k = k.view(B, S, Hkv, D).transpose(1, 2)  # (B, Hkv, S, D)
        v = v.view(B, S, Hkv, D).transpose(1, 2)  # (B, Hkv, S, D)
        valid, segment = _mask_inputs(B, S, memory, padding_mask, None)
        keys = CachedKeys(k, v, batch_positions(pos, B, axes), valid, segment)
        return Memory(keys, padding_mask)

    def cross(
        self,
        x: Tensor,
        memory: Memory,
        pos: Tensor | None = None,
        *,
        ctx: PositionContext | None = None,
    ) -> Tensor:
        """Cross-attention of decoder states x (B, T, C) over an encoder's ``memory``: queries
        projected by the query rows of ``qkv``, keys and values those of ``memory``; no
        causal mask, padded source tokens masked. The encoding's hooks see the queries at their
        positions ``pos`` (T,) | (B, T) (default 0..T-1) and the keys at their source positions
        (the context's q_pos and k_pos; ``ctx`` = ``pe.prepare(pos, memory positions)``, made
        here when not given): an ``EncoderDecoder`` gives its cross-attention NoPE, or its
        decoder's rotation when asked (``cross_rotation``). Returns (B, T, C)."""
        check_cross(x, memory, Memory, self.d_model, self.causal)
        B, T, C = x.shape
        keys = memory.keys
        if ctx is None:
            if pos is None:
                pos = default_positions(T, device=x.device)
            pos = check_positions(pos, "pos")
            check_positions_match(pos, B, T, "pos")
            ctx = self.pe.prepare(pos, keys.pos)
        else:
            check_cross_context(ctx, pos, T, keys.pos)
        C, D = self.d_model, self.head_dim
        bias = None if self.qkv.bias is None else self.qkv.bias[:C]
        q = F.linear(x, self.qkv.weight[:C], bias).view(B, T, self.n_heads, D).transpose(1, 2)
        q, k = self.pe.rotate(q, keys.k, ctx.q_pos, ctx.k_pos, ctx=ctx)  # (B, H|Hkv, T|S, D)
        allowed = None
        if memory.padding_mask is not None:
            q_segment = torch.zeros(B, T, dtype=torch.long, device=x.device)
            allowed = allowed_keys(
                keys.valid, q_segment, keys.segment, causal=False
            )  # (B, 1, T, S)
        out = attend(self, Call(q, keys._replace(k=k), ctx, allowed, 0))  # (B, H, T, D)
        return self.proj(out.transpose(1, 2).reshape(B, T, C))  # (B, T, C)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, T, _ = x.shape
        D, Hkv = self.head_dim, self.n_kv_heads
        q, k, v = self.qkv(x).split([self.d_model, Hkv * D, Hkv * D], dim=-1)
        q = q.view(B, T, self.n_heads, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        return q, k, v


def _mask_inputs(
    B: int,
    T: int,
    x: Tensor,
    padding_mask: Tensor | None,
    segment_ids: Tensor | None,
    cache: KVCache | None = None,
) -> tuple[Tensor, Tensor]:
    """Validity (B, T) bool and segment ids (B, T) int64, defaults all-valid / one segment:
    segment 0, or after cached entries each row's latest segment (a decode step continues the
    document it follows, also after a packed prefill)."""
    if padding_mask is None:
        valid = torch.ones(B, T, dtype=torch.bool, device=x.device)
    else:
        check_mask_tensor(padding_mask, "padding_mask", "bool", (B, T))
        valid = padding_mask
    last = None if cache is None else cache.last_segment()  # (B, 1) or None
    if segment_ids is None and last is not None and last.shape[0] == B:
        segment = last.expand(B, T)
    elif segment_ids is None:  # (another batch size: the cache's append says so)
        segment = torch.zeros(B, T, dtype=torch.long, device=x.device)
    else:
        check_mask_tensor(segment_ids, "segment_ids", "integer", (B, T))
        segment = segment_ids.long()
    return valid, segment


def new_context(
    pe: PositionalEncoding,
    pos: Tensor | None,
    B: int,
    T: int,
    cache: KVCache | None,
    device: torch.device,
) -> PositionContext:
    """``pe.prepare`` for T new tokens at ``pos`` (T,) | (B, T) (default: after the cache's
    entries), or (T, A) | (B, T, A) for an encoding of A position axes (given: grids have no
    default), validated to int64 once, and every key: the cached ones, then these."""
    axes = pe.capabilities.axes
    check_positions_given(pos, axes, pe.name)
    if pos is not None and cache is not None and cache.streams:
        raise ValueError(
            "a KVCache(window=...) assigns positions inside the cache; call without pos"
        )
    start = 0 if cache is None else len(cache)
    # default positions after keys at 0..start-1: offsets are known without reading a value
    # (a streaming cache re-assigns its keys' positions: not known here)
    streams = cache is not None and cache.streams
    known = pos is None and not streams and (cache is None or start == 0 or cache.consecutive)
    if cache is not None:
        cache.consecutive = known
    if pos is None:
        pos = default_positions(T, offset=start, device=device)
    pos = check_positions(pos, "pos", axes)  # int64 once: every hook sees this one tensor
    check_positions_match(pos, B, T, "pos", axes)
    k_pos = pos if cache is None else cache.key_positions(batch_positions(pos, B, axes))
    ctx = pe.prepare(pos, k_pos)
    if known and T:
        ctx.offset_bounds = (1 - T, start + T - 1)  # q in start..start+T-1, keys in 0..start+T-1
    return ctx


def check_streamable(pe: PositionalEncoding) -> None:
    """Raise unless ``pe``'s positions can be re-assigned inside a streaming cache: rotary
    encodings (keys re-rotated at their cache positions) and score biases of positions (ALiBi,
    T5, Kerple, FIRE) can; positions added to token embeddings are baked into the cached
    keys, and relative logit/value terms are not supported.

    Raises: ValueError naming the encoding and what it does that streaming cannot re-assign.
    """
    caps = pe.capabilities
    problem = (
        f"reads {caps.axes} position axes; a stream's positions are 1-D"
        if caps.axes > 1
        else "adds positions to the token embeddings, where a cache cannot re-assign them"
        if caps.embeds
        else "rewrites logits or values with relative terms, which streaming does not support"
        if caps.relative_terms
        else ""
    )
    if problem:
        raise ValueError(
            f"KVCache(window=...) re-assigns positions inside the cache; encoding {pe.name!r} "
            f"{problem}. Streaming supports rotary encodings and position score biases"
        )
