"""Key/value cache that keeps each key's position (and padding/segment ids) beside it, and its
streaming form that keeps attention sinks and a window (StreamingLLM)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._validate import check_cache_axes, check_positive_int
from ..attention.keys import TIME_AXIS, CachedKeys

__all__ = ["KVCache"]


class KVCache:
    """Per-layer cache of keys, values and their positions for incremental decoding.

    What ``Attention`` reads from it is ``posenc.attention.cache.KeyValueCache``.

    Storage is preallocated and doubled when full (amortised O(1) appends per token). With
    autograd recording (new keys/values that require grad), each append builds a new store out
    of place (O(L) per append), so gradients flow through cached decoding as through one forward.

    ``KVCache(window=W, sinks=S)`` streams past the window with attention sinks (Xiao et al.
    2023, StreamingLLM, arXiv:2309.17453): a step of T tokens attends to the cached entries, at
    most the first S tokens and the W - 1 latest, plus its own T; then the cache keeps those
    again. Decoding one token at a time, each token sees the first S tokens and the last W
    (itself included). Positions live inside the cache: the L keys of a step are at 0..L-1 and
    its tokens at the last T of them, so ``Attention`` caches keys unrotated and rotates them
    at their cache positions every step (rotary encodings; score biases read the same
    positions). The stream is one unpadded sequence per row; positions are not passed.
    ``KVCache(keep=N)`` is a local layer's cache (``Attention(window=W)``: N = W - 1;
    ``chunk=C``: N = C - 1): a step attends to at most the latest N cached entries, at the
    positions they were encoded at (not re-assigned), plus its own; then the cache keeps the
    latest N again. The layer's window is by position, so this holds every key it can see
    while each row's positions increase by at least one per token (posenc's defaults, left
    padding; packed segments restart their positions but mask the segments before).
    Views an append returns are valid until the next append (eviction moves entries).
    """

    def __init__(
        self, *, window: int | None = None, sinks: int = 0, keep: int | None = None
    ) -> None:
        if window is not None:
            check_positive_int(window, "window")
        check_positive_int(sinks, "sinks", minimum=0)
        if window is None and sinks:
            raise ValueError(f"sinks={sinks} needs a window: KVCache(window=W, sinks={sinks})")
        if keep is not None:
            check_positive_int(keep, "keep", minimum=0)
            if window is not None:
                raise ValueError(
                    "keep (a local layer's latest entries, at their positions) and window (a "
                    "stream that re-assigns positions) exclude each other; give one"
                )
        self.window, self.sinks, self.keep = window, sinks, keep
        self.length = 0  # entries in the store (before a streaming cache's eviction)
        self.seen = 0  # tokens appended in all (where default positions continue)
        self._store: CachedKeys | None = None
        #: True while every key was appended at posenc's default positions 0, 1, ... (kept by
        #: the models' ``new_context``): their offsets are then known without a host read.
        self.consecutive = True
        #: (B, L, E): what an encoding computing attention from the data derived from each
        #: cached key's layer input (``PositionalEncoding.attention_form``: FoX's gates,
        #: PaTH's transforms), kept beside the keys; None until such a layer writes it.
        self.terms: Tensor | None = None

    @property
    def streams(self) -> bool:
        """Whether this cache keeps sinks and a window (positions assigned inside the cache)."""
        return self.window is not None

    def __len__(self) -> int:
        """Entries the next step attends to besides its own: all of them, or for a streaming
        cache at most S + W - 1 (the first S and the latest W - 1)."""
        if self.keep is not None:
            return min(self.length, self.keep)
        if self.window is None:
            return self.length
        return min(self.length, self.sinks + self.window - 1)

    @property
    def position_start(self) -> int:
        """The default position of the next token: the tokens appended so far, or a streaming
        cache's kept entries (it re-assigns positions 0..len - 1)."""
        return len(self) if self.streams else self.seen

    @property
    def capacity(self) -> int:
        """Entries the storage holds room for (it grows by doubling); 0 before the first."""
        return 0 if self._store is None else self._store.pos.shape[1]

    def key_positions(self, pos: Tensor) -> Tensor:
        """(B, L) positions of every key once entries at ``pos`` (B, T) are appended: the
        cached ones, then ``pos`` (what ``append`` will return as ``pos``); (B, L, A) for
        positions of A axes (B, T, A). A streaming cache's are its cache positions 0..L-1, (B, L).

        Raises: ValueError when ``pos`` has other axes than the cached positions."""
        if self.streams:
            B, L = pos.shape[0] if pos.ndim == 2 else 1, len(self) + pos.shape[-1]
            return torch.arange(L, device=pos.device).expand(B, L)
        if self._store is None or len(self) == 0:
            return pos
        check_cache_axes(self._store.pos, pos)
        kept = self._store.pos.narrow(1, self.length - len(self), len(self))  # after eviction
        return torch.cat([kept, pos.to(torch.long)], 1)

    def last_segment(self) -> Tensor | None:
        """(B, 1) segment id of each row's latest entry; None while empty."""
        if self._store is None or self.length == 0:
            return None
        return self._store.segment.narrow(1, self.length - 1, 1)

    def append(self, new: CachedKeys) -> CachedKeys:
        """Append T new entries and return views of all L = length + T cached entries.

        Raises: ValueError if the new entries disagree on their shapes (keys (B, Hkv, T, D),
        values (B, Hkv, T, Dv), valid/segment (B, T), pos (B, T) or (B, T, A)), or batch size,
        key heads, head dims or position axes differ from earlier appends, or padding (valid
        False) in a streaming cache; TypeError for float positions, or if the keys/values dtype
        differs from earlier appends (the cache would cast them silently).
        """
        _check_entry(new)
        if self.streams and not bool(new.valid.all()):
            raise ValueError(
                "KVCache(window=...) streams one unpadded sequence per row; got padding "
                "(padding_mask False): the padding would become attention sinks"
            )
        if self.streams or self.keep is not None:
            self._evict()
        T = new.pos.shape[1]
        if self._store is not None:
            check_cache_axes(self._store.pos, new.pos)
        if self._store is None:
            self._store = _allocate(new, max(T, 16))
        elif _sizes(self._store) != _sizes(new):
            have, dv = tuple(self._store.k.shape), self._store.v.shape[3]
            raise ValueError(
                f"KVCache holds keys (B, Hkv, L, D) = {have} and values of Dv = {dv}; new keys "
                f"must match B, Hkv, D (values Dv), got {tuple(new.k.shape)} and "
                f"{tuple(new.v.shape)}"
            )
        elif (self._store.k.dtype, self._store.v.dtype) != (new.k.dtype, new.v.dtype):
            raise TypeError(
                f"KVCache holds {self._store.k.dtype} keys/values; new ones are "
                f"{new.k.dtype}/{new.v.dtype} (start a new cache after changing the model dtype)"
            )
        end, self.seen = self.length + T, self.seen + T
        if torch.is_grad_enabled() and (new.k.requires_grad or new.v.requires_grad):
            # Autograd on: earlier steps' graphs hold views of the store, so an in-place write
            # would fail their backward; build a new store, exactly full, out of place.
            self._store = CachedKeys(
                *(
                    torch.cat([buf.narrow(dim, 0, self.length), x], dim)
                    for buf, x, dim in zip(self._store, new, TIME_AXIS, strict=True)
                )
            )
            self.length = end
            return self._store
        if end > self.capacity:
            bigger = _allocate(new, max(2 * self.capacity, end))
            for dst, src, dim in zip(bigger, self._store, TIME_AXIS, strict=True):
                dst.narrow(dim, 0, self.length).copy_(src.narrow(dim, 0, self.length))
            self._store = bigger
        for buf, x, dim in zip(self._store, new, TIME_AXIS, strict=True):
            buf.narrow(dim, self.length, T).copy_(x)
        self.length = end
        return CachedKeys(
            *(buf.narrow(dim, 0, end) for buf, dim in zip(self._store, TIME_AXIS, strict=True))
        )

    def _evict(self) -> None:
        """Keep the first S and the latest W - 1 entries (``len(self)`` of them), renumbered
        0..len(self)-1 (a ``keep`` cache: its latest N at their positions): what the next step
        attends to besides its own tokens."""
        keep = len(self)
        if self._store is None or keep == self.length:
            return
        S, recent, start = self.sinks, keep - self.sinks, self.length - (keep - self.sinks)
        fields = zip(self._store, TIME_AXIS, strict=True)
        if any(t.requires_grad for t in self._store):  # views in earlier graphs: out of place
            self._store = CachedKeys(
                *(torch.cat([x.narrow(d, 0, S), x.narrow(d, start, recent)], d) for x, d in fields)
            )
        else:  # the latest W - 1 move down behind the sinks (a copy: the ranges may overlap)
            for x, d in fields:
                x.narrow(d, S, recent).copy_(x.narrow(d, start, recent).clone())
        if self.streams:
            positions = torch.arange(keep, device=self._store.pos.device)
            self._store.pos.narrow(1, 0, keep).copy_(positions)
        self.length = keep


