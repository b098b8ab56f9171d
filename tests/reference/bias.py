"""Score biases written from the papers, one (head, query, key) entry at a time.

ALiBi: Press et al. 2022 (arXiv:2108.12409), sec. 3 and its footnote on head counts.
T5: Raffel et al. 2020 (arXiv:1910.10683), sec. 2.1, bucketing as in mesh-tensorflow.
Kerple: Chi et al. 2022 (arXiv:2205.09921), the power and logarithmic kernels.
FIRE: Li et al. 2023 (arXiv:2310.04418), progressive interpolation + MLP.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def alibi_slopes(n_heads: int) -> list[float]:
    """2^(-8/n)·(2^(-8/n))^h for a power of two n; otherwise the closest lower power of two's
    slopes, then every other slope of twice that count."""
    if n_heads & (n_heads - 1) == 0:
        start = 2.0 ** (-8.0 / n_heads)
        return [start * start**h for h in range(n_heads)]
    closest = 2 ** math.floor(math.log2(n_heads))
    return alibi_slopes(closest) + alibi_slopes(2 * closest)[0::2][: n_heads - closest]


def _rows(q_pos: np.ndarray, k_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Broadcast positions (T,) or (B, T) to (B, Tq) and (B, Tk)."""
    q, k = np.atleast_2d(q_pos), np.atleast_2d(k_pos)
    B = max(q.shape[0], k.shape[0])
    return np.broadcast_to(q, (B, q.shape[1])), np.broadcast_to(k, (B, k.shape[1])), B


def pairwise(
    q_pos: np.ndarray, k_pos: np.ndarray, n_heads: int, entry: Callable[[int, int, int], float]
) -> np.ndarray:
    """(B, H, Tq, Tk) array of ``entry(h, i, j)`` for query position i and key position j."""
    q, k, B = _rows(q_pos, k_pos)
    out = np.zeros((B, n_heads, q.shape[1], k.shape[1]))
    for b in range(B):
        for h in range(n_heads):
            for a, i in enumerate(q[b]):
                for c, j in enumerate(k[b]):
                    out[b, h, a, c] = entry(h, int(i), int(j))
    return out


def alibi(
    q_pos: np.ndarray, k_pos: np.ndarray, slopes: list[float], bidirectional: bool
) -> np.ndarray:
    """-m_h·(i - j), or -m_h·|i - j| for the bidirectional (encoder) form."""

    def entry(h: int, i: int, j: int) -> float:
        return -slopes[h] * (abs(i - j) if bidirectional else i - j)

    return pairwise(q_pos, k_pos, len(slopes), entry)


def t5_scaled_log(n: int, num_buckets: int, max_distance: int) -> float:
    """log(n / E) / log(max_distance / E) · (N - E) in float64, E = N / 2 exact buckets."""
    exact = num_buckets // 2
    return math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)


def t5_bucket(relative: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """Bucket of r = key - query: N buckets per direction (N/2 each way if bidirectional, keys
    after the query in the upper half); distances below E = N/2 get their own bucket, larger
    ones E + floor(scaled log) up to max_distance, then the last bucket (mesh-tensorflow)."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if relative > 0:
            bucket = num_buckets
        n = abs(relative)
    else:
        n = max(-relative, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    large = exact + math.floor(t5_scaled_log(n, num_buckets, max_distance))
    return bucket + min(large, num_buckets - 1)


def t5_on_boundary(relative: int, bidirectional: bool, num_buckets: int, max_distance: int) -> bool:
    """True where the scaled log is within 1e-4 of an integer: float32 rounding may go either
    way there (T5 computes it in float32), so tests accept both neighbouring buckets."""
    n_buckets = num_buckets // 2 if bidirectional else num_buckets
    n = abs(relative) if bidirectional else max(-relative, 0)
    if n < n_buckets // 2:
        return False
    scaled = t5_scaled_log(n, n_buckets, max_distance)
    return abs(scaled - round(scaled)) < 1e-4


def t5(
    q_pos: np.ndarray, k_pos: np.ndarray, table: np.ndarray, bidirectional: bool, max_distance: int
) -> np.ndarray:
    """table[bucket(j - i), h], table (num_buckets, H)."""
    num_buckets, H = table.shape

    def entry(h: int, i: int, j: int) -> float:
        return float(table[t5_bucket(j - i, bidirectional, num_buckets, max_distance), h])

    return pairwise(q_pos, k_pos, H, entry)


def kerple(
    q_pos: np.ndarray, k_pos: np.ndarray, r1: list[float], r2: list[float], variant: str
) -> np.ndarray:
    """log: -r1·log(1 + r2·|i - j|); power: -r1·|i - j|^r2."""

    def entry(h: int, i: int, j: int) -> float:
        d = abs(i - j)
        if variant == "log":
            return -r1[h] * math.log(1 + r2[h] * d)
        return -r1[h] * d ** r2[h]

    return pairwise(q_pos, k_pos, len(r1), entry)


def fire(
    q_pos: np.ndarray,
    k_pos: np.ndarray,
    c: float,
    threshold: float,
    eps: float,
    w1: np.ndarray,
    b1: np.ndarray,
    w2: np.ndarray,
    b2: np.ndarray,
    bidirectional: bool = False,
) -> np.ndarray:
    """MLP(ψ(i - j) / (ψ(max(L, i)) + eps)), ψ(x) = log(|c x| + 1), MLP: relu(x w1 + b1) w2 + b2
    with w1 (hidden, 1), w2 (H, hidden) as torch.nn.Linear stores them. ``bidirectional``:
    the normaliser is ψ(max(L, i, j)) + eps (posenc's encoder form; the paper's is causal)."""

    def psi(x: float) -> float:
        return math.log(abs(c * x) + 1)

    def entry(h: int, i: int, j: int) -> float:
        later = max(i, j) if bidirectional else i
        x = psi(i - j) / (psi(max(threshold, later)) + eps)
        hidden = [max(0.0, w1[u, 0] * x + b1[u]) for u in range(len(b1))]
        return float(b2[h] + sum(w2[h, u] * hidden[u] for u in range(len(b1))))

    return pairwise(q_pos, k_pos, w2.shape[0], entry)
