"""The attention mask of keys each query may see, from validity, segments and cache order, and
the default validity and segments it starts from (one construction for the torch and Flax
attention layers; any array-API namespace)."""

from __future__ import annotations

from typing import Any

from ._xp import device_of, namespace, widest_int


def allowed_keys(
    k_valid: Any,
    q_segment: Any,
    k_segment: Any,
    *,
    causal: bool,
    offset: Any = 0,
    local: Any = None,
) -> Any:
    """Boolean (B, 1, T, L): query i (cache index offset + i) may see key j when j is valid, in
    its segment, inside ``local`` (a sliding window or chunk, ``local_keys``; None: every key)
    and, if ``causal``, not after it by cache index (not by position id). A query that sees no
    key (a padding query) sees every key instead, so its softmax is not NaN.

    Shapes: k_valid, k_segment (B, L); q_segment (B, T); local (B, 1, T, L) bool or None;
    ``offset`` an int or a 0-d array (traced under ``jax.jit``).
    """
    xp = namespace(k_valid, q_segment, k_segment)
    T, L = q_segment.shape[1], k_segment.shape[1]
    allowed = k_valid[:, None, None, :] & (
        q_segment[:, None, :, None] == k_segment[:, None, None, :]
    )  # (B, 1, T, L)
    if local is not None:
        allowed = allowed & local
    if causal:
        device = device_of(k_valid)
        q_index = offset + xp.arange(T, device=device)
        allowed = allowed & (xp.arange(L, device=device)[None, :] <= q_index[:, None])
    return allowed | ~xp.any(allowed, axis=-1, keepdims=True)


def local_keys(q_pos: Any, k_pos: Any, *, window: int | None, chunk: int | None) -> Any:
    """Boolean (B, 1, T, L): the keys a local layer lets query i see, by position. A sliding
    window of W keys (Beltagy et al. 2020, Longformer; Mistral, Gemma 2/3): |p_i - p_j| < W,
    so a causal query sees itself and the W - 1 keys before it (transformers'
    ``sliding_window_overlay``, kv_idx > q_idx - W). A chunk of C (Llama 4's chunked
    attention): p_i // C == p_j // C (transformers' ``chunked_overlay``, which reads cache
    indices less each row's left padding: the positions ``positions_from_padding`` gives).
    Both read positions, so left padding, packed sequences (positions restarting in each
    segment) and a cache that keeps only its latest entries see the same keys.

    Shapes: q_pos (B, T), k_pos (B, L) integer -> (B, 1, T, L); either limit None: no limit.
    Raises: ValueError for positions of A > 1 axes (a window is along one sequence axis).
    """
    if q_pos.ndim != 2 or k_pos.ndim != 2:
        raise ValueError(
            "a sliding window or chunk needs positions of one axis, (B, T) and (B, L), got "
            f"{tuple(q_pos.shape)} and {tuple(k_pos.shape)}"
        )
    xp = namespace(q_pos, k_pos)
    qp, kp = q_pos[:, None, :, None], k_pos[:, None, None, :]  # (B, 1, T, 1), (B, 1, 1, L)
    local = xp.ones(
        (qp.shape[0], 1, qp.shape[2], kp.shape[3]), dtype=xp.bool, device=device_of(q_pos)
    )
    if window is not None:
        local = local & (xp.abs(qp - kp) < window)
    if chunk is not None:
        local = local & (qp // chunk == kp // chunk)
    return local


def mask_inputs(
    B: int,
    T: int,
    padding_mask: Any,
    segment_ids: Any,
    last_segment: Any,
    *,
    xp: Any,
    device: Any = None,
) -> tuple[Any, Any]:
    """Validity (B, T) bool and segment ids (B, T) (the widest int) of T new tokens: as given
    (checked by the caller), or the defaults: all valid; one segment, 0, or after cached entries
    each row's latest ``last_segment`` (B, 1) (a decode step continues the document it follows,
    also after a packed prefill; None: nothing cached). Made in namespace ``xp`` on ``device``.
    """
    valid = xp.ones((B, T), dtype=xp.bool, device=device) if padding_mask is None else padding_mask
    if segment_ids is not None:
        return valid, xp.astype(segment_ids, widest_int(xp))
    if last_segment is not None and last_segment.shape[0] == B:  # (another B: append says so)
        return valid, xp.broadcast_to(last_segment, (B, T))
    return valid, xp.zeros((B, T), dtype=widest_int(xp), device=device)
