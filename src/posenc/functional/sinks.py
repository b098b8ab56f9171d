"""Learned attention sinks (as gpt-oss ships them, OpenAI 2025, arXiv:2508.10925): one logit
per head in the softmax's denominator, a key every query may put weight on whose value is 0."""

from __future__ import annotations

from typing import Any

from ._chunked import check_attention, check_per_token, check_segments, dot_attention, work_dtype
from ._xp import astype, namespace


def softmax_with_sinks(logits: Any, sinks: Any) -> Any:
    """Softmax with one extra logit per head whose weight is dropped.

    p_ij = e^(s_ij) / (e^(sink_h) + Σ_j' e^(s_ij')): softmax over the last axis with one
    more logit per head whose weight is dropped, so a row sums to less than 1.

    Computed as gpt-oss does: the row's max (over its logits and the sink) subtracted first.
    Shapes: logits (B, H, Tq, Tk) (masked entries -inf); sinks (H,) -> (B, H, Tq, Tk).
    Paper: OpenAI 2025, arXiv:2508.10925 (gpt-oss).
    """
    xp = namespace(logits, sinks)
    sink = xp.broadcast_to(astype(sinks, logits.dtype)[:, None], logits.shape[1:3])  # (H, Tq)
    top = xp.maximum(xp.max(logits, axis=-1), sink)  # (B, H, Tq)
    e = xp.exp(logits - top[..., None])
    return e / (xp.sum(e, axis=-1) + xp.exp(sink - top))[..., None]


def attention_with_sinks(
    q: Any,
    k: Any,
    v: Any,
    sinks: Any,
    *,
    scale: float | None = None,
    segment_ids: Any = None,
    block_size: int | None = None,
) -> Any:
    """Causal softmax attention with a learned sink logit per head:

        o_i = Σ_(j<=i) e^(s_ij) v_j / (e^(sink_h) + Σ_(j<=i) e^(s_ij)),  s_ij = scale · q_i·k_j,

    gpt-oss's attention (OpenAI 2025, arXiv:2508.10925; transformers' ``gpt_oss``
    ``eager_attention_forward``) before its output projection; ``softmax_with_sinks`` is the
    same normalisation on materialised logits.

    Blockwise as ``forgetting_attention`` (the sink starts the running log-sum-exp): memory
    O(B·H·block·L). Queries are the last Tq of the L keys; ``segment_ids`` (B, L) as there.
    Any array-API namespace.

    Shapes: q (B, H, Tq, D); k (B, Hkv, L, D), v (B, Hkv, L, Dv), Hkv dividing H; sinks (H,)
    -> (B, H, Tq, Dv) in v's dtype.
    Raises: TypeError/ValueError as ``forgetting_attention``, and for sinks not (H,) floating.
    """
    G, scale = check_attention(q, k, v, scale, block_size)
    B, H, L = q.shape[0], q.shape[1], k.shape[2]
    check_per_token(sinks, (H,), "sinks", "(H,)")
    check_segments(segment_ids, B, L)
    dtype = work_dtype(q, k, v, sinks)
    return dot_attention(
        q, k, v, G, scale, dtype=dtype, block_size=block_size, segment_ids=segment_ids, sinks=sinks
    )
