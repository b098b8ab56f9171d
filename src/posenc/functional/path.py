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
    query_slots,
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
    qc = query_chunks(astype(q, dtype), lay, G)  # (B, Hkv, G, Nq, R, D)
    kc = key_chunks(astype(k, dtype), lay)  # (B, Hkv, 1, N, C, D)
    wc = key_chunks(astype(w, dtype), lay)  # (B, Hkv, 1, N, C, D)
    bc = key_chunks(astype(beta, dtype), lay, vector=False)[..., None]  # (B, Hkv, 1, N, C, 1)
    seg = None if segment_ids is None else segment_chunks(segment_ids, lay)
    gate = None if log_f is None else forget_gate(log_f, lay, G, dtype)
    scores = _path_scores(qc, kc, wc, bc, lay)
    out = softmax_passes(scores, v, lay, G, scale=scale, dtype=dtype, gate=gate, seg=seg)
    return astype(unchunk(out, lay), v.dtype)


def _path_scores(qc: Any, kc: Any, wc: Any, bc: Any, lay: Chunks) -> Iterator[Any]:
    """q_iᵀ H_i ··· H_(j+1) k_j of each pass (``_chunked.Chunks``): (B, Hkv, G, n, R, C).

    Each chunk's transforms in the UT form (Yang et al. 2025, arXiv:2505.16381, sec. 3.2):
    with W the chunk's w_t as rows and A_ab = β_a w_a·w_b for a > b (else 0),

        H_i ··· H_(j+1) = I - Wᵀ_(j,i] (T)_(j,i] W_(j,i],  T = (I + A)⁻¹ diag(β),

    (T)_(j,i] the rows and columns j+1 .. i of T: the inverse of a unit lower triangular
    matrix restricted to a run of its indices is the inverse of the restriction. So within a
    chunk s_ij = q_i·k_j - Σ_(b>j, a<=i) (q_i·w_a) T_ab (w_b·k_j), each key carried to its
    chunk's end is k̃_j = k_j - Σ_(b>j) (T W)_bᵀ (w_b·k_j), each query back to its chunk's
    start q̂_i = q_i - Σ_(a<=i) (q_i·w_a) (T W)_a, and a chunk's whole product is
    M = H_e ··· H_s = I - Wᵀ T W (D x D); across chunks s_ij = q̂_i M_(n-1) ··· M_(m+1) k̃_j,
    the query carried one chunk further per pass.
    """
    xp = namespace(qc, kc, wc, bc)
    C, n0 = lay.C, lay.n0
    idx = xp.arange(C, device=device_of(qc))
    lower = query_slots(lay, qc)[:, None] >= idx[None, :]  # (R, C): a <= i (query i, H_a)
    strict = idx[:, None] > idx[None, :]  # (C, C): b > j (transform b, key j)
    t = unit_lower_inverse(wc, bc) * xp.matrix_transpose(bc)  # T: (B, Hkv, 1, N, C, C)
    tk = t @ xp.where(strict, wc @ xp.matrix_transpose(kc), 0.0)  # Σ_b T_ab (w_b·k_j), b > j
    keys = kc - xp.matrix_transpose(tk) @ wc  # k̃: (B, Hkv, 1, N, C, D)
    w_q = wc[:, :, :, n0:, ...]  # the query chunks' transforms
    qw = xp.where(lower, qc @ xp.matrix_transpose(w_q), 0.0)  # q_i·w_a, a <= i: (..., Nq, R, C)
    local = qc @ xp.matrix_transpose(kc[:, :, :, n0:, ...]) - qw @ tk[:, :, :, n0:, ...]
    yield local  # d = 0: (B, Hkv, G, Nq, R, C); the causal mask is softmax_passes'
    if lay.N == 1:
        return
    tw = t @ wc  # T W: (B, Hkv, 1, N, C, D)
    queries = qc - qw @ tw[:, :, :, n0:, ...]  # q̂: (B, Hkv, G, Nq, R, D)
    eye = xp.eye(qc.shape[-1], dtype=qc.dtype, device=device_of(qc))
    # M = I - Wᵀ T W of each chunk but the last: (B, Hkv, 1, N - 1, D, D)
    m = eye - xp.matrix_transpose(wc[:, :, :, :-1, ...]) @ tw[:, :, :, :-1, ...]
    start = 0
    for d in range(1, lay.N):
        queries, start = queries[:, :, :, lay.start(d) - start :, ...], lay.start(d)
        lo, hi = lay.key_range(d)
        yield queries @ xp.matrix_transpose(keys[:, :, :, lo:hi, ...])
        queries = queries @ m[:, :, :, lo:hi, ...]  # one chunk further back


def unit_lower_inverse(wc: Any, bc: Any) -> Any:
    """(I + A)⁻¹ of each chunk, A_ab = β_a w_a·w_b for a > b and 0 otherwise, by doubling.

    The chunk is padded to P = 2^p rows with w = 0, β = 0 (identity rows). Diagonal blocks
    of size s are inverted first (s = 1: the identity); two neighbours [[X, 0], [Y, Z]] of
    size s give the block of 2s, [[X⁻¹, 0], [-Z⁻¹ Y X⁻¹, Z⁻¹]], Y = diag(β) W_lo W_hiᵀ
    read straight from W. log2 P matrix products per level, O(P²·(P + D)) per chunk, only
    array-API operations (no triangular solve, which NumPy has not).

    Shapes: wc (..., C, D), bc (..., C, 1) -> (..., C, C), lower triangular.
    """
    xp = namespace(wc, bc)
    C, D = wc.shape[-2], wc.shape[-1]
    batch = tuple(wc.shape[:-2])
    P = 1 << max(C - 1, 0).bit_length()
    dev = device_of(wc)
    if P > C:
        wc = xp.concat([wc, xp.zeros((*batch, P - C, D), dtype=wc.dtype, device=dev)], axis=-2)
        bc = xp.concat([bc, xp.zeros((*batch, P - C, 1), dtype=bc.dtype, device=dev)], axis=-2)
    inv = xp.ones((*batch, P, 1, 1), dtype=wc.dtype, device=dev)  # P blocks of 1 x 1
    s = 1
    while s < P:
        m = P // (2 * s)
        pairs = xp.reshape(inv, (*batch, m, 2, s, s))
        x_inv, z_inv = pairs[..., 0, :, :], pairs[..., 1, :, :]  # (..., m, s, s)
        w2 = xp.reshape(wc, (*batch, m, 2, s, D))
        b_hi = xp.reshape(bc, (*batch, m, 2, s, 1))[..., 1, :, :]  # (..., m, s, 1)
        y = b_hi * (w2[..., 1, :, :] @ xp.matrix_transpose(w2[..., 0, :, :]))  # (..., m, s, s)
        below = -(z_inv @ (y @ x_inv))
        top = xp.concat([x_inv, xp.zeros_like(x_inv)], axis=-1)  # (..., m, s, 2s)
        inv = xp.concat([top, xp.concat([below, z_inv], axis=-1)], axis=-2)  # (..., m, 2s, 2s)
        s *= 2
    inv = xp.reshape(inv, (*batch, P, P))
    return inv[..., :C, :C]
