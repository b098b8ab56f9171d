"""PaTH attention (Yang et al. 2025, arXiv:2505.16381): position as the product of
data-dependent Householder transforms between key and query."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ._chunked import (
    Chunks,
    check_attention,
    check_per_token,
    check_segments,
    chunks,
    dot_attention,
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

    Computed blockwise over key chunks of ``block_size`` C (default 128), each chunk's
    transforms in the UT form of the paper's sec. 3.2 (``_path_scores``): within a chunk by
    C x C matrix products and one unit-triangular inverse (keys carried to the chunk's end,
    queries back to its start, the chunk's whole product M_c = H_e ··· H_s as a D x D
    matrix); across chunks s_ij = q̂_i M_(n-1) ··· M_(m+1) k̃_j, the query carried one chunk
    further per pass. Memory O(B·H·(C + D²/C)·L), never (L, L). Queries are the last Tq of
    the L keys; ``segment_ids`` (B, L) as in ``forgetting_attention`` (contiguous segments
    attend as if run apart). float32, or float64 for float64 inputs. Any array-API namespace.

    Shapes: q (B, H, Tq, D); k, w (B, Hkv, L, D); v (B, Hkv, L, Dv); beta (B, Hkv, L), Hkv
    dividing H (the transforms belong to key heads); log_f (B, H, L) or None
    -> (B, H, Tq, Dv) in v's dtype.
    Raises: TypeError/ValueError for non-floating inputs, shapes that disagree, Hkv not
    dividing H, Tq > L, scale <= 0 or block_size < 1.
    """
    G, scale = _check(q, k, v, w, beta, log_f, scale, segment_ids, block_size)
    out, _ = _path(q, k, v, w, beta, log_f, G, scale, segment_ids, block_size, carry=False)
    return out


def path_attention_cached(
    q: Any,
    k: Any,
    v: Any,
    w: Any,
    beta: Any,
    log_f: Any = None,
    *,
    carried: Any = None,
    scale: float | None = None,
    segment_ids: Any = None,
    block_size: int | None = None,
) -> tuple[Any, Any]:
    """PaTH attention over a cache of keys carried to its last token, and the keys carried on.

    As the paper decodes (Yang et al. 2025, arXiv:2505.16381): ``path_attention`` over the
    cache and this call's tokens, and every key carried to this call's last token, for the
    next call.

    The P cached keys arrive as k̄_j = H_(P-1) ··· H_(j+1) k_j (``carried``), so for a query
    i >= P, s_ij = scale · q_iᵀ H_i ··· H_P k̄_j: the cached tokens' own transforms are never
    applied again. One new token t (T = 1) updates the cache in place of a recomputation,
    k̄_j <- H_t k̄_j (one rank-one update, O(P·D)), and attends with the keys so carried: one
    decode step costs O(L·D). Several new tokens (or ``carried`` None, a prefill) run
    ``path_attention`` with the cached tokens' transforms the identity, and carry every key
    to the end through each later chunk's product M. Equal to ``path_attention`` over all
    P + T tokens.

    Shapes: q (B, H, Tq, D), Tq <= P + T; k, w (B, Hkv, T, D), this call's tokens; beta
    (B, Hkv, T); carried (B, Hkv, P, D) or None (P = 0); v (B, Hkv, P + T, Dv); log_f and
    segment_ids over all P + T tokens, (B, H, P + T) and (B, P + T)
    -> o (B, H, Tq, Dv) in v's dtype, keys carried to token P + T - 1 (B, Hkv, P + T, D).
    Raises: as ``path_attention``, and for ``carried`` not (B, Hkv, P, D).
    """
    xp = namespace(q, k, v, w, beta)
    if carried is None:
        G, scale = _check(q, k, v, w, beta, log_f, scale, segment_ids, block_size)
        return _path(q, k, v, w, beta, log_f, G, scale, segment_ids, block_size, carry=True)
    if not hasattr(k, "shape") or k.ndim != 4:
        raise ValueError(f"k must have shape (B, Hkv, T, D), got {getattr(k, 'shape', k)}")
    B, Hkv, T, D = k.shape
    P = carried.shape[2] if getattr(carried, "ndim", 0) == 4 else -1
    check_per_token(carried, (B, Hkv, P, D), "carried", "(B, Hkv, P, D)")
    check_per_token(w, (B, Hkv, T, D), "w", "(B, Hkv, T, D)")
    check_per_token(beta, (B, Hkv, T), "beta", "(B, Hkv, T)")
    if T == 1:  # one token: H_t on the cached keys, then plain softmax over the carried keys
        dt = work_dtype(k, carried, w, beta)  # the update in float32 at least
        old = astype(carried, dt)
        w_t, b_t = astype(w, dt), astype(beta, dt)[..., None]  # (B, Hkv, 1, D), (B, Hkv, 1, 1)
        keys = xp.concat(
            [old - (b_t * (old @ xp.matrix_transpose(w_t))) * w_t, astype(k, dt)], axis=2
        )  # (B, Hkv, L, D): every key carried to the new token
        G, scale = check_attention(q, keys, v, scale, block_size)
        L = keys.shape[2]
        if log_f is not None:
            check_per_token(log_f, (B, q.shape[1], L), "log_f", "(B, H, L)")
        check_segments(segment_ids, B, L)
        dtype = work_dtype(q, keys, v, w, beta, log_f)
        out = dot_attention(
            q,
            keys,
            v,
            G,
            scale,
            dtype=dtype,
            block_size=block_size,
            segment_ids=segment_ids,
            log_f=log_f,
        )
        return out, astype(keys, k.dtype)
    dt = xp.result_type(k.dtype, carried.dtype)
    keys = xp.concat([astype(carried, dt), astype(k, dt)], axis=2)
    w_all = xp.concat([xp.zeros(carried.shape, dtype=w.dtype, device=device_of(w)), w], axis=2)
    b_all = xp.concat(
        [xp.zeros((B, Hkv, P), dtype=beta.dtype, device=device_of(beta)), beta], axis=2
    )
    G, scale = _check(q, keys, v, w_all, b_all, log_f, scale, segment_ids, block_size)
    return _path(q, keys, v, w_all, b_all, log_f, G, scale, segment_ids, block_size, carry=True)


