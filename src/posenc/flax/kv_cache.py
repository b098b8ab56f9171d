"""Flax KV cache that keeps each key's position (and padding/segment ids) beside it.

Two layouts: growing (default; keys are concatenated, so each new length compiles once under
``jax.jit``) and preallocated (``capacity=N``: fixed shapes, one compiled decoding step; the
slots not yet written are invalid keys, masked like padding). Both are ``nnx.Cache`` variables,
so ``nnx.jit`` carries their updates out of a compiled step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from .._validate import check_positive_int
from .base import is_concrete

Array = jax.Array


class CachedKeys(NamedTuple):
    """Everything attention needs about the L keys seen so far."""

    k: Array  # (B, Hkv, L, D), as the encoding left them
    v: Array  # (B, Hkv, L, D)
    pos: Array  # (B, L) integer positions
    valid: Array  # (B, L) bool, False for padding (and unwritten preallocated slots)
    segment: Array  # (B, L) integer packed-sequence id


_TIME_AXIS = (2, 2, 1, 1, 1)  # time axis of each CachedKeys field


class KVCache(nnx.Module):
    """Per-layer cache for incremental decoding (growing, or preallocated with ``capacity``)."""

    def __init__(self, capacity: int | None = None) -> None:
        if capacity is not None:
            check_positive_int(capacity, "capacity")
        self.capacity = capacity
        self.store: nnx.Cache[CachedKeys | None] = nnx.Cache(None)
        self.length: nnx.Cache[Any] = nnx.Cache(jnp.zeros((), dtype=jnp.int32))

    def offset(self) -> Any:
        """Entries written so far: an int, or a traced scalar inside ``jax.jit`` (preallocated)."""
        if self.capacity is None:
            store = self.store.get_value()
            return 0 if store is None else int(store.pos.shape[1])
        length = self.length.get_value()
        return int(length) if is_concrete(length) else length

    def __len__(self) -> int:
        offset = self.offset()
        if not isinstance(offset, int):
            raise TypeError("len() of a preallocated KVCache inside jax.jit: use .offset()")
        return offset

    def key_positions(self, pos: Array) -> Array:
        """(B, L) positions of every key once entries at ``pos`` (B, T) are appended (what
        ``append`` will return as ``pos``; L the capacity when preallocated)."""
        store = self.store.get_value()
        if self.capacity is None:
            return pos if store is None else jnp.concatenate([store.pos, pos], axis=1)
        old = _empty(pos, 1, self.capacity) if store is None else store.pos
        return _at(old, pos, 1, self.offset())

    def last_segment(self) -> Array | None:
        """(B, 1) segment id of each row's latest entry (0 while a preallocated cache is empty);
        None before the first append."""
        store = self.store.get_value()
        if store is None:
            return None
        if self.capacity is None:
            return store.segment[:, -1:]
        offset = self.offset()
        last = jax.lax.dynamic_slice_in_dim(store.segment, jnp.maximum(offset - 1, 0), 1, axis=1)
        return jnp.where(offset > 0, last, jnp.zeros_like(last))

    def append(self, new: CachedKeys) -> CachedKeys:
        """Append T entries; return all cached ones (L = length + T, or the capacity).

        Raises: ValueError on a B/Hkv/D change, or past the capacity (inside ``jax.jit``, where
        the length is traced, the compiled step fails with that message when it runs).
        """
        old = self.store.get_value()
        drop_time = (0, 1, 3)  # B, Hkv, D
        if old is not None and [old.k.shape[i] for i in drop_time] != [
            new.k.shape[i] for i in drop_time
        ]:
            raise ValueError(
                f"KVCache holds keys (B, Hkv, L, D) = {tuple(old.k.shape)}; new keys must match "
                f"B, Hkv, D, got {tuple(new.k.shape)}"
            )
        if self.capacity is None:
            keys = self._grow(old, new)
        else:
            keys = self._write(old, new, self.capacity)
        self.store.set_value(keys)
        return keys

    def _grow(self, old: CachedKeys | None, new: CachedKeys) -> CachedKeys:
        if old is None:
            return new
        pairs = zip(old, new, _TIME_AXIS, strict=True)
        return CachedKeys(*(jnp.concatenate([a, b], axis=t) for a, b, t in pairs))

    def _write(self, old: CachedKeys | None, new: CachedKeys, capacity: int) -> CachedKeys:
        """Write ``new`` at the current length into fixed (..., capacity, ...) buffers."""
        T, start = new.pos.shape[1], self.offset()
        if isinstance(start, int):
            _check_room(start, T, capacity)
        else:  # traced: a host check that runs only on overflow (a write would be clamped)
            jax.lax.cond(
                start + T > capacity,
                lambda: jax.debug.callback(_check_room, start, T, capacity),
                lambda: None,
            )
        if old is None:
            pairs = zip(new, _TIME_AXIS, strict=True)
            old = CachedKeys(*(_empty(x, t, capacity) for x, t in pairs))
        self.length.set_value(self.length.get_value() + T)
        return CachedKeys(
            *(_at(buf, x, t, start) for buf, x, t in zip(old, new, _TIME_AXIS, strict=True))
        )


def _check_room(start: Any, T: Any, capacity: Any) -> None:
    if int(start) + int(T) > int(capacity):
        raise ValueError(f"KVCache capacity {capacity} exceeded: {start} cached + {T} new")


def _empty(like: Array, axis: int, capacity: int) -> Array:
    shape = list(like.shape)
    shape[axis] = capacity
    return jnp.zeros(shape, dtype=like.dtype)  # valid = False: unwritten slots are masked


def _at(buf: Array, x: Array, axis: int, start: Any) -> Array:
    start = jnp.asarray(start)  # the other indices take its dtype (int64 literals under x64)
    index = [jnp.zeros_like(start)] * buf.ndim
    index[axis] = start
    return jax.lax.dynamic_update_slice(buf, x.astype(buf.dtype), tuple(index))
