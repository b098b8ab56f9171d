"""Cross-attention of a decoder over an encoder's output (``EncoderDecoder``): the encoder
output's keys and values projected once per source (``Memory``), and the decoder's queries
over them. The same ``Attention`` weights serve: the key/value rows of its ``qkv`` project the
memory, the query rows the decoder's states."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import (
    check_cross,
    check_cross_context,
    check_memory,
    check_positions,
    check_positions_match,
)
from ..encodings.base import PositionalEncoding, batch_positions, default_positions
from ..encodings.context import PositionContext
from ..functional.masks import allowed_keys
from .backends import Call, attend
from .inputs import mask_inputs
from .kv_cache import CachedKeys

if TYPE_CHECKING:
    from .attention import Attention


class Memory(NamedTuple):
    """An encoder output as one cross-attention layer reads it (``Attention.project_memory``):
    its keys and values (B, Hkv, S, D) computed once, with the source positions and validity,
    and the source padding mask (B, S) or None (no padding: nothing to mask)."""

    keys: CachedKeys
    padding_mask: Tensor | None


class CrossAttention(nn.Module):
    """``Attention``'s cross-attention methods (it derives from this): ``project_memory`` once
    per source, then ``cross`` at every decoder layer call."""

    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    causal: bool
    pe: PositionalEncoding
    qkv: nn.Linear
    proj: nn.Linear

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
        valid, segment = mask_inputs(B, S, memory, padding_mask, None)
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
        out = attend(
            cast("Attention", self), Call(q, keys._replace(k=k), ctx, allowed, 0)
        )  # (B, H, T, D)
        return self.proj(out.transpose(1, 2).reshape(B, T, C))  # (B, T, C)
