"""What torch's ``Attention`` and ``CrossAttention`` share, as functions each calls: their
construction checks, their weights (``qkv``: C -> C + 2·Hkv·D, query rows first; ``proj``:
C -> C), the projections into heads, and the test for the plain mask.

Shapes: x (B, T, C); memory (B, S, C); q (B, H, T, D); k, v (B, Hkv, T|S, D).
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import check_encoding_heads, check_positive_int
from ..encodings.base import PositionalEncoding
from .flow import check_embedded

BIAS_BACKENDS = ("auto", "blocks", "flex")
#: How a score bias reaches SDPA (``backends``).
BiasBackend = Literal["auto", "blocks", "flex"]


def check_layer(
    pe: PositionalEncoding,
    n_heads: int,
    head_dim: int,
    *,
    embedded: bool,
    block_size: int | None,
    bias_backend: str,
) -> None:
    """An attention layer's encoding, block size and bias backend (the widths are
    ``AttentionConfig``'s).

    Raises:
        TypeError: ``pe`` not a ``PositionalEncoding``, a non-bool ``embedded``.
        ValueError: an encoding built for other heads, an additive encoding without
            ``embedded`` (``flow.check_embedded``), a block size below 1, an unknown backend.
    """
    if not isinstance(pe, PositionalEncoding):
        raise TypeError(f"pe must be a PositionalEncoding, got {type(pe).__name__}")
    check_encoding_heads(pe, n_heads, head_dim)
    check_embedded(pe, embedded)
    if block_size is not None:
        check_positive_int(block_size, "block_size")
    if bias_backend not in BIAS_BACKENDS:
        raise ValueError(f"bias_backend must be one of {BIAS_BACKENDS}, got {bias_backend!r}")


def new_weights(d_model: int, kv_width: int, *, bias: bool) -> tuple[nn.Linear, nn.Linear]:
    """(qkv, proj): C -> C + 2·``kv_width`` (queries, keys, values) and C -> C."""
    qkv = nn.Linear(d_model, d_model + 2 * kv_width, bias=bias)
    return qkv, nn.Linear(d_model, d_model, bias=bias)


def project_queries(qkv: nn.Linear, x: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """q (B, H, T, D) of x (B, T, C) by the query rows of ``qkv``."""
    B, T, C = x.shape
    bias = None if qkv.bias is None else qkv.bias[:C]
    q = F.linear(x, qkv.weight[:C], bias)  # (B, T, C)
    return q.view(B, T, n_heads, head_dim).transpose(1, 2)


def project_keys(
    qkv: nn.Linear, memory: Tensor, n_kv_heads: int, head_dim: int
) -> tuple[Tensor, Tensor]:
    """k, v (B, Hkv, S, D) of memory (B, S, C) by the key/value rows of ``qkv``."""
    B, S, C = memory.shape
    D, Hkv = head_dim, n_kv_heads
    bias = None if qkv.bias is None else qkv.bias[C:]
    k, v = F.linear(memory, qkv.weight[C:], bias).split([Hkv * D, Hkv * D], dim=-1)
    return k.view(B, S, Hkv, D).transpose(1, 2), v.view(B, S, Hkv, D).transpose(1, 2)


def plain(padding_mask: Tensor | None, segment_ids: Tensor | None, offset: int) -> bool:
    """No padding, segments or cache offset: SDPA's ``is_causal`` (or nothing) masks."""
    return padding_mask is None and segment_ids is None and not offset