def _check(
    q: Any,
    k: Any,
    v: Any,
    w: Any,
    beta: Any,
    log_f: Any,
    scale: float | None,
    segment_ids: Any,
    block_size: int | None,
) -> tuple[int, float]:
    """``path_attention``'s input checks; the head groups G and the scale."""
    G, scale = check_attention(q, k, v, scale, block_size)
    B, H, _, D = q.shape
    Hkv, L = k.shape[1], k.shape[2]
    check_per_token(w, (B, Hkv, L, D), "w", "(B, Hkv, L, D)")
    check_per_token(beta, (B, Hkv, L), "beta", "(B, Hkv, L)")
    if log_f is not None:
        check_per_token(log_f, (B, H, L), "log_f", "(B, H, L)")
    check_segments(segment_ids, B, L)
    return G, scale


def _path(
    q: Any,
    k: Any,
    v: Any,
    w: Any,
    beta: Any,
    log_f: Any,
    G: int,
    scale: float,
    segment_ids: Any,
    block_size: int | None,
    *,
    carry: bool,
) -> tuple[Any, Any]:
    """PaTH attention of checked inputs (``path_attention``) and, with ``carry``, every key
    carried to the last token, H_(L-1) ··· H_(j+1) k_j (B, Hkv, L, D) (else None)."""
    xp = namespace(q, k, v, w, beta)
    dtype = work_dtype(q, k, v, w, beta, log_f)
    lay = chunks(q.shape[2], k.shape[2], block_size)
    qc = query_chunks(astype(q, dtype), lay, G)  # (B, Hkv, G, Nq, R, D)
    kc = key_chunks(astype(k, dtype), lay)  # (B, Hkv, 1, N, C, D)
    wc = key_chunks(astype(w, dtype), lay)  # (B, Hkv, 1, N, C, D)
    bc = key_chunks(astype(beta, dtype), lay, vector=False)[..., None]  # (B, Hkv, 1, N, C, 1)
    seg = None if segment_ids is None else segment_chunks(segment_ids, lay)
    gate = None if log_f is None else forget_gate(log_f, lay, G, dtype)
    chunk = _chunk_transforms(kc, wc, bc)
    scores = _path_scores(qc, kc, chunk, lay)
    out = softmax_passes(scores, v, lay, G, scale=scale, dtype=dtype, gate=gate, seg=seg)
    out = astype(unchunk(out, lay), v.dtype)
    if not carry:
        return out, None
    keys, m = chunk.keys, chunk.products(slice(None))  # (B, Hkv, 1, N, C, D), (.., N, D, D)
    ends = [keys[:, :, 0, -1, ...]]  # the last chunk's keys, carried to its end already
    suffix = None  # M_(N-1) ··· M_(c+1)
    for c in range(lay.N - 2, -1, -1):
        step = m[:, :, 0, c + 1, ...]
        suffix = step if suffix is None else suffix @ step
        ends.append(keys[:, :, 0, c, ...] @ xp.matrix_transpose(suffix))
    B, Hkv = k.shape[0], k.shape[1]
    flat = xp.reshape(xp.stack(ends[::-1], axis=2), (B, Hkv, lay.N * lay.C, k.shape[-1]))
    return out, astype(flat[:, :, : lay.L, :], k.dtype)


