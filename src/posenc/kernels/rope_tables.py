"""One side's cos/sin tables and the forms the RoPE kernels derive from them, made once.

A rotary encoding's per-forward state (``posenc.encodings.rotary.RoPEState``) holds one
``RopeTables`` for the queries and one for the keys, so every layer of one forward reuses the
eager kernel's full-width tables (with their negation for the backward, and their halves) and
the C++ kernel's float32 copies; nothing outlives the forward. Called without one,
``rotate_pair`` makes one for the call (``pair_tables``), and ``rope_eager.apply_rope``
derives what it needs on the spot. Each derived form is an explicit field, made on first use
for one (layout, dtype): a kernel asking for another makes its own for the call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

#: Full-width tables C, S (..., 2P).
Full = tuple[Tensor, Tensor]


class RopeTables:
    """cos, sin broadcastable to x (..., T, P), and what the kernels derive from them.

    Fields, each made on first use and kept (never while ``torch.compile`` traces: the compiled
    graph computes each form once anyway): ``full`` C, S (..., 2P) in the eager kernel's
    ``full_key`` (layout, dtype); ``negated`` -S of them (the backward's table); ``halves``
    S's and -S's two halves (views); ``float32`` cos and sin as contiguous float32 (the C++
    kernel's input).
    """

    def __init__(self, cos: Tensor, sin: Tensor) -> None:
        self.cos, self.sin = cos, sin
        self.full_key: tuple[str, torch.dtype] | None = None
        self._full: Full | None = None
        self._negated: Tensor | None = None
        self._halves: tuple[Full | None, Full | None] = (None, None)  # of S, of -S
        self._float32: Full | None = None

    def keeps(self, layout: str, dtype: torch.dtype) -> bool:
        """Whether forms for (layout, dtype) are kept here: the first pair asked for is, any
        other is made per call; nothing is kept while ``torch.compile`` traces."""
        if torch.compiler.is_compiling():
            return False
        return self.full_key is None or self.full_key == (layout, dtype)

    def full(self, layout: str, dtype: torch.dtype, make: Callable[[], Full]) -> Full:
        """C, S in ``dtype`` for ``layout``: ``make()`` once, kept when ``keeps``."""
        if not self.keeps(layout, dtype):
            return make()
        if self._full is None:
            self.full_key, self._full = (layout, dtype), make()
        return self._full

    def negated(self, S: Tensor, layout: str) -> Tensor:
        """-S for the full S (``full(layout, S.dtype)``'s), kept with them."""
        if self.full_key != (layout, S.dtype) or torch.compiler.is_compiling():
            return -S
        if self._negated is None:
            self._negated = -S
        return self._negated

    def halves(self, S: Tensor, sign: int) -> Full:
        """S[..., :P], S[..., P:] as views of the full "half"-layout S (sign 1) or of its
        negation (sign -1), kept with them."""
        if self.full_key != ("half", S.dtype) or torch.compiler.is_compiling():
            a, b = S.chunk(2, -1)
            return a, b
        index = 0 if sign == 1 else 1
        kept = self._halves[index]
        if kept is None:
            a, b = S.chunk(2, -1)
            kept = (a, b)
            self._halves = (kept, self._halves[1]) if index == 0 else (self._halves[0], kept)
        return kept

    def float32(self) -> Full:
        """cos and sin as float32 with unit last stride (themselves where they are), kept."""
        if self._float32 is None or torch.compiler.is_compiling():
            made = tuple(
                t if t.dtype == torch.float32 and t.stride(-1) == 1 else t.float().contiguous()
                for t in (self.cos, self.sin)
            )
            if torch.compiler.is_compiling():
                return made[0], made[1]
            self._float32 = (made[0], made[1])
        return self._float32


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
