"""Cross-attention of a decoder over an encoder's output (``EncoderDecoder``): the encoder
output's keys and values projected once per source (``flow.Memory``), and the decoder's queries
over them. ``Attention``'s sibling: the same weights' layout (the key/value rows of ``qkv``
project the memory, the query rows the decoder's states), the same backends."""

from __future__ import annotations

from torch import Tensor, nn

from .._validate import check_ndim, check_positions
from ..encodings.base import PositionalEncoding, batch_positions, default_positions
from ..encodings.state import PositionState as PositionContext
from . import projections
from .backends import Call, attend
from .config import AttentionConfig
from .flow import CachedKeys, CrossAttentionFlow, Memory, check_attention_form
from .projections import BiasBackend, check_layer, new_weights


class CrossAttention(CrossAttentionFlow, nn.Module):
    """Multi-head cross-attention of decoder states over an encoder's output (Vaswani et al. 2017).

    Decoder states x (B, T, C) over an encoder's ``Memory`` (``project_memory``, once per
    source), grouped-query heads, never causal, padded source tokens masked
    (``posenc.attention.flow.CrossAttentionFlow.cross``).

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
        ctx: PositionContext | None = None,
    ) -> Tensor:
        """``cross``: x (B, T, C) over ``memory`` -> (B, T, C)."""
        out: Tensor = self.cross(x, memory, pos, ctx=ctx)
        return out

    check_ndim = staticmethod(check_ndim)
    check_positions = staticmethod(check_positions)
    batch_positions = staticmethod(batch_positions)
    plain = staticmethod(projections.plain)

    def default_positions(self, T: int, x: Tensor) -> Tensor:
        """Queries' positions 0..T-1 (T,) on x's device, when ``cross`` is given none."""
        return default_positions(T, device=x.device)

    def project_queries(self, x: Tensor) -> Tensor:
        """q (B, H, T, D) of x (B, T, C) by the query rows of ``qkv``."""
        return projections.project_queries(self.qkv, x, self.n_heads, self.head_dim)

    def project_keys(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """k, v (B, Hkv, S, D) of memory (B, S, C) by the key/value rows of ``qkv``."""
        return projections.project_keys(self.qkv, memory, self.n_kv_heads, self.head_dim)

    def attend(
        self,
        q: Tensor,
        keys: CachedKeys,
        ctx: PositionContext,
        allowed: Tensor | None,
        offset: int,
    ) -> Tensor:
        """Softmax attention through the first backend that applies (``backends``)."""
        return attend(self, Call(q, keys, ctx, allowed, offset))
