"""Forgetting attention, FoX (Lin et al. 2025, arXiv:2503.02130): softmax attention whose
logits decay by a data-dependent forget gate."""

from __future__ import annotations

from typing import Any

from ._chunked import check_attention, check_per_token, check_segments, dot_attention, work_dtype


def forgetting_attention(
    q: Any,
    k: Any,
    v: Any,
    log_f: Any,
    *,
    scale: float | None = None,
    segment_ids: Any = None,
    block_size: int | None = None,
) -> Any:
    """Causal softmax attention with a forget gate: o_i = Σ_(j<=i) softmax_j(s_ij) v_j,

        s_ij = scale · q_i·k_j + Σ_(l=j+1..i) log f_l,

    log f_t = logsigmoid(w_f·x_t + b_f) <= 0 per head and token (the caller's projection;
    FoX, Lin et al. 2025, arXiv:2503.02130, eq. 3-4). log_f = 0 is causal softmax attention.

    Computed blockwise (``posenc.functional._chunked``): query chunks against key chunks of
    ``block_size`` (default 128) by a running log-sum-exp, the gate as differences of one
    cumulative sum of log_f (float32, float64 for float64 inputs), so memory is
    O(B·H·block·L), never (L, L). Queries are the last Tq of the L keys (prefill Tq = L, a
    decode step Tq = 1). ``segment_ids`` (B, L) keeps each query to keys of its own segment:
    packed sequences (contiguous runs) attend as if run apart; left padding is a segment of
    its own. Any array-API namespace (torch, NumPy, JAX).

    Shapes: q (B, H, Tq, D); k (B, Hkv, L, D), v (B, Hkv, L, Dv), Hkv dividing H (grouped
    query heads); log_f (B, H, L), one gate per query head -> (B, H, Tq, Dv) in v's dtype.
    Raises: TypeError/ValueError for non-floating inputs, shapes that disagree, Hkv not
    dividing H, Tq > L, a scale <= 0 or block_size < 1.
    """
    G, scale = check_attention(q, k, v, scale, block_size)
    B, H, L = q.shape[0], q.shape[1], k.shape[2]
    check_per_token(log_f, (B, H, L), "log_f", "(B, H, L)")
    check_segments(segment_ids, B, L)
    dtype = work_dtype(q, k, v, log_f)
    return dot_attention(
        q, k, v, G, scale, dtype=dtype, block_size=block_size, segment_ids=segment_ids, log_f=log_f
    )
