"""PaTH attention (Yang et al. 2025, arXiv:2505.16381): position as the product of
data-dependent Householder transforms between key and query."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._chunked import (
    Chunks,
    check_attention,
    check_per_token,
    check_segments,
    chunks,
    forget_gate,
    key_chunks,
    query_chunks,
    segment_chunks,
    softmax_passes,
    unchunk,
    work_dtype,
)
from ._xp import astype, device_of, namespace


def path_attention(
    q: Any,
    k: Any,
    v: Any,
    w: Any,
    beta: Any,
    log_f: Any = None,
    *,
    scale: float | None = None,
    segment_ids: Any = None,
    block_size: int | None = None,
) -> Any:
    """Causal softmax attention with PaTH's position encoding: o_i = Σ_(j<=i) softmax_j(s_ij) v_j,

        s_ij = scale · q_iᵀ H_i H_(i-1) ··· H_(j+1) k_j  (+ Σ_(l=j+1..i) log f_l),
        H_t = I - β_t w_t w_tᵀ,

    w_t a unit vector and β_t in (0, 2) per key head and token (the caller's projections),
    the empty product (j = i) the identity (Yang et al. 2025, arXiv:2505.16381, sec. 3;
    ``log_f`` adds FoX's forget gate, their PaTH-FoX). Nothing checks that w is unit or β in
    range: data-dependent values are the caller's.

    Computed blockwise over key chunks of ``block_size`` C (default 128): within a chunk by
    C sequential rank-one updates (keys carried to the chunk's end, queries back to its
    start, and each chunk's whole product M_c = H_e ··· H_s as a D x D matrix); across chunks
    s_ij = q̂_i M_(n-1) ··· M_(m+1) k̃_j, the query carried one chunk further per pass. Memory
    O(B·H·(C + D²/C)·L), never (L, L). Queries are the last Tq of the L keys; ``segment_ids``
    (B, L) as in ``forgetting_attention`` (contiguous segments attend as if run apart).
    float32, or float64 for float64 inputs. Any array-API namespace.

    Shapes: q (B, H, Tq, D); k, w (B, Hkv, L, D); v (B, Hkv, L, Dv); beta (B, Hkv, L), Hkv
    dividing H (the transforms belong to key heads); log_f (B, H, L) or None
    -> (B, H, Tq, Dv) in v's dtype.
    Raises: TypeError/ValueError for non-floating inputs, shapes that disagree, Hkv not
    dividing H, Tq > L, scale <= 0 or block_size < 1.
    """
    G, scale = check_attention(q, k, v, scale, block_size)
    B, H, Tq, D = q.shape
    Hkv, L = k.shape[1], k.shape[2]
    check_per_token(w, (B, Hkv, L, D), "w", "(B, Hkv, L, D)")
    check_per_token(beta, (B, Hkv, L), "beta", "(B, Hkv, L)")
    if log_f is not None:
        check_per_token(log_f, (B, H, L), "log_f", "(B, H, L)")
    check_segments(segment_ids, B, L)
    dtype = work_dtype(q, k, v, w, beta, log_f)
    lay = chunks(Tq, L, block_size)
    qc = query_chunks(astype(q, dtype), lay, G)  # (B, Hkv, G, Nq, C, D)
    kc = key_chunks(astype(k, dtype), lay)  # (B, Hkv, 1, N, C, D)
    wc = key_chunks(astype(w, dtype), lay)  # (B, Hkv, 1, N, C, D)
    bc = key_chunks(astype(beta, dtype), lay, vector=False)[..., None]  # (B, Hkv, 1, N, C, 1)
    seg = None if segment_ids is None else segment_chunks(segment_ids, lay)
    gate = None if log_f is None else forget_gate(log_f, lay, G, dtype)
    scores = _path_scores(qc, kc, wc, bc, lay)
    out = softmax_passes(scores, v, lay, G, scale=scale, dtype=dtype, gate=gate, seg=seg)
    return astype(unchunk(out, lay), v.dtype)


def _path_scores(qc: Any, kc: Any, wc: Any, bc: Any, lay: Chunks) -> Iterator[Any]:
    """q_iᵀ H_i ··· H_(j+1) k_j of each pass (``_chunked.Chunks``): (B, Hkv, G, n, C, C)."""
    xp = namespace(qc, kc, wc, bc)
    C, n0 = lay.C, lay.n0
    idx = xp.arange(C, device=device_of(qc))[:, None]  # (C, 1): slot within the chunk

    def reflect(x: Any, t: int, slots: Any, chunk: slice) -> Any:
        """H_t (of local index t in each chunk) applied to the rows of x in ``slots``."""
        w_t, b_t = wc[:, :, :, chunk, t : t + 1, :], bc[:, :, :, chunk, t : t + 1, :]
        along = x @ xp.matrix_transpose(w_t)  # (..., C, 1): w_t·x
        return x - (b_t * xp.astype(slots, x.dtype) * along) * w_t

    # Keys: after step t, key b < t of each chunk is H_t ··· H_(b+1) k_b; row t of the
    # diagonal pass is q_t against them; after the last step, k̃ (carried to the chunk end).
    keys, rows = kc, []
    for t in range(C):
        if t:
            keys = reflect(keys, t, idx < t, slice(None))
        rows.append(qc[:, :, :, :, t : t + 1, :] @ xp.matrix_transpose(keys[:, :, :, n0:, ...]))
    yield xp.concat(rows, axis=-2)  # d = 0: (B, Hkv, G, Nq, C, C)
    if lay.N == 1:
        return
    # Queries back to their chunk start: q̂_a = H_s ··· H_a q_a (apply H_a first).
    queries = qc
    for t in range(C - 1, -1, -1):
        queries = reflect(queries, t, idx >= t, slice(n0, None))
    # M_c = H_e ··· H_s of each chunk but the last, right-multiplied from the identity.
    eye = xp.eye(qc.shape[-1], dtype=qc.dtype, device=device_of(qc))
    m = xp.broadcast_to(eye, (*kc.shape[:3], lay.N - 1, *eye.shape))  # (B, Hkv, 1, N-1, D, D)
    for t in range(C - 1, -1, -1):
        col = xp.matrix_transpose(wc[:, :, :, :-1, t : t + 1, :])  # (B, Hkv, 1, N-1, D, 1)
        m = m - bc[:, :, :, :-1, t : t + 1, :] * ((m @ col) @ xp.matrix_transpose(col))
    start = 0
    for d in range(1, lay.N):
        queries, start = queries[:, :, :, lay.start(d) - start :, ...], lay.start(d)
        lo, hi = lay.key_range(d)
        yield queries @ xp.matrix_transpose(keys[:, :, :, lo:hi, ...])
        queries = queries @ m[:, :, :, lo:hi, ...]  # one chunk further back
