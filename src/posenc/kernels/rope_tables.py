"""One side's cos/sin tables and the forms the RoPE kernels derive from them, made once.

A ``RoPE`` module keeps a ``RopeTables`` per position tensor in the forward's position context
(``posenc.encodings.context``), so every layer of one forward reuses the eager kernel's
full-width tables (and their negation for the backward, and their halves), and the C++ kernel's
float32 copies; nothing outlives the forward. Called without one, ``rotate_pair`` makes one
for the call (``pair_tables``), and ``rope_eager.apply_rope`` derives what it needs on the spot.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch
from torch import Tensor

T = TypeVar("T")


class RopeTables:
    """cos, sin broadcastable to x (..., T, P), and what kernels derive from them (``derived``)."""

    def __init__(self, cos: Tensor, sin: Tensor) -> None:
        self.cos, self.sin = cos, sin
        self._derived: dict[Hashable, Any] = {}

    def derived(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()`` the first time ``key`` is asked for, its result after."""
        if key not in self._derived:
            self._derived[key] = make()
        value: T = self._derived[key]
        return value


def derived(tables: RopeTables | None, key: Hashable, make: Callable[[], T]) -> T:
    """``tables.derived(key, make)``, or ``make()`` without tables or while ``torch.compile``
    traces (the compiled graph computes each form once anyway; Dynamo cannot trace ``id``
    keys)."""
    if tables is None or torch.compiler.is_compiling():
        return make()
    return tables.derived(key, make)


def pair_tables(
    cos_q: Tensor,
    sin_q: Tensor,
    cos_k: Tensor,
    sin_k: Tensor,
    prepared: tuple[RopeTables | None, RopeTables | None],
) -> tuple[RopeTables, RopeTables]:
    """q's and k's ``RopeTables``: the ``prepared`` ones (one forward's), else made for this call,
    one set when k shares q's cos/sin (the derived tables are then made once, not twice)."""
    tables_q, tables_k = prepared
    if tables_q is None:
        tables_q = RopeTables(cos_q, sin_q)
    if tables_k is None:
        shared = cos_k is cos_q and sin_k is sin_q
        tables_k = tables_q if shared else RopeTables(cos_k, sin_k)
    return tables_q, tables_k