def _sizes(entry: CachedKeys) -> tuple[int, ...]:
    """(B, Hkv, D, Dv): what every append must share."""
    return (*entry.k.shape[:2], entry.k.shape[3], entry.v.shape[3])


def _check_entry(new: CachedKeys) -> None:
    """Raise unless keys (B, Hkv, T, D), values (B, Hkv, T, Dv), valid/segment (B, T) and pos
    (B, T) or (B, T, A) agree, with integer positions: ``append`` would broadcast or fail
    inside its copies."""
    k, v = new.k, new.v
    if k.ndim != 4 or v.ndim != 4 or v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"KVCache entries need keys (B, Hkv, T, D) and values (B, Hkv, T, Dv), got keys "
            f"{tuple(k.shape)} and values {tuple(v.shape)}"
        )
    want = (k.shape[0], k.shape[2])
    for name, x in (("pos", new.pos), ("valid", new.valid), ("segment", new.segment)):
        grid = name == "pos" and x.ndim == 3  # positions of A axes (B, T, A)
        if tuple(x.shape[:2] if grid else x.shape) != want:
            raise ValueError(
                f"KVCache entry {name} must have shape (B, T) = {want}"
                f"{' or (B, T, A)' if name == 'pos' else ''}, got {tuple(x.shape)}"
            )
    if new.pos.dtype.is_floating_point or new.pos.dtype.is_complex:
        raise TypeError(f"KVCache entry pos must be an integer tensor, got {new.pos.dtype}")


def _allocate(like: CachedKeys, capacity: int) -> CachedKeys:
    """Empty storage like ``like``, ``capacity`` entries along each field's time axis."""
    fields = zip(like, TIME_AXIS, strict=True)
    return CachedKeys(
        *(x.new_empty((*x.shape[:d], capacity, *x.shape[d + 1 :])) for x, d in fields)
    )
