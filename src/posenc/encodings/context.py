"""The position context: one forward's positions and the work its layers share.

A model builds it once per forward with ``pe.prepare(q_pos, k_pos)`` and hands it to every
attention layer (as transformers hands down ``position_embeddings``): cos/sin tables, randomized
draws and Transformer-XL's W_R R rows are made at the first layer that needs them and reused by
the others, by every query block and by activation checkpointing's recompute. Nothing outlives
the forward, so nothing needs invalidating. Framework-neutral: ``posenc.flax`` subclasses it.

Roles: ``q_pos`` are this forward's token positions (the queries, and the keys a layer appends
to its cache); ``k_pos`` every key's (cached keys first; ``q_pos`` itself without a cache).
``role`` tells a hook which one it was given; positions of any other origin get no shared work.
Keys name the encoding module, so layers with different encodings can share one context.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class PositionContext:
    """Positions of one forward, q_pos (T,) | (B, T) and k_pos (L,) | (B, L) int64 (with
    ``axes`` A > 1: (T, A) | (B, T, A) and (L, A) | (B, L, A)), validated by whoever built the
    context (``PositionalEncoding.prepare``), and the work derived from them that every layer
    of the forward shares (``shared``).

    ``offset_bounds``: (lo, hi), host-known bounds of every offset q_pos - k_pos, or None. Set
    by a caller that made the positions itself (the models' default positions), so that work
    sized by the offsets' range (Transformer-XL's rows) reads no position value on the host."""

    offset_bounds: tuple[int, int] | None = None

    def __init__(self, q_pos: Any, k_pos: Any = None, *, axes: int = 1) -> None:
        self.q_pos = q_pos
        self.k_pos = q_pos if k_pos is None else k_pos
        self.axes = axes
        self._shared: dict[Hashable, Any] = {}

    def role(self, pos: Any) -> str | None:
        """ "q" or "k" when ``pos`` is this context's q_pos or k_pos tensor ("q" when they are
        one tensor), else None: positions the context knows nothing about."""
        if pos is self.q_pos:
            return "q"
        return "k" if pos is self.k_pos else None

    def shared(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()`` the first time ``key`` is asked for in this context, its result after."""
        if key not in self._shared:
            self._shared[key] = make()
        value: T = self._shared[key]
        return value

    def __repr__(self) -> str:
        return (
            f"PositionContext(q_pos={tuple(self.q_pos.shape)}, k_pos={tuple(self.k_pos.shape)}, "
            f"shared={list(self._shared)})"
        )


#: The ``ctx`` a hook receives: the forward's context, or None (called on its own).
Ctx = PositionContext | None


def shared_for(ctx: Ctx, pos: Any, key: Hashable, make: Callable[[], T]) -> T:
    """``make()`` shared through ``ctx`` under (role of ``pos``, ``key``), or computed afresh
    when there is no context or ``pos`` is not one of its position tensors."""
    role = None if ctx is None else ctx.role(pos)
    if ctx is None or role is None:
        return make()
    return ctx.shared((role, key), make)
