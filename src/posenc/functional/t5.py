"""T5 relative position buckets (Raffel et al. 2020, arXiv:1910.10683, sec. 2.1)."""

from __future__ import annotations

import math
from typing import Any

from .._validate import check_bool, check_positive_int
from ._xp import namespace, widest_int


def check_t5_buckets(*, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """Validate a bucket configuration; return ``max_exact``, the number of exact buckets.

    Raises: TypeError/ValueError for num_buckets < 2 (< 4 bidirectional: each direction needs
    an exact bucket), max_distance < 1, or max_distance <= max_exact (the log range is empty).
    """
    check_bool(bidirectional, "bidirectional")
    check_positive_int(num_buckets, "num_buckets", minimum=4 if bidirectional else 2)
    check_positive_int(max_distance, "max_distance")
    max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must be > {max_exact} (the exact buckets of num_buckets="
            f"{num_buckets}, bidirectional={bidirectional}), got {max_distance}"
        )
    return max_exact


def t5_relative_bucket(
    relative_position: Any, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> Any:
    """Bucket of each relative position r = key - query, as in T5 (mesh-tensorflow code).

    n = |r| (bidirectional; keys after the query, r > 0, use the upper half of the buckets) or
    n = max(-r, 0) (causal). With N buckets per direction and E = N/2 exact ones:
    bucket = n for n < E, else min(E + floor(log(n/E) / log(max_distance/E) · (N - E)), N - 1).
    The log is taken in float32 like mesh-tensorflow and Hugging Face, so torch buckets equal
    HF's exactly; float64 would move rare cases on a bucket boundary (N=32, max_distance=939,
    n=728: 31 in float32, 30 in float64), and other backends' float32 log may round them too.
    Shapes: relative_position (...,) integer -> (...,) int64 in [0, num_buckets).
    Raises: TypeError for a non-integer input; ValueError as in ``check_t5_buckets``.
    Paper: Raffel et al. 2020, arXiv:1910.10683, sec. 2.1.
    """
    max_exact = check_t5_buckets(
        bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    xp = namespace(relative_position)
    if not xp.isdtype(relative_position.dtype, "integral"):
        raise TypeError(f"relative_position must be integer, got {relative_position.dtype}")
    wide = widest_int(xp)  # int64 (int32 on JAX without x64)
    rel = xp.astype(relative_position, wide)
    # buckets saturate from max_distance on: clamp first, so |rel| exists (abs(int64 min) wraps)
    bound = xp.full_like(rel, max_distance)
    rel = xp.where(rel > bound, bound, xp.where(rel < -bound, -bound, rel))
    zero = xp.zeros_like(rel)
    n_buckets = num_buckets // 2 if bidirectional else num_buckets
    if bidirectional:
        upper = xp.where(rel > 0, xp.full_like(rel, n_buckets), zero)
        dist = xp.abs(rel)
    else:
        upper = zero
        dist = xp.where(rel < 0, -rel, zero)
    far = xp.where(dist > max_exact, dist, xp.full_like(dist, max_exact))  # log(0) never taken
    scaled = (
        xp.log(xp.astype(far, xp.float32) / max_exact)
        / math.log(max_distance / max_exact)
        * (n_buckets - max_exact)
    )
    large = xp.astype(scaled, wide) + max_exact  # truncation = floor: scaled >= 0
    large = xp.where(large < n_buckets - 1, large, xp.full_like(large, n_buckets - 1))
    return upper + xp.where(dist < max_exact, dist, large)
