"""What one attention call reads about its keys: ``CachedKeys`` (every key seen so far, cached
ones first, with its position, validity and segment) and ``Memory`` (an encoder output as one
cross-attention layer reads it).

Shapes: k (B, Hkv, L, D); v (B, Hkv, L, Dv); pos (B, L) or (B, L, A); valid, segment (B, L).
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor


class CachedKeys(NamedTuple):
    """Everything attention needs about the L keys seen so far."""

    k: Tensor  # (B, Hkv, L, D), as the encoding left them (rotated for rotary encodings)
    v: Tensor  # (B, Hkv, L, Dv)
    pos: Tensor  # (B, L) integer, the position each key was encoded at ((B, L, A): A axes)
    valid: Tensor  # (B, L) bool, False for padding
    segment: Tensor  # (B, L) int64, packed-sequence id


#: The time axis of each ``CachedKeys`` field.
TIME_AXIS: tuple[int, ...] = (2, 2, 1, 1, 1)


class Memory(NamedTuple):
    """An encoder output as one cross-attention layer reads it.

    Its keys and values (B, Hkv, S, D), computed once (``CrossAttention.project_memory``), with
    the source positions and validity, and the source padding mask (B, S) or None (no padding:
    nothing to mask)."""

    keys: CachedKeys
    padding_mask: Tensor | None
