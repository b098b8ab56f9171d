"""RoPE by ``torch.compile`` (``kernel="inductor"``): the formula as one pointwise kernel for q
and k, compiled by Inductor for any device and dtype.

Each shape/dtype/grad combination is its own cached kernel (the first call per shape compiles:
seconds on CPU). Dynamo's default limit of 8 recompiles per function would stop a model that
sees more sequence lengths: the limit here is ``RECOMPILE_LIMIT`` kernels per layout, past which
new combinations take the eager kernel (with one warning) instead of failing.

Inductor's vector width is set explicitly to the ISA of ATen's CPU capability (``_simdlen``).
Left unset, Inductor still picks the ISA from ``ATEN_CPU_CAPABILITY`` but its on-disk cache key
does not record it (torch 2.13): a kernel compiled under one capability was loaded under
another and returned NaN or corrupted the heap. Reproduction (no posenc; one cache dir)::

    f = torch.compile(lambda x: x * c + x.unflatten(-1, (2, 32)).flip(-2).flatten(-2) * s)
    # run once natively on an AVX-512 CPU, then with ATEN_CPU_CAPABILITY=avx2: NaN;
    # the other order: "malloc(): unaligned tcache chunk detected"
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from . import rope_eager
from .rope_eager import full_tables, swap_pairs
from .rope_tables import RopeTables

#: Kernels kept per layout (one per shape/dtype/grad combination seen).
RECOMPILE_LIMIT = 256
#: Notices given once per process ("limit": the recompile limit was reached).
_warned: set[str] = set()


def _rotate(x: Tensor, C: Tensor, S: Tensor, layout: str) -> Tensor:
    """x ⊙ C + swap(x) ⊙ S in C's dtype (float32, float64 for float64 x; tables from
    ``rope_eager.full_tables``): one pointwise kernel over contiguous rows, 2-4x faster under
    Inductor than slicing halves."""
    R = C.shape[-1]
    rot = x[..., :R]
    P = R // 2
    # flip, not roll: Inductor vectorises the flipped (.., 2, P) view (roll is 2-5x slower)
    swapped = rot.unflatten(-1, (2, P)).flip(-2).flatten(-2) if layout == "half" else None
    swapped = swap_pairs(rot, P, layout) if swapped is None else swapped
    out = (rot.to(C.dtype) * C + swapped.to(C.dtype) * S).to(x.dtype)
    return out if x.shape[-1] == R else torch.cat([out, x[..., R:]], dim=-1)


def _pair(
    q: Tensor, k: Tensor, cq: Tensor, sq: Tensor, ck: Tensor, sk: Tensor, layout: str
) -> tuple[Tensor, Tensor]:
    return _rotate(q, cq, sq, layout), _rotate(k, ck, sk, layout)


def _pair_(
    q: Tensor, k: Tensor, cq: Tensor, sq: Tensor, ck: Tensor, sk: Tensor, layout: str
) -> tuple[Tensor, Tensor]:
    return q.copy_(_rotate(q, cq, sq, layout)), k.copy_(_rotate(k, ck, sk, layout))


@functools.cache
def _simdlen() -> int:
    """Bits of the vector ISA Inductor picks for ATen's CPU capability (0: none)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    return int(pick_vec_isa().bit_width())


@functools.cache
def _compiled(layout: str, inplace: bool) -> Callable[..., tuple[Tensor, Tensor]]:
    fn = functools.partial(_pair_ if inplace else _pair, layout=layout)
    return torch.compile(fn, dynamic=False, fullgraph=True)


def rope_pair(
    q: Tensor, k: Tensor, tables_q: RopeTables, tables_k: RopeTables, layout: str, inplace: bool
) -> tuple[Tensor, Tensor]:
    """Rotate q (..., Tq, D) and k (..., Tk, D) (checked by the caller) by their ``RopeTables``
    in one compiled kernel, which keep the full-width tables per forward; ``inplace`` writes the
    results into q and k. Autograd differentiates the compiled graph."""
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config
    from torch._dynamo.exc import FailOnRecompileLimitHit

    simdlen = _simdlen() if q.device.type == "cpu" else None
    with (
        dynamo_config.patch(recompile_limit=RECOMPILE_LIMIT),
        inductor_config.patch({"cpp.simdlen": simdlen}),
    ):
        work_q, work_k = (torch.promote_types(x.dtype, torch.float32) for x in (q, k))
        cq, sq = full_tables(tables_q.cos, tables_q.sin, layout, work_q, tables_q)
        ck, sk = full_tables(tables_k.cos, tables_k.sin, layout, work_k, tables_k)
        try:
            return _compiled(layout, inplace)(q, k, cq, sq, ck, sk)
        except FailOnRecompileLimitHit:  # raised before running: q and k are untouched
            if "limit" not in _warned:
                _warned.add("limit")
                warnings.warn(
                    f"compiled RoPE: {RECOMPILE_LIMIT} shape/dtype combinations compiled for "
                    f"layout {layout!r}; new ones take the eager path",
                    RuntimeWarning,
                    stacklevel=3,
                )
    return rope_eager.rope_pair(q, k, tables_q, tables_k, layout, inplace)
