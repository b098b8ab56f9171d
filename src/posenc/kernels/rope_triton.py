"""Triton RoPE kernel for GPUs (``kernel="triton"``): q and k rotated in one launch, both
layouts, backward by -θ.

Each program rotates ``ROWS`` rows (one (batch, head, position) each) of q or of k: programs
below ``n_q`` take q's rows, the rest k's. A row's P pairs are read once, turned in float32 and
written once in x's dtype; features past 2P (partial rotary) are copied. cos/sin are float32
tables broadcast against x right-aligned through strides (0 where a table has no batch or head
dimension), so position ids per batch (decode, packing) cost no copies. The backward is the same
kernel rotating the gradient by -θ (Su et al. 2021, RoPE is orthogonal).

Imported on first use by ``kernel="triton"``, or by ``"auto"`` on a CUDA tensor: CPU-only
installs never import Triton.
Correctness is tested on CPU in Triton's interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .rope_tables import RopeTables

#: Rows per program. Measured on an H100 (``benchmarks/gpu_study.py``,
#: ``benchmarks/results/gpu-study-h100.json``; GPU time by CUDA-graph replay): 16 rows (4 warps)
#: reached the copy floor where 4 rows took up to 2.6x longer (bf16, 64-wide heads).
ROWS = 16


@triton.jit
def _rotate_rows(
    x,
    out,
    cos,
    sin,
    prog,
    rows,
    H,
    T,
    xs0,
    xs1,
    xs2,
    os0,
    os1,
    os2,
    cs0,
    cs1,
    cs2,
    P: tl.constexpr,
    D: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
    ROWS: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    BACKWARD: tl.constexpr,
    COPY_TAIL: tl.constexpr,
):
    r = prog * ROWS + tl.arange(0, ROWS)  # (ROWS,) flat (b, h, t) row index
    live = r < rows
    t = r % T
    h = (r // T) % H
    b = r // (T * H)
    x_row = (b * xs0 + h * xs1 + t * xs2)[:, None]
    o_row = (b * os0 + h * os1 + t * os2)[:, None]
    c_row = (b * cs0 + h * cs1 + t * cs2)[:, None]
    i = tl.arange(0, BLOCK_P)[None, :]  # pair index
    m = live[:, None] & (i < P)
    if INTERLEAVED:
        ia = 2 * i
        ib = 2 * i + 1
    else:
        ia = i
        ib = i + P
    a = tl.load(x + x_row + ia, mask=m).to(tl.float32)
    bb = tl.load(x + x_row + ib, mask=m).to(tl.float32)
    c = tl.load(cos + c_row + i, mask=m)
    s = tl.load(sin + c_row + i, mask=m)
    if BACKWARD:
        s = -s
    ty = out.dtype.element_ty
    tl.store(out + o_row + ia, (a * c - bb * s).to(ty), mask=m)
    tl.store(out + o_row + ib, (bb * c + a * s).to(ty), mask=m)
    if COPY_TAIL:
        j = 2 * P + tl.arange(0, BLOCK_TAIL)[None, :]
        mt = live[:, None] & (j < D)
        tl.store(out + o_row + j, tl.load(x + x_row + j, mask=mt), mask=mt)


@triton.jit
def _rope_pair_kernel(
    q,
    oq,
    cq,
    sq,
    k,
    ok,
    ck,
    sk,
    n_q,
    rows_q,
    rows_k,
    Hq,
    Tq,
    Hk,
    Tk,
    qs0,
    qs1,
    qs2,
    oqs0,
    oqs1,
    oqs2,
    cqs0,
    cqs1,
    cqs2,
    ks0,
    ks1,
    ks2,
    oks0,
    oks1,
    oks2,
    cks0,
    cks1,
    cks2,
    P: tl.constexpr,
    D: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
    ROWS: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    BACKWARD: tl.constexpr,
    COPY_TAIL: tl.constexpr,
):
    pid = tl.program_id(0)
    if pid < n_q:
        _rotate_rows(q, oq, cq, sq, pid, rows_q, Hq, Tq, qs0, qs1, qs2, oqs0, oqs1, oqs2,
                     cqs0, cqs1, cqs2, P, D, BLOCK_P, BLOCK_TAIL, ROWS, INTERLEAVED, BACKWARD,
                     COPY_TAIL)  # fmt: skip
    else:
        _rotate_rows(k, ok, ck, sk, pid - n_q, rows_k, Hk, Tk, ks0, ks1, ks2, oks0, oks1, oks2,
                     cks0, cks1, cks2, P, D, BLOCK_P, BLOCK_TAIL, ROWS, INTERLEAVED, BACKWARD,
                     COPY_TAIL)  # fmt: skip


def supports(x: Tensor, cos: Tensor) -> bool:
    """Whether the kernel takes x (..., T, D) with tables cos (..., T, P): float32/bf16/fp16,
    unit last stride, 2 to 4 dimensions, cos broadcasting to x right-aligned."""
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16) or x.stride(-1) != 1:
        return False
    if not (2 <= x.ndim <= 4 and cos.ndim <= x.ndim and cos.device == x.device) or x.is_meta:
        return False  # meta tensors: no memory to launch on (Inductor traces them)
    xs, cs = x.shape[:-1], cos.shape[:-1]
    return all(c in (1, n) for c, n in zip(reversed(cs), reversed(xs), strict=False))


def _as4d(t: Tensor) -> Tensor:
    return t.reshape((1,) * (4 - t.ndim) + tuple(t.shape)) if t.ndim < 4 else t


def _table(t: Tensor, x4: Tensor) -> Tensor:
    """A contiguous float32 table expanded (zero strides) to x's (B, H, T, P): cos and sin of
    one shape then share strides, which the kernel assumes."""
    t = t.float().contiguous()
    return _as4d(t).expand(*x4.shape[:3], t.shape[-1])


def rope_pair(
    xs: list[Tensor], tables: list[RopeTables], layout: str, **flags: bool
) -> list[Tensor]:
    """``launch`` by each x's ``RopeTables`` (the interface of ``rope_cpp.rope_pair``; the
    tables are converted per launch); ``flags``: ``backward``, ``inplace``."""
    return launch(xs, [(t.cos, t.sin) for t in tables], layout, **flags)


def launch(
    xs: list[Tensor],
    tables: list[tuple[Tensor, Tensor]],
    layout: str,
    *,
    backward: bool = False,
    inplace: bool = False,
    rows: int = ROWS,
    num_warps: int = 4,
) -> list[Tensor]:
    """Rotate x_q and x_k (each (..., T, D)) by their (cos, sin) (..., T, P) in one launch
    (or a single x); returns the outputs (the inputs themselves when ``inplace``). ``rows``
    (a power of two) rows per program and ``num_warps``: launch shape (the GPU study's knobs,
    ``benchmarks/gpu_study.py``)."""
    if len(xs) not in (1, 2) or len(tables) != len(xs):
        raise ValueError(f"one or two tensors with their tables expected, got {len(xs)}")
    outs = list(xs) if inplace else [torch.empty_like(x) for x in xs]
    (q, *rest), ((cq, sq), *rest_tables) = xs, tables
    k, (ck, sk) = (rest[0], rest_tables[0]) if rest else (q, (cq, sq))
    q4, k4, oq4, ok4 = (_as4d(t) for t in (q, k, outs[0], outs[-1]))
    cq4, sq4 = _table(cq, q4), _table(sq, q4)
    ck4, sk4 = _table(ck, k4), _table(sk, k4)
    P, D = cq.shape[-1], q.shape[-1]
    rows_q = q4[..., 0].numel()  # (B, H, T) rows
    rows_k = k4[..., 0].numel() if rest else 0  # a single x: no k programs
    n_q, n_k = triton.cdiv(rows_q, rows), triton.cdiv(rows_k, rows)
    if n_q + n_k == 0:
        return outs
    _rope_pair_kernel[(n_q + n_k,)](
        q4, oq4, cq4, sq4, k4, ok4, ck4, sk4,
        n_q, rows_q, rows_k, q4.shape[1], q4.shape[2], k4.shape[1], k4.shape[2],
        *q4.stride()[:3], *oq4.stride()[:3], *cq4.stride()[:3],
        *k4.stride()[:3], *ok4.stride()[:3], *ck4.stride()[:3],
        P=P, D=D, BLOCK_P=triton.next_power_of_2(P),
        BLOCK_TAIL=triton.next_power_of_2(max(D - 2 * P, 1)), ROWS=rows, num_warps=num_warps,
        INTERLEAVED=layout == "interleaved", BACKWARD=backward,
        COPY_TAIL=D > 2 * P and not inplace,
    )  # fmt: skip
    return outs
