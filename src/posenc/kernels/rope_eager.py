"""Eager RoPE kernel (``kernel="eager"``): three PyTorch passes, inverse-rotation backward.

``posenc.functional.apply_rope`` rewritten over the full rotated width:

    R(θ) x = x ⊙ C + swap(x) ⊙ S,   C = (cos, cos), S = (-sin, sin)  ("half" layout)

where swap exchanges the two members of each pair: one copy (swap), one in-place multiply and
one ``addcmul_`` over contiguous rows (in the half layout, where ``halves_pay``, each output
half is written from the other input half instead). The backward rotates the gradient by -θ
(R is orthogonal), saving only the tables; ``inplace=True`` rotates x itself (inference).
Low-precision x is rotated in its own dtype with the tables rounded to it once (mixed bf16 x
fp32 kernels are unvectorised on CPU; as Hugging Face does: up to ~3x the output's rounding
error, against ~1x for the formula in float32); the angles themselves are exact.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..functional.rotary import check_rope_args, check_rope_inplace
from .rope_tables import RopeTables


def swap_pairs(x: Tensor, P: int, layout: str) -> Tensor:
    """Exchange the members of each pair (a copy). x (..., 2P) -> (..., 2P)."""
    if layout == "half":
        return torch.roll(x, P, dims=-1)  # halves swapped (roll is 2-5x faster than flip/cat)
    return x.unflatten(-1, (P, 2)).flip(-1).flatten(-2)  # (.., P, 2) neighbours swapped


def full_tables(
    cos: Tensor, sin: Tensor, layout: str, dtype: torch.dtype, tables: RopeTables | None = None
) -> tuple[Tensor, Tensor]:
    """C (..., 2P) and S (..., 2P) in ``dtype``; made once per ``tables`` (one forward's)."""

    def make() -> tuple[Tensor, Tensor]:
        c, s = cos.to(dtype), sin.to(dtype)
        if layout == "half":
            return torch.cat([c, c], dim=-1), torch.cat([-s, s], dim=-1)
        return torch.stack([c, c], dim=-1).flatten(-2), torch.stack([-s, s], dim=-1).flatten(-2)

    if tables is None:
        return make()
    return tables.full(layout, dtype, make)


def negated(S: Tensor, layout: str, tables: RopeTables | None = None) -> Tensor:
    """-S (the backward's table; every layer's backward reuses it through ``tables``)."""
    return -S if tables is None else tables.negated(S, layout)


def table_halves(
    S: Tensor, tables: RopeTables | None = None, sign: int = 1
) -> tuple[Tensor, Tensor]:
    """S[..., :P], S[..., P:] as views, made once per ``tables`` and sign (the forward's S and
    the backward's -S): at lab sizes each slice costs about as much as the arithmetic."""
    if tables is None:
        a, b = S.chunk(2, -1)
        return a, b
    return tables.halves(S, sign)


def _table_dtype(x: Tensor, cos: Tensor) -> torch.dtype:
    low = x.dtype in (torch.bfloat16, torch.float16)
    return x.dtype if low else torch.promote_types(x.dtype, cos.dtype)


#: Largest 2-byte x (bytes) with half-rows of 128 bytes or more rotated by half-width products.
WIDE_HALVES_MAX_BYTES = 4 << 20
#: Largest x (bytes) rotated by the swap copy whatever its shape: three ATen calls instead of
#: six, and at these sizes the calls are the cost (a decode step's q (1, 8, 1, 128): 6 against
#: 11 µs); the two forms are equal near 256 KiB.
SMALL_MAX_BYTES = 128 << 10


def halves_pay(x: Tensor, P: int) -> bool:
    """Whether half-width products beat copy-then-multiply for x (..., 2P), as timed on one
    2-core EPYC (``posenc bench rope``'s eager column): not up to ``SMALL_MAX_BYTES``; above,
    yes for float32 and for bfloat16 at D = 64; not for 2-byte x with half-rows of 128 bytes or
    more beyond 4 MiB (float32 with the same half-rows is unaffected; the cause is not pinned
    down)."""
    nbytes = x.numel() * x.element_size()
    if nbytes <= SMALL_MAX_BYTES:
        return False
    wide_low = x.element_size() < 4 and P * x.element_size() >= 128
    return not wide_low or nbytes <= WIDE_HALVES_MAX_BYTES


def rotate(
    x: Tensor, C: Tensor, S: Tensor, layout: str, tables: RopeTables | None = None, sign: int = 1
) -> Tensor:
    """x ⊙ C + swap(x) ⊙ S out of place; features past C's width pass through.

    Half layout: the swap is fused into the S product by writing each half of the output from
    the other half of x (two half-width multiplies, then one ``addcmul_``) where that pays
    (``halves_pay``); otherwise a swap copy, then the multiply and the ``addcmul_``.
    """
    R = C.shape[-1]
    rot = x if x.shape[-1] == R else x[..., :R]
    if layout == "half" and rot is x and halves_pay(x, R // 2):
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        s_a, s_b = table_halves(S, tables, sign)
        (a, b), (out_a, out_b) = x.chunk(2, -1), out.chunk(2, -1)
        torch.mul(b, s_a, out=out_a)  # -b sin θ
        torch.mul(a, s_b, out=out_b)  # a sin θ
        return out.addcmul_(x, C)
    out = swap_pairs(rot, R // 2, layout)  # (..., R), fresh
    out.mul_(S).addcmul_(rot, C)
    return out if rot is x else torch.cat([out, x[..., R:]], dim=-1)


def rotate_(x: Tensor, C: Tensor, S: Tensor, layout: str) -> Tensor:
    """x ⊙ C + swap(x) ⊙ S written into x (no autograd); returns x. The same products and
    ``addcmul`` as ``rotate``, so in place and out of place agree bit for bit."""
    rot = x[..., : C.shape[-1]]
    swapped = swap_pairs(rot, C.shape[-1] // 2, layout).mul_(S)
    torch.addcmul(swapped, rot, C, out=rot)
    return x


class _RopeFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: Tensor, C: Tensor, S: Tensor, layout: str, tables: RopeTables | None
    ) -> Tensor:
        ctx.save_for_backward(C, S)
        ctx.layout, ctx.tables = layout, tables
        return rotate(x, C, S, layout, tables)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None, None]:
        C, S = ctx.saved_tensors
        neg = negated(S, ctx.layout, ctx.tables)  # R(θ)^T = R(-θ)
        return rotate(grad, C, neg, ctx.layout, ctx.tables, -1), None, None, None, None


def apply_rope(
    x: Tensor, cos: Tensor, sin: Tensor, *, layout: str = "half", inplace: bool = False
) -> Tensor:
    """``posenc.functional.apply_rope`` for torch tensors by this kernel: same arguments, checks
    and errors (low-precision x rotated in its own dtype, as the module docstring says)."""
    check_rope_args(x, cos, sin, layout)
    if inplace:
        check_rope_inplace(x, cos, sin)
    return apply_rope_unchecked(x, cos, sin, layout, inplace)


def apply_rope_unchecked(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    layout: str,
    inplace: bool,
    tables: RopeTables | None = None,
) -> Tensor:
    """``apply_rope`` on arguments already checked: in place, custom backward, or plain
    autograd when cos/sin need gradients (learnable phases). ``tables``: cos and sin's
    ``RopeTables`` (one forward's), keeping the derived tables for every layer."""
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        C, S = full_tables(cos, sin, layout, torch.promote_types(x.dtype, cos.dtype))
        R = C.shape[-1]
        out = (x[..., :R] * C + swap_pairs(x[..., :R], R // 2, layout) * S).to(x.dtype)
        return out if x.shape[-1] == R else torch.cat([out, x[..., R:]], dim=-1)
    C, S = full_tables(cos, sin, layout, _table_dtype(x, cos), tables)
    if inplace:
        return rotate_(x, C, S, layout)
    if not (torch.is_grad_enabled() and x.requires_grad):  # no graph: skip the Function's cost
        return rotate(x, C, S, layout, tables)
    rotated: Tensor = _RopeFunction.apply(x, C, S, layout, tables)
    return rotated


def rope_pair(
    q: Tensor, k: Tensor, tables_q: RopeTables, tables_k: RopeTables, layout: str, inplace: bool
) -> tuple[Tensor, Tensor]:
    """q by ``apply_rope_unchecked`` with its ``RopeTables``, k with its own."""
    return (
        apply_rope_unchecked(q, tables_q.cos, tables_q.sin, layout, inplace, tables_q),
        apply_rope_unchecked(k, tables_k.cos, tables_k.sin, layout, inplace, tables_k),
    )
