"""The per-forward position state: one forward's positions and the work its layers share.

A model builds it once per forward with ``pe.prepare(q_pos, k_pos, dtype=...)`` and hands it
to every attention layer as ``ctx`` (as transformers hands down ``position_embeddings``). The
base ``PositionState`` holds the positions; an encoding that shares work between layers has its
own frozen subclass in its own module whose fields ``prepare`` computes (RoPE's cos/sin tables,
xPos's scaled tables, Transformer-XL's W_R R rows, randomized's draw). Work not every forward
needs (the keys' tables during cached decoding) is a ``Lazy`` field, made on first use; tables
are ``InDtype`` fields, made on first use in the work dtype of the layer that asks. Nothing
outlives the forward, so nothing needs invalidating, and nothing is looked up by identity.

Roles: ``q_pos`` are this forward's token positions (the queries, and the keys a layer appends
to its cache); ``k_pos`` every key's (cached keys first; ``q_pos`` itself without a cache).
``new_keys()`` is the state of the fresh keys alone (k_pos = q_pos): attention rotates its new
projections with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import torch
from torch import Tensor
from typing_extensions import Self

T = TypeVar("T")


class Lazy(Generic[T]):
    """One value, made by ``make()`` on the first ``get()`` and returned after.

    Work that a forward does not always need (the keys' tables during cached decoding). A plain
    attribute, so ``torch.compile`` traces it (``functools.cached_property`` takes a lock).
    """

    __slots__ = ("_made", "_make", "_value")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._made = False
        self._value: T | None = None

    def get(self) -> T:
        """The value, made on the first call."""
        if not self._made:
            self._value, self._made = self._make(), True
        return self._value  # type: ignore[return-value]  # (made: a T)


class InDtype(Generic[T]):
    """One value made by ``make(dtype)`` on the first ``get(dtype)``, in that dtype, and kept;
    ``get`` of another dtype makes one for that call (not kept).

    Tables of one forward: made in the work dtype of the first layer that needs them (float32,
    or float64 for float64 activations), which every later layer shares.
    """

    __slots__ = ("_dtype", "_make", "_value")

    def __init__(self, make: Callable[[torch.dtype], T]) -> None:
        self._make = make
        self._dtype: torch.dtype | None = None
        self._value: T | None = None

    def get(self, dtype: torch.dtype) -> T:
        """The value in ``dtype``: the kept one, or made (and kept if it is the first)."""
        if self._dtype is None:
            self._value, self._dtype = self._make(dtype), dtype
        if dtype != self._dtype:
            return self._make(dtype)
        return self._value  # type: ignore[return-value]  # (made: a T)


@dataclass(frozen=True, eq=False)
class PositionState:
    """Positions of one forward: q_pos (T,) | (B, T) and k_pos (L,) | (B, L) int64 (with
    ``axes`` A > 1: (T, A) | (B, T, A) and (L, A) | (B, L, A)), validated by whoever built the
    state (``PositionalEncoding.prepare``).

    ``offset_bounds``: (lo, hi), host-known bounds of every offset q_pos - k_pos, or None. Given
    by a caller that made the positions itself (the models' default positions), so that work
    sized by the offsets' range (Transformer-XL's rows) reads no position value on the host.
    ``keys_are_queries``: k_pos is q_pos (no cache; the fresh keys): the keys' work is the
    queries'.
    """

    q_pos: Tensor
    k_pos: Tensor
    axes: int = 1
    offset_bounds: tuple[int, int] | None = None
    keys_are_queries: bool = False

    def new_keys(self) -> Self:
        """The state of this forward's fresh keys: k_pos = q_pos, the keys' work the queries'."""
        if self.keys_are_queries:
            return self
        return replace(self, k_pos=self.q_pos, offset_bounds=None, keys_are_queries=True)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(q_pos={tuple(self.q_pos.shape)}, "
            f"k_pos={tuple(self.k_pos.shape)}, axes={self.axes})"
        )


def position_state(
    q_pos: Tensor,
    k_pos: Tensor | None = None,
    *,
    axes: int = 1,
    offset_bounds: tuple[int, int] | None = None,
) -> PositionState:
    """The base state of q_pos and k_pos (default q_pos: then ``keys_are_queries``)."""
    same = k_pos is None or k_pos is q_pos
    return PositionState(
        q_pos, q_pos if k_pos is None else k_pos, axes, offset_bounds, keys_are_queries=same
    )