@dataclass(frozen=True)
class _ChunkTransforms:
    """Each chunk's transforms in the UT form (Yang et al. 2025, arXiv:2505.16381, sec. 3.2).

    With W the chunk's w_t as rows and A_ab = β_a w_a·w_b for a > b (else 0),

        H_i ··· H_(j+1) = I - Wᵀ_(j,i] (T)_(j,i] W_(j,i],  T = (I + A)⁻¹ diag(β),

    (T)_(j,i] the rows and columns j+1 .. i of T: the inverse of a unit lower triangular
    matrix restricted to a run of its indices is the inverse of the restriction. ``t`` is T,
    ``tk`` Σ_(b>j) T_ab (w_b·k_j), ``keys`` each key carried to its chunk's end,
    k̃_j = k_j - Σ_a tk_aj w_a, and ``tw`` T W; shapes (B, Hkv, 1, N, C, C or D).
    """

    w: Any
    t: Any
    tk: Any
    keys: Any
    tw: Any

    def products(self, chunks: slice) -> Any:
        """M = H_e ··· H_s = I - Wᵀ T W of the chunks in ``chunks``: (B, Hkv, 1, n, D, D)."""
        xp = namespace(self.w)
        eye = xp.eye(self.w.shape[-1], dtype=self.w.dtype, device=device_of(self.w))
        w, tw = self.w[:, :, :, chunks, ...], self.tw[:, :, :, chunks, ...]
        return eye - xp.matrix_transpose(w) @ tw


def _chunk_transforms(kc: Any, wc: Any, bc: Any) -> _ChunkTransforms:
    """The UT form of every chunk (``_ChunkTransforms``) from kc, wc (B, Hkv, 1, N, C, D) and
    bc (B, Hkv, 1, N, C, 1)."""
    xp = namespace(kc, wc, bc)
    idx = xp.arange(kc.shape[-2], device=device_of(kc))
    strict = idx[:, None] > idx[None, :]  # (C, C): b > j (transform b, key j)
    t = unit_lower_inverse(wc, bc) * xp.matrix_transpose(bc)  # T: (B, Hkv, 1, N, C, C)
    tk = t @ xp.where(strict, wc @ xp.matrix_transpose(kc), 0.0)  # Σ_b T_ab (w_b·k_j), b > j
    keys = kc - xp.matrix_transpose(tk) @ wc  # k̃: (B, Hkv, 1, N, C, D)
    return _ChunkTransforms(w=wc, t=t, tk=tk, keys=keys, tw=t @ wc)


def _path_scores(qc: Any, kc: Any, chunk: _ChunkTransforms, lay: Chunks) -> Iterator[Any]:
    """q_iᵀ H_i ··· H_(j+1) k_j of each pass (``_chunked.Chunks``): (B, Hkv, G, n, R, C).

    Within a chunk (``_ChunkTransforms``) s_ij = q_i·k_j - Σ_(b>j, a<=i) (q_i·w_a) T_ab
    (w_b·k_j); each query carried back to its chunk's start is
    q̂_i = q_i - Σ_(a<=i) (q_i·w_a) (T W)_a; across chunks s_ij = q̂_i M_(n-1) ··· M_(m+1) k̃_j,
    the query carried one chunk further per pass.
    """
    xp = namespace(qc, chunk.keys)
    n0 = lay.n0
    idx = xp.arange(lay.C, device=device_of(qc))
    lower = query_slots(lay, qc)[:, None] >= idx[None, :]  # (R, C): a <= i (query i, H_a)
    w_q = chunk.w[:, :, :, n0:, ...]  # the query chunks' transforms
    qw = xp.where(lower, qc @ xp.matrix_transpose(w_q), 0.0)  # q_i·w_a, a <= i: (..., Nq, R, C)
    local = qc @ xp.matrix_transpose(kc[:, :, :, n0:, ...]) - qw @ chunk.tk[:, :, :, n0:, ...]
    yield local  # d = 0: (B, Hkv, G, Nq, R, C); the causal mask is softmax_passes'
    if lay.N == 1:
        return
    queries = qc - qw @ chunk.tw[:, :, :, n0:, ...]  # q̂: (B, Hkv, G, Nq, R, D)
    m = chunk.products(slice(0, lay.N - 1))  # (B, Hkv, 1, N - 1, D, D)
    start = 0
    for d in range(1, lay.N):
        queries, start = queries[:, :, :, lay.start(d) - start :, ...], lay.start(d)
        lo, hi = lay.key_range(d)
        yield queries @ xp.matrix_transpose(chunk.keys[:, :, :, lo:hi, ...])
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
