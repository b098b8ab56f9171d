"""Stick-breaking attention (Tan et al. 2024, arXiv:2410.17980): each key breaks off a share
of what the nearer keys left, in place of softmax."""

from __future__ import annotations

from typing import Any

from .._validate import check_bool
from ._chunked import (
    allowed_pairs,
    check_attention,
    check_segments,
    chunks,
    dot_scores,
    key_chunks,
    log_sigmoid,
    query_chunks,
    segment_chunks,
    split_first,
    unchunk,
    work_dtype,
)
from ._xp import astype, cumsum_last, device_of, namespace


def stick_breaking_attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    scale: float | None = None,
    attend_current: bool = False,
    segment_ids: Any = None,
    block_size: int | None = None,
) -> tuple[Any, Any]:
    """Causal stick-breaking attention: o_i = Σ_(j<i) A_ij v_j with

        β_ij = σ(scale · q_i·k_j),  A_ij = β_ij Π_(j<l<i) (1 - β_il),

    the nearest key breaking the stick first (Tan et al. 2024, arXiv:2410.17980, eq. 2-3);
    ``attend_current`` lets query i see itself (j <= i, and l runs over j < l <= i). The
    weights of a row sum to 1 - rem_i, rem_i = Π_j (1 - β_ij), returned with o (the paper's
    layers add rem_i·v_i, or leave it out; that is the caller's choice).

    Computed in log space, log A_ij = log β_ij + Σ_(j<l<i) log(1 - β_il) <= 0, one key chunk
    at a time from the query's own chunk backwards, carrying the sum over the nearer chunks:
    memory O(B·H·block·L) for ``block_size`` (default 128), never (L, L). Queries are the
    last Tq of the L keys; ``segment_ids`` (B, L) masks keys of other segments (a masked key
    leaves the stick unchanged), so packed sequences attend as if run apart. float32, or
    float64 for float64 inputs. Any array-API namespace.

    Shapes: q (B, H, Tq, D); k (B, Hkv, L, D), v (B, Hkv, L, Dv), Hkv dividing H
    -> o (B, H, Tq, Dv) and rem (B, H, Tq), both in v's dtype.
    Raises: TypeError/ValueError for non-floating inputs, shapes that disagree, Hkv not
    dividing H, Tq > L, scale <= 0, block_size < 1 or a non-bool attend_current.
    """
    G, scale = check_attention(q, k, v, scale, block_size)
    check_bool(attend_current, "attend_current")
    B, Tq, L = q.shape[0], q.shape[2], k.shape[2]
    check_segments(segment_ids, B, L)
    xp = namespace(q, k, v)
    dtype = work_dtype(q, k, v)
    lay = chunks(Tq, L, block_size)
    qc = query_chunks(astype(q, dtype), lay, G)  # (B, Hkv, G, Nq, R, D)
    kc = key_chunks(astype(k, dtype), lay)  # (B, Hkv, 1, N, C, D)
    vc = key_chunks(astype(v, dtype), lay)  # (B, Hkv, 1, N, C, Dv)
    seg = None if segment_ids is None else segment_chunks(segment_ids, lay)
    carry = xp.zeros(qc.shape[:-1], dtype=dtype, device=device_of(q))  # Σ log(1 - β) of nearer keys
    acc = xp.zeros((*qc.shape[:-1], v.shape[-1]), dtype=dtype, device=device_of(q))
    done: list[tuple[Any, Any]] = []
    for d, s in enumerate(dot_scores(qc, kc, lay)):
        while len(done) < lay.start(d):  # query chunk len(done) has seen all its keys
            (acc_0, carry_0), (acc, carry) = split_first((acc, carry))
            done.append((acc_0, carry_0))
        z = s * scale  # (B, Hkv, G, n, R, C)
        allowed = allowed_pairs(d, lay, seg, strict=not attend_current, like=z)
        log_stay = log_sigmoid(-z)  # log(1 - β)
        if allowed is not None:
            log_stay = xp.where(allowed, log_stay, 0.0)  # a masked key leaves the stick
        later = xp.flip(cumsum_last(xp.flip(log_stay, axis=-1)), axis=-1) - log_stay
        log_a = log_sigmoid(z) + later + carry[..., None]  # Σ over j < l in this chunk
        if allowed is not None:
            log_a = xp.where(allowed, log_a, -float("inf"))
        lo, hi = lay.key_range(d)
        acc = acc + xp.exp(log_a) @ vc[:, :, :, lo:hi, :, :]
        carry = carry + xp.sum(log_stay, axis=-1)
    done.append((acc, carry))
    out = xp.concat([a for a, _ in done], axis=3)  # (B, Hkv, G, Nq, C, Dv)
    rem = xp.exp(xp.concat([c for _, c in done], axis=3))[..., None]
    return astype(unchunk(out, lay), v.dtype), astype(unchunk(rem, lay)[..., 0], v.dtype)
