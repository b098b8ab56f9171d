"""Flax KV cache keeping each key's position, validity and segment id: growing (default; each
new length compiles once under ``jax.jit``) or preallocated (``capacity``: fixed shapes, one
compiled decoding step; unwritten slots are invalid keys). Its ``nnx.Cache`` variables let
``nnx.jit`` carry the updates out of a compiled step."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from .._validate import check_cache_axes, check_positive_int
from .base import is_concrete, on_host_if

Array = jax.Array


class CachedKeys(NamedTuple):
    """Everything attention needs about the L keys seen so far."""

    k: Array  # (B, Hkv, L, D), as the encoding left them (rotated for rotary encodings)
    v: Array  # (B, Hkv, L, Dv)
    pos: Array  # (B, L) integer, the position each key was encoded at ((B, L, A): A axes)
    valid: Array  # (B, L) bool, False for padding and a preallocated cache's unwritten slots
    segment: Array  # (B, L) integer (the widest), packed-sequence id


#: The time axis of each ``CachedKeys`` field.
TIME_AXIS: tuple[int, ...] = (2, 2, 1, 1, 1)


class Memory(NamedTuple):
    """An encoder output as one cross-attention layer reads it (``Attention.project_memory``):
    its keys and values (B, Hkv, S, D) computed once, with the source positions and validity,
    and the source padding mask (B, S) or None (no padding: nothing to mask)."""

    keys: CachedKeys
    padding_mask: Array | None


class KVCache(nnx.Module):
    """Per-layer cache for incremental decoding (growing, or preallocated with ``capacity``)."""

    def __init__(self, capacity: int | None = None) -> None:
        if capacity is not None:
            check_positive_int(capacity, "capacity")
        self.capacity = capacity
        self.store: nnx.Cache[CachedKeys | None] = nnx.Cache(None)
        self.length: nnx.Cache[Array] = nnx.Cache(jnp.zeros((), dtype=jnp.int32))
        #: What an encoding computing attention from the data keeps of each key (B, L, E).
        self.terms: nnx.Cache[Array | None] = nnx.Cache(None)

    def offset(self) -> int | Array:
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

    def _joined(self, old: Array | None, new: Array, axis: int, start: int | Array) -> Array:
        """``new`` written after the ``start`` entries of ``old`` (None: nothing cached) along
        the time axis ``axis``: concatenated, or into the fixed (capacity) buffer."""
        if self.capacity is None:
            return new if old is None else jnp.concatenate([old, new], axis=axis)
        if old is None:  # zeros: valid = False, so unwritten slots are masked
            old = jnp.zeros((*new.shape[:axis], self.capacity, *new.shape[axis + 1 :]), new.dtype)
        start = jnp.asarray(start)  # the other indices take its dtype (int64 under x64)
        index = [jnp.zeros_like(start)] * old.ndim
        index[axis] = start
        return jax.lax.dynamic_update_slice(old, new.astype(old.dtype), tuple(index))

    def key_positions(self, pos: Array) -> Array:
        """(B, L) positions of every key once entries at ``pos`` (B, T) are appended (what
        ``append`` will return as ``pos``; L the capacity when preallocated); (B, L, A) for
        positions of A axes. Raises: ValueError for other axes than the cached positions'."""
        store = self.store.get_value()
        if store is not None:
            check_cache_axes(store.pos, pos)
        return self._joined(None if store is None else store.pos, pos, 1, self.offset())

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
        if old is not None:
            check_cache_axes(old.pos, new.pos)
        if old is not None and _bhd(old) != _bhd(new):
            raise ValueError(
                f"KVCache holds keys (B, Hkv, L, D) = {tuple(old.k.shape)}; new keys must match "
                f"B, Hkv, D, got {tuple(new.k.shape)}"
            )
        T, start = new.pos.shape[1], self.offset()
        if self.capacity is not None:
            if isinstance(start, int):
                _check_room(start, T, self.capacity)
            else:  # traced: a host check that runs only on overflow (a write would be clamped)
                on_host_if(start + T > self.capacity, _check_room, start, T, self.capacity)
            self.length.set_value(self.length.get_value() + T)
        olds = (None,) * len(new) if old is None else old
        pairs = zip(olds, new, TIME_AXIS, strict=True)
        keys = CachedKeys(*(self._joined(o, n, axis, start) for o, n, axis in pairs))
        self.store.set_value(keys)
        return keys

    def join_terms(self, new: Array, start: int | Array) -> Array:
        """Keep the terms (B, T, E) of the T keys appended at ``start`` (``append``'s offset
        before it); return every key's (B, L, E) (L the capacity when preallocated)."""
        terms = self._joined(self.terms.get_value(), new, 1, start)
        self.terms.set_value(terms)
        return terms


def _bhd(keys: CachedKeys) -> tuple[int, ...]:
    """(B, Hkv, D): what every append must share."""
    return (*keys.k.shape[:2], keys.k.shape[3])


def _check_room(start: int | Array, T: int | Array, capacity: int | Array) -> None:
    if int(start) + int(T) > int(capacity):
        raise ValueError(f"KVCache capacity {capacity} exceeded: {start} cached + {T} new")
