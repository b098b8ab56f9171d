"""Cross-attention of a decoder over an encoder's output (``EncoderDecoder``): the encoder
output's keys and values projected once per source (``flow.Memory``), and the
decoder's queries over them. The same ``Attention`` weights serve: the key/value rows of its
``qkv`` project the memory, the query rows the decoder's states."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import check_ndim, check_positions
from ..encodings.base import PositionalEncoding, batch_positions, default_positions
from ..encodings.context import PositionContext
from .backends import Call, attend, attend_weights
from .flow import AttentionFlow, CachedKeys

if TYPE_CHECKING:
    from .attention import Attention


class CrossAttention(AttentionFlow, nn.Module):
    """``Attention``'s torch side of ``posenc.attention.flow`` (it derives from
    this): ``project_memory`` once per source, then ``cross`` at every decoder layer call, and
    the hooks they share with ``forward``."""

    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    causal: bool
    pe: PositionalEncoding
    qkv: nn.Linear
    proj: nn.Linear
    check_ndim = staticmethod(check_ndim)
    check_positions = staticmethod(check_positions)
    batch_positions = staticmethod(batch_positions)

    def default_positions(self, T: int, x: Tensor) -> Tensor:
        return default_positions(T, device=x.device)

    def project_queries(self, x: Tensor) -> Tensor:
        """q (B, H, T, D) of x (B, T, C) by the query rows of ``qkv``."""
        B, T, C = x.shape
        bias = None if self.qkv.bias is None else self.qkv.bias[:C]
        q = F.linear(x, self.qkv.weight[:C], bias)  # (B, T, C)
        return q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)

    def project_keys(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """k, v (B, Hkv, S, D) of memory (B, S, C) by the key/value rows of ``qkv``."""
        B, S, C = memory.shape
        D, Hkv = self.head_dim, self.n_kv_heads
        bias = None if self.qkv.bias is None else self.qkv.bias[C:]
        k, v = F.linear(memory, self.qkv.weight[C:], bias).split([Hkv * D, Hkv * D], dim=-1)
        return k.view(B, S, Hkv, D).transpose(1, 2), v.view(B, S, Hkv, D).transpose(1, 2)

    def plain(self, padding_mask: Tensor | None, segment_ids: Tensor | None, offset: int) -> bool:
        """No padding, segments or cache offset: SDPA's ``is_causal`` (or nothing) masks."""
        return padding_mask is None and segment_ids is None and not offset

    def attend(
        self,
        q: Tensor,
        keys: CachedKeys,
        ctx: PositionContext,
        allowed: Tensor | None,
        offset: int,
    ) -> Tensor:
        """Softmax attention through the first backend that applies (``backends``)."""
        return attend(cast("Attention", self), Call(q, keys, ctx, allowed, offset))

    def attend_weights(
        self,
        q: Tensor,
        keys: CachedKeys,
        ctx: PositionContext,
        allowed: Tensor | None,
        offset: int,
    ) -> tuple[Tensor, Tensor]:
        """Softmax attention by the explicit path, with its weights (``backends``)."""
        return attend_weights(cast("Attention", self), Call(q, keys, ctx, allowed, offset))
