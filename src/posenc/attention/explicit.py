"""The explicit attention path: scores, the encoding's score hooks, softmax and values by hand,
with the softmax weights (``explicit_weights``). The backends run it where the encoding's
relative terms need the weights, or learned sink logits the softmax's denominator, and for
``Attention(..., return_weights=True)``.

Shapes: q (B, H, T, D); k, v (B, H, L, D) (key heads repeated); weights (B, H, T, L).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..encodings.base import PositionalEncoding
from ..encodings.state import PositionState


def explicit_weights(
    pe: PositionalEncoding,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor | None,
    ctx: PositionState,
    positions: tuple[Tensor, Tensor],
    *,
    head_dim: int,
    softmax: Callable[[Tensor], Tensor],
    dropout: Callable[[Tensor], Tensor],
) -> tuple[Tensor, Tensor]:
    """softmax(q kᵀ / √D + bias, masked, then the relative terms) v + relative values: the
    encoding ``pe``'s hooks at ``positions`` (q_pos, k_pos) in the order of
    ``posenc.encodings.base``, with the softmax weights (Vaswani et al. 2017, eq. 1, with the
    encoding's terms).

    Shapes: q (B, H, T, D); k, v (B, H, L, D) (key heads repeated); ``allowed`` bool,
    broadcastable to (B, H, T, L), or None (nothing masked) -> output (B, H, T, D) and weights
    (B, H, T, L) (before ``dropout``, which the output's weights go through). ``softmax`` runs
    over the last axis of float32 (or wider) scores; the weights return to q's dtype. D =
    ``head_dim``, not q's width (PoPE doubles it).
    """
    q_pos, k_pos = positions
    scores = (q / math.sqrt(head_dim)) @ k.swapaxes(-2, -1)  # (B, H, T, L)
    bias: Tensor | None = pe.bias(q_pos, k_pos, ctx=ctx)  # (B|1, H|1, T, L) or None
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    scores = pe.relative_logits(scores, q, k, q_pos, k_pos, ctx=ctx)
    work = torch.promote_types(scores.dtype, torch.float32)  # float64 stays float64
    weights = softmax(_as(scores, work))
    weights = _as(weights, q.dtype)  # (B, H, T, L)
    probs = dropout(weights)
    out = probs @ v  # (B, H, T, D)
    extra: Tensor | None = pe.relative_values(probs, q_pos, k_pos, ctx=ctx)
    return (out if extra is None else out + extra), weights


def _as(x: Tensor, dtype: torch.dtype) -> Tensor:
    """x in ``dtype``; x itself where it has that dtype already."""
    return x if x.dtype == dtype else x.to(dtype)
