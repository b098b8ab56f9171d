"""Multi-head self-attention with explicit positions (``Attention``): inputs checked, the
forward's position context, the projection, the encoding's rotation, the KV cache, the mask of
allowed keys, then the first backend that applies (``backends``) and the output projection.

Shapes: x (B, T, C); q (B, H, T, D); keys (B, Hkv, L, D) (L = cached + new); masks (B, 1, T, L).
"""

from __future__ import annotations

import math
from typing import Literal, overload

import torch
from torch import Tensor, nn

from .._validate import check_bool, check_context, check_ndim, check_real_floating
from ..encodings.base import AttentionInputs, PositionalEncoding, batch_positions
from ..encodings.state import PositionState
from ..functional.masks import allowed_keys, local_keys
from .backends import Call, attend, attend_weights
from .cache import CacheCheck, KeyValueCache
from .config import AttentionConfig
from .inputs import check_keep, check_streamable, new_context
from .keys import CachedKeys, Memory
from .masking import mask_inputs, plain
from .projections import (
    BIAS_BACKENDS,
    BiasBackend,
    check_attention_form,
    check_layer,
    computes_attention,
    new_weights,
)

__all__ = ["BIAS_BACKENDS", "Attention", "Memory"]


class Attention(nn.Module):
    """Multi-head self-attention with grouped-query heads and a pluggable positional encoding.

    scores = (rotate(q) · rotate(k)) / sqrt(D) + bias(q_pos, k_pos), then the encoding's relative
    terms; softmax over allowed keys; output projection. Runs through
    ``F.scaled_dot_product_attention`` (bias as ``attn_mask``) unless the encoding rewrites
    logits or values, where an explicit path is used. ``layer(x, pos, return_weights=True)``
    also returns the softmax weights (B, H, T, L), computed on the explicit path (slower:
    ``forward``). Cross-attention over an encoder's output is its sibling
    ``CrossAttention``.

    The layer never calls ``embed``: an additive encoding (sinusoidal, learned) belongs on the
    token embeddings before the first layer, ``x = pe.embed(tok(idx), pos)``. Built around one,
    the layer would change nothing, so it refuses unless told ``embedded=True`` (the models
    pass it: ``TinyTransformer`` embeds, then hands the same encoding to every layer).

    Args:
        d_model: model width C; must be divisible by ``n_heads``.
        n_heads: query heads H. ``n_kv_heads`` (default H) key/value heads, dividing H.
        pe: the encoding whose hooks are called (shared across layers if the caller wishes).
        embedded: the caller applies ``pe.embed`` to the input (required for an additive
            encoding, else ValueError; harmless for the others).
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
        window: a sliding window of W keys: each query sees the keys less than W positions
            away (a causal one: itself and the W - 1 before it), in the full forward and with
            a cache (``functional.masks.local_keys``; give the layer a ``KVCache(keep=W - 1)``
            to hold only those). ``chunk``: each query sees the keys of its chunk of C
            positions (Llama 4's chunked attention; ``KVCache(keep=C - 1)``). Both run on
            an explicit mask (no fused backend).
        sink_logits: one learned logit per head in the softmax's denominator, as gpt-oss
            (``posenc.functional.softmax_with_sinks``): ``self.sink_logits`` (H,), zeros at
            start; the scores then run on the explicit path. Not the streaming cache's sink
            tokens (``KVCache(sinks=...)``), which keep the first keys.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        pe: PositionalEncoding,
        causal: bool,
        embedded: bool = False,
        n_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = False,
        block_size: int | None = None,
        bias_backend: BiasBackend = "auto",
        sink_logits: bool = False,
        window: int | None = None,
        chunk: int | None = None,
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
            window=window,
            chunk=chunk,
        )
        check_layer(
            pe,
            n_heads,
            cfg.head_dim,
            embedded=embedded,
            block_size=block_size,
            bias_backend=bias_backend,
        )
        check_bool(sink_logits, "sink_logits")
        check_attention_form(
            pe, causal=causal, window=window, chunk=chunk, sink_logits=sink_logits, dropout=dropout
        )
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = cfg.head_dim
        self.causal, self.dropout = causal, dropout
        self.pe: PositionalEncoding = pe
        self.embedded = embedded
        self.window, self.chunk = cfg.window, cfg.chunk
        self.block_size = block_size  # query block for score-bias encodings (memory O(H·block·T))
        self.bias_backend = bias_backend
        self.qkv, self.proj = new_weights(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.sink_logits: nn.Parameter | None = (
            nn.Parameter(torch.zeros(n_heads)) if sink_logits else None
        )  # (H,)

    @overload
    def forward(
        self,
        x: Tensor,
        pos: Tensor | None = None,
        *,
        padding_mask: Tensor | None = None,
        segment_ids: Tensor | None = None,
        cache: KeyValueCache | None = None,
        ctx: PositionState | None = None,
        return_weights: Literal[False] = False,
    ) -> Tensor: ...

    @overload
    def forward(
        self,
        x: Tensor,
        pos: Tensor | None = None,
        *,
        padding_mask: Tensor | None = None,
        segment_ids: Tensor | None = None,
        cache: KeyValueCache | None = None,
        ctx: PositionState | None = None,
        return_weights: Literal[True],
    ) -> tuple[Tensor, Tensor]: ...

    def forward(
        self,
        x: Tensor,
        pos: Tensor | None = None,
        *,
        padding_mask: Tensor | None = None,
        segment_ids: Tensor | None = None,
        cache: KeyValueCache | None = None,
        ctx: PositionState | None = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """x (B, T, C) at positions ``pos`` (T,) or (B, T) (default: cache length + 0..T-1), or
        (T, A) or (B, T, A) for an encoding of A position axes (given: grids have no default),
        or those of ``ctx``, the forward's position context (its q_pos this call's positions,
        its k_pos the cached keys' then these). ``padding_mask`` (B, T) bool, True for real
        tokens; ``segment_ids`` (B, T) integer, tokens attend within their segment (default
        one, or after cached entries each row's latest). Returns (B, T, C).

        ``return_weights=True`` returns (y (B, T, C), weights (B, H, T, L)): the softmax
        weights of every query over the L keys it sees (cached ones first), 0 where masked,
        before dropout. They come from the explicit path (``explicit.explicit_weights``: the
        whole (B, H, T, L) scores at once, no fused kernel, no query blocks), so it is slower
        and takes O(B·H·T·L) memory; y equals the default call's output up to rounding.

        Raises: TypeError/ValueError for an x that is not a real floating (B, T, C) tensor of
        C = d_model, a cache that is not a KVCache, weights asked of an encoding computing its
        own attention, positions or masks of the wrong shape or dtype, or a cache that cannot
        take this layer (``inputs.check_keep``, ``inputs.check_streamable``)."""
        check_ndim(x, 3, "x", "(B, T, C)")
        check_real_floating(x, "x")  # token ids go through an embedding first
        B, T, C = x.shape
        if self.d_model != C:
            raise ValueError(f"x must have C = d_model = {self.d_model} features, got {C}")
        if cache is not None and not isinstance(cache, CacheCheck):
            raise TypeError(f"cache must be a KVCache (one layer's), got {type(cache).__name__}")
        pe = self.pe
        if return_weights and computes_attention(pe):
            raise ValueError(
                f"encoding {pe.name!r} computes attention itself, blockwise: it has no "
                "softmax weights to return"
            )
        offset = 0 if cache is None else len(cache)  # keys before this call's
        if ctx is None:
            ctx = new_context(pe, pos, B, T, cache, x.device, dtype=x.dtype)
        else:
            check_context(ctx, pos, T, offset + T)
        pos = ctx.q_pos
        q, k, v = self._project(x)  # (B, H, T, D), (B, Hkv, T, D) x2
        # unrotated keys in the cache, all rotated at their current positions: dynamic
        # frequencies, or a streaming cache's positions (they move as entries are evicted)
        rerotate = False
        if cache is not None:
            check_keep(cache, self.window, self.chunk)
            if cache.streams:
                check_streamable(pe)
            rerotate = cache.streams or pe.kv_policy == "rerotate"
        if not rerotate and _rotates_in_place(pe):
            q, k = pe.rotate(q, k, pos, pos, ctx=ctx.new_keys(), inplace=True)  # type: ignore[call-arg]
        elif not rerotate:
            q, k = pe.rotate(q, k, pos, pos, ctx=ctx.new_keys())
        valid, segment = mask_inputs(B, T, x, padding_mask, segment_ids, cache)
        new = CachedKeys(k, v, batch_positions(pos, B, ctx.axes), valid, segment)
        keys = new if cache is None else cache.append(new)
        if computes_attention(pe):  # the encoding's own causal attention (FoX, PaTH, ...)
            out = self._attend_form(x, q, keys, ctx, cache)  # (B, H, T, D)
            return self.proj(out.swapaxes(1, 2).reshape(B, T, C))
        if rerotate:  # the cache holds unrotated keys: rotate all with the current frequencies
            q, k_all = pe.rotate(q, keys.k, pos, ctx.k_pos, ctx=ctx)  # (B, Hkv, L, D)
            keys = keys._replace(k=k_all)
        allowed = None  # nothing masked beyond the causal or bidirectional mask
        local = None  # a sliding window or chunk: the keys near each query, by position
        if self.window is not None or self.chunk is not None:
            local = local_keys(new.pos, keys.pos, window=self.window, chunk=self.chunk)
        if local is not None or not plain(padding_mask, segment_ids, offset):
            allowed = allowed_keys(
                keys.valid,
                new.segment,
                keys.segment,
                causal=self.causal,
                offset=offset,
                local=local,
            )  # (B, 1, T, L)
        call = Call(q, keys, ctx, allowed, offset)
        if return_weights:
            out, weights = attend_weights(self, call)  # (B, H, T, D), (B, H, T, L)
            return self.proj(out.swapaxes(1, 2).reshape(B, T, C)), weights
        out = attend(self, call)  # (B, H, T, D)
        return self.proj(out.swapaxes(1, 2).reshape(B, T, C))  # (B, T, C)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, T, D), k and v (B, Hkv, T, D) of x (B, T, C) by ``qkv``."""
        B, T, _ = x.shape
        D, Hkv = self.head_dim, self.n_kv_heads
        q, k, v = self.qkv(x).split([self.d_model, Hkv * D, Hkv * D], dim=-1)
        q = q.view(B, T, self.n_heads, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        return q, k, v

    def _attend_form(
        self,
        x: Tensor,
        q: Tensor,
        keys: CachedKeys,
        ctx: PositionState,
        cache: KeyValueCache | None,
    ) -> Tensor:
        """``pe.attention_form`` of this call: x (B, T, C), q (B, H, T, D) and every key
        (``keys``, cached first), padding put in a segment of its own below every other
        (so no real query sees it), the cache's terms of its keys as ``past``; the terms it
        returns go back into the cache. Returns (B, H, T, D)."""
        if q.shape[2] == 0:  # no new token: nothing to attend, nothing to cache
            return q
        apart = keys.segment.min() - 1  # a segment id no real key has
        segment_ids = torch.where(keys.valid, keys.segment, apart)  # (B, L)
        past = None if cache is None else cache.terms
        inputs = AttentionInputs(
            x,
            q,
            keys.k,
            keys.v,
            ctx.q_pos,
            ctx.k_pos,
            keys.valid,
            segment_ids,
            past,
            1.0 / math.sqrt(self.head_dim),
        )
        out, terms = self.pe.attention_form(inputs)
        if cache is not None:
            cache.terms = terms  # (B, L, E)
        return out


def _rotates_in_place(pe: PositionalEncoding) -> bool:
    """Whether attention may rotate its fresh projections in place: nothing else holds them
    (views of the ``qkv`` output; at (1, 32, 2048, 128) a new q and k are two 16-32 MiB
    tensors a layer), so where nobody can tell: the encoding rotates by tables through a kernel
    (``rotates_in_place``: RoPE's and the grid RoPEs' ``rotate``, which take ``inplace``; not
    xPos), autograd is off (``torch.no_grad``, inference mode: nothing records q, k or the
    tables), and torch.compile is not tracing. In place and out of place give the same bits
    (every RoPE kernel)."""
    return pe.rotates_in_place and not torch.is_grad_enabled() and not torch.compiler.is_compiling()
