"""What ``Attention`` needs from a per-layer key/value cache: the ``KeyValueCache`` Protocol.

``posenc.models.KVCache`` is the cache posenc ships (preallocated, streaming with sinks, or a
local layer's latest entries); attention reads a cache only through these members, so it never
imports the models that own the cache.
"""

from __future__ import annotations

from abc import ABC
from typing import Protocol

from torch import Tensor

from .keys import CachedKeys


class KeyValueCache(Protocol):
    """One layer's cache of keys, values and their positions, as ``Attention`` uses it.

    ``keep``: a local layer's cache keeps its latest N entries (None: every entry);
    ``consecutive``: every key so far was appended at the default positions 0, 1, ... (the
    attention layer keeps it up to date, so offsets are known without a host read);
    ``terms``: what an encoding computing its own attention (FoX, PaTH) derived from each
    cached key's input, (B, L, E), or None (the attention layer writes it back each call).
    """

    keep: int | None
    consecutive: bool
    terms: Tensor | None

    @property
    def streams(self) -> bool:
        """Whether positions are assigned inside the cache (attention sinks and a window)."""
        ...

    @property
    def position_start(self) -> int:
        """The default position of the next token."""
        ...

    def __len__(self) -> int:
        """Entries the next step attends to besides its own."""
        ...

    def key_positions(self, pos: Tensor) -> Tensor:
        """(B, L) | (B, L, A) positions of every key once entries at ``pos`` (B, T) |
        (B, T, A) are appended."""
        ...

    def last_segment(self) -> Tensor | None:
        """(B, 1) segment id of each row's latest entry; None while empty."""
        ...

    def append(self, new: CachedKeys) -> CachedKeys:
        """Append T new entries; every L cached entries (views valid until the next append)."""
        ...


#: The members of ``KeyValueCache`` a cache's class defines (``keep`` and ``consecutive`` may be
#: set per instance).
CLASS_MEMBERS = ("streams", "position_start", "__len__", "key_positions", "last_segment", "append")


class CacheCheck(ABC):  # noqa: B024 (no abstract members: only the structural check)
    """``isinstance(x, CacheCheck)``: whether x's class defines every ``CLASS_MEMBERS`` of
    ``KeyValueCache``. The verdict is kept per class (``ABCMeta``'s cache), so the check a
    forward makes costs what a nominal ``isinstance`` does, not a ``runtime_checkable``
    Protocol's attribute walk (40 µs a call, measured)."""

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        return all(hasattr(other, name) for name in CLASS_MEMBERS)
