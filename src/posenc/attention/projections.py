"""What torch's ``Attention`` and ``CrossAttention`` share, as functions each calls: their
construction checks (the encoding, its additive form, its own attention form), their weights
(``qkv``: C -> C + 2·Hkv·D, query rows first; ``proj``: C -> C) and the projections into
heads.

Shapes: x (B, T, C); memory (B, S, C); q (B, H, T, D); k, v (B, Hkv, T|S, D).
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import check_encoding_heads, check_positive_int
from ..encodings.base import PositionalEncoding
from ..encodings.randomized import Randomized

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
            ``embedded`` (``check_embedded``), a block size below 1, an unknown backend.
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


def adds_to_embeddings(pe: PositionalEncoding) -> bool:
    """True for an encoding whose ``embed`` adds to token embeddings (``capabilities.embeds``:
    sinusoidal, learned, their grid forms), or randomized positions around one (the base
    encoding's ``embed``)."""
    if isinstance(pe, Randomized):
        return adds_to_embeddings(pe.base)
    return pe.capabilities.embeds


def computes_attention(pe: PositionalEncoding) -> bool:
    """True for an encoding that computes the whole attention from the data
    (``capabilities.attention_form``: FoX, stick-breaking, PaTH)."""
    return pe.capabilities.attention_form


def check_attention_form(
    pe: PositionalEncoding,
    *,
    causal: bool,
    window: int | None,
    chunk: int | None,
    sink_logits: bool,
    dropout: float,
) -> None:
    """Refuse a layer an encoding computing its own attention (``computes_attention``) cannot
    be: its forms are causal self-attention over every key, with no mask of positions, no
    extra softmax logit and no dropout on weights it never materialises.

    Raises: ValueError naming the encoding and the option."""
    if not computes_attention(pe):
        return
    problem = (
        "a bidirectional layer (causal=False): its forms are causal"
        if not causal
        else "a sliding window or chunk: it attends to every key of its segment"
        if window is not None or chunk is not None
        else "learned sink logits: it has no softmax to add them to"
        if sink_logits
        else f"attention dropout ({dropout}): it never materialises the weights"
        if dropout
        else ""
    )
    if problem:
        raise ValueError(
            f"encoding {pe.name!r} computes attention itself; it cannot take {problem}"
        )


def check_embedded(pe: PositionalEncoding, embedded: object) -> None:
    """Refuse to build an attention layer around an additive encoding unless the caller says
    its input already holds the embedding (``embedded=True``): the layer calls rotate, bias and
    the relative terms, never ``embed``, which belongs on the token embeddings before the first
    layer; built without it, the encoding would do nothing, silently.

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
