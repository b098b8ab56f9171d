"""Cross-attention of a decoder over an encoder's output (``EncoderDecoder``): the encoder
output's keys and values projected once per source (``keys.Memory``), and the decoder's queries
over them. ``Attention``'s sibling: the same weights' layout (the key/value rows of ``qkv``
project the memory, the query rows the decoder's states), the same backends.

Shapes: x (B, T, C); memory (B, S, C); q (B, H, T, D); k, v (B, Hkv, S, D); masks (B, 1, T, S).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._validate import (
    check_cross,
    check_cross_context,
    check_memory,
    check_positions,
    check_positions_match,
)
from ..encodings.base import PositionalEncoding, batch_positions, default_positions
from ..encodings.state import PositionState
from ..functional.masks import allowed_keys
from .backends import Call, attend
from .config import AttentionConfig
from .keys import CachedKeys, Memory
from .masking import mask_inputs
from .projections import (
    BiasBackend,
    check_attention_form,
    check_layer,
    new_weights,
    project_keys,
    project_queries,
)


class CrossAttention(nn.Module):
    """Multi-head cross-attention of decoder states over an encoder's output (Vaswani et al. 2017).

    Decoder states x (B, T, C) over an encoder's ``Memory`` (``project_memory``, once per
    source), grouped-query heads, never causal, padded source tokens masked
    (``cross``).

    scores = (rotate(q) · rotate(k)) / sqrt(D) + bias(q_pos, k_pos), queries at their target
    positions and keys at their source positions; softmax; output projection. The encoding is
    what the model gives cross-attention: NoPE, or its decoder's rotation
    (``EncoderDecoder(cross_rotation=True)``).

    Args:
        d_model: model width C; must be divisible by ``n_heads``.
        n_heads: query heads H.
        pe: the encoding whose hooks are called.
        embedded: as ``Attention``'s (required around an additive encoding).
        n_kv_heads: key/value heads (default H), dividing H.
        dropout: attention dropout probability, as ``Attention``'s.
        bias: whether the projections have a bias, as ``Attention``'s.
        block_size: as ``Attention``'s (a score bias built by query blocks of this size).
        bias_backend: as ``Attention``'s (how a score bias is applied: dense, blocks or fused).
    """

    causal = False  # ``cross`` refuses a causal layer: a query sees every source token

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        pe: PositionalEncoding,
        embedded: bool = False,
        n_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = False,
        block_size: int | None = None,
        bias_backend: BiasBackend = "auto",
    ) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        cfg = AttentionConfig(
            d_model=d_model,
            n_heads=n_heads,
            causal=False,
            n_kv_heads=n_kv_heads,
            dropout=dropout,
            bias=bias,
        )
        check_layer(
            pe,
            n_heads,
            cfg.head_dim,
            embedded=embedded,
            block_size=block_size,
            bias_backend=bias_backend,
        )
        # an encoding computing its own (causal, self-) attention has no cross form
        check_attention_form(
            pe, causal=False, window=None, chunk=None, sink_logits=False, dropout=dropout
        )
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim, self.dropout = cfg.head_dim, dropout
        self.pe: PositionalEncoding = pe
        self.embedded = embedded
        self.block_size, self.bias_backend = block_size, bias_backend
        self.qkv, self.proj = new_weights(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.sink_logits: nn.Parameter | None = None  # (the backends read it: none here)

    def forward(
        self,
        x: Tensor,
        memory: Memory,
        pos: Tensor | None = None,
        *,
        ctx: PositionState | None = None,
    ) -> Tensor:
        """``cross``: x (B, T, C) over ``memory`` -> (B, T, C)."""
        return self.cross(x, memory, pos, ctx=ctx)

    def project_memory(
        self, memory: Tensor, pos: Tensor, padding_mask: Tensor | None = None, *, axes: int = 1
    ) -> Memory:
        """Cross-attention keys and values of an encoder output ``memory`` (B, S, C), projected
        once per source by the key/value rows of ``qkv`` (the query rows project the decoder's
        states in ``cross``), at source positions ``pos`` (S,) | (B, S) (an encoder of
        ``axes`` A > 1 position axes: (S, A) | (B, S, A)); ``padding_mask`` (B, S) bool, True
        for real tokens. Keys are kept unrotated: ``cross`` rotates them (only when its
        encoding rotates) together with the queries.

        Raises: TypeError/ValueError for a memory that is not (B, S, C) with C = d_model, or
        positions or a mask of the wrong shape or dtype."""
        pos = check_memory(memory, pos, self.d_model, axes=axes)
        B, S, _ = memory.shape
        k, v = project_keys(self.qkv, memory, self.n_kv_heads, self.head_dim)  # (B, Hkv, S, D)
        valid, segment = mask_inputs(B, S, memory, padding_mask, None)
        keys = CachedKeys(k, v, batch_positions(pos, B, axes), valid, segment)
        return Memory(keys, padding_mask)

    def cross(
        self,
        x: Tensor,
        memory: Memory,
        pos: Tensor | None = None,
        *,
        ctx: PositionState | None = None,
    ) -> Tensor:
        """Cross-attention of decoder states x (B, T, C) over an encoder's ``memory``: queries
        projected by the query rows of ``qkv``, keys and values those of ``memory``; no
        causal mask, padded source tokens masked. The encoding's hooks see the queries at their
        positions ``pos`` (T,) | (B, T) (default 0..T-1) and the keys at their source positions
        (the context's q_pos and k_pos; ``ctx`` = ``pe.prepare(pos, memory positions)``, made
        here when not given): an ``EncoderDecoder`` gives its cross-attention NoPE, or its
        decoder's rotation when asked (``cross_rotation``). Returns (B, T, C).

        Raises: TypeError/ValueError for an x that is not (B, T, C) of the memory's B and
        C = d_model, a memory that is not a ``Memory``, or positions of the wrong shape."""
        check_cross(x, memory, Memory, self.d_model, self.causal)
        B, T, C = x.shape
        keys = memory.keys
        if ctx is None:
            pos = default_positions(T, device=x.device) if pos is None else pos
            pos = check_positions(pos, "pos")
            check_positions_match(pos, B, T, "pos")
            ctx = self.pe.prepare(pos, keys.pos, dtype=x.dtype)
        else:
            check_cross_context(ctx, pos, T, keys.pos)
        q = project_queries(self.qkv, x, self.n_heads, self.head_dim)  # (B, H, T, D)
        q, k = self.pe.rotate(q, keys.k, ctx.q_pos, ctx.k_pos, ctx=ctx)  # (B, H|Hkv, T|S, D)
        allowed = None  # no padded source token: nothing masked
        if memory.padding_mask is not None:
            q_segment = torch.zeros((B, T), dtype=keys.segment.dtype, device=x.device)
            allowed = allowed_keys(keys.valid, q_segment, keys.segment, causal=False)  # (B,1,T,S)
        out = attend(self, Call(q, keys._replace(k=k), ctx, allowed, 0))  # (B, H, T, D)
        return self.proj(out.swapaxes(1, 2).reshape(B, T, C))  # (B, T, C)
