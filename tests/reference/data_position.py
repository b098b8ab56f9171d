"""Attention whose position comes from the tokens, written from the papers one (head, query,
key) entry at a time in float64 NumPy; every query is causal, keys j <= i (or j < i).

FoX: Lin et al. 2025 (arXiv:2503.02130), eq. 3-4: s_ij = q_i·k_j/√d + Σ_(l=j+1..i) log f_l.
Stick-breaking: Tan et al. 2024 (arXiv:2410.17980), eq. 2-3: A_ij = β_ij Π_(j<l<i) (1 - β_il).
PaTH: Yang et al. 2025 (arXiv:2505.16381), sec. 3: s_ij = q_iᵀ H_i ··· H_(j+1) k_j,
    H_t = I - β_t w_t w_tᵀ, built here as explicit D x D matrices.
Sinks: gpt-oss (OpenAI 2025, arXiv:2508.10925): e^(sink_h) joins each row's denominator.

Shapes: q (B, H, T, D); k, v (B, Hkv, T, D) with H / Hkv query heads per key head; queries
are the last Tq of the T keys where q has fewer rows; ``segments`` (B, T) or None.
"""

from __future__ import annotations

import math

import numpy as np


def _visible(segments: np.ndarray | None, b: int, i: int, j: int) -> bool:
    return segments is None or segments[b, i] == segments[b, j]


def _softmax_row(logits: list[float], extra: float | None = None) -> list[float]:
    top = max([*logits, extra] if extra is not None else logits)
    e = [math.exp(x - top) for x in logits]
    total = sum(e) + (math.exp(extra - top) if extra is not None else 0.0)
    return [x / total for x in e]


def _attend(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    logit,
    segments: np.ndarray | None,
    sinks: np.ndarray | None = None,
) -> np.ndarray:
    """softmax over visible keys j <= i of ``logit(b, h, kv_head, i, j)``, times v."""
    B, H, Tq, _ = q.shape
    Hkv, T = k.shape[1], k.shape[2]
    out = np.zeros((B, H, Tq, v.shape[-1]))
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for a in range(Tq):
                i = T - Tq + a
                keys = [j for j in range(i + 1) if _visible(segments, b, i, j)]
                row = _softmax_row(
                    [logit(b, h, g, i, j) for j in keys], None if sinks is None else sinks[h]
                )
                out[b, h, a] = sum(p * v[b, g, j] for p, j in zip(row, keys, strict=True))
    return out


def forgetting(q, k, v, log_f, *, scale=None, segments=None) -> np.ndarray:
    """FoX: q·k·scale + Σ_(l=j+1..i) log f_l, softmax over j <= i. log_f (B, H, T)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    Tq = q.shape[2]
    T = k.shape[2]

    def logit(b, h, g, i, j):
        decay = sum(log_f[b, h, m] for m in range(j + 1, i + 1))
        return float(q[b, h, i - (T - Tq)] @ k[b, g, j]) * scale + decay

    return _attend(q, k, v, logit, segments)


def sinks(q, k, v, sink, *, scale=None, segments=None) -> np.ndarray:
    """Causal softmax attention with e^(sink_h) in every row's denominator. sink (H,)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    shift = k.shape[2] - q.shape[2]

    def logit(b, h, g, i, j):
        return float(q[b, h, i - shift] @ k[b, g, j]) * scale

    return _attend(q, k, v, logit, segments, sinks=sink)


def householder(w: np.ndarray, beta: float) -> np.ndarray:
    """H = I - β w wᵀ (D x D)."""
    return np.eye(w.shape[0]) - beta * np.outer(w, w)


def path(q, k, v, w, beta, log_f=None, *, scale=None, segments=None) -> np.ndarray:
    """PaTH: q_iᵀ (H_i H_(i-1) ··· H_(j+1)) k_j·scale (+ FoX's gate), softmax over j <= i.
    w (B, Hkv, T, D), beta (B, Hkv, T), log_f (B, H, T) or None."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    T, D = k.shape[2], k.shape[3]
    shift = T - q.shape[2]

    def logit(b, h, g, i, j):
        product = np.eye(D)
        for t in range(i, j, -1):  # H_i first (leftmost), H_(j+1) last
            product = product @ householder(w[b, g, t], float(beta[b, g, t]))
        decay = 0.0 if log_f is None else sum(log_f[b, h, m] for m in range(j + 1, i + 1))
        return float(q[b, h, i - shift] @ product @ k[b, g, j]) * scale + decay

    return _attend(q, k, v, logit, segments)


def stick_breaking(
    q, k, v, *, scale=None, attend_current=False, segments=None
) -> tuple[np.ndarray, np.ndarray]:
    """Stick-breaking: β_ij = σ(q_i·k_j·scale); A_ij = β_ij Π_(l visible, j<l<i) (1 - β_il)
    (l <= i with ``attend_current``, which also lets j = i); o_i = Σ_j A_ij v_j and the
    stick left, rem_i = 1 - Σ_j A_ij."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    B, H, Tq, _ = q.shape
    Hkv, T = k.shape[1], k.shape[2]
    out, rem = np.zeros((B, H, Tq, v.shape[-1])), np.zeros((B, H, Tq))
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for a in range(Tq):
                i = T - Tq + a
                last = i if attend_current else i - 1
                keys = [j for j in range(last + 1) if _visible(segments, b, i, j)]
                beta = {
                    j: 1.0 / (1.0 + math.exp(-float(q[b, h, a] @ k[b, g, j]) * scale)) for j in keys
                }
                left = 1.0  # the stick not yet broken off, nearest key first
                for j in reversed(keys):
                    weight = beta[j] * left
                    out[b, h, a] += weight * v[b, g, j]
                    left *= 1.0 - beta[j]
                rem[b, h, a] = left
    return out, rem
