"""Eager torch kernel behind ``apply_rope``: 4 fused-ish passes, inverse-rotation backward.

The formula is ``functional.rotary.apply_rope``'s; this is how torch tensors run it fast:
``mul(out=)`` + ``addcmul_`` into one preallocated output (no cat/stack/rotate_half copies),
arithmetic in cos's dtype (float32) with one rounding to x's dtype, and a custom backward that
rotates the gradient by the opposite angle, saving only cos/sin (RoPE is orthogonal:
d(R x)/dx = R^T). ``inplace=True`` rotates x itself (inference; one half-size temporary).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def _pairs(x: Tensor, P: int, layout: str) -> tuple[Tensor, Tensor]:
    """Views of the two members of each pair: (..., T, P) each."""
    if layout == "half":
        return x[..., :P], x[..., P : 2 * P]
    return x[..., 0 : 2 * P : 2], x[..., 1 : 2 * P : 2]


def rotate(x: Tensor, cos: Tensor, sin: Tensor, layout: str, sign: float = 1.0) -> Tensor:
    """R(sign·θ) x out of place. x (..., T, D); cos, sin (..., T, P). Returns x's dtype."""
    P = cos.shape[-1]
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    a, b = _pairs(x, P, layout)
    oa, ob = _pairs(out, P, layout)
    torch.mul(a, cos, out=oa)  # a cos θ
    oa.addcmul_(b, sin, value=-sign)  # - b sin θ
    torch.mul(b, cos, out=ob)  # b cos θ
    ob.addcmul_(a, sin, value=sign)  # + a sin θ
    if x.shape[-1] > 2 * P:
        out[..., 2 * P :] = x[..., 2 * P :]  # partial rotary: the rest passes through
    return out


def rotate_(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """R(θ) x in place (no autograd). Same shapes as ``rotate``; returns x."""
    a, b = _pairs(x, cos.shape[-1], layout)
    a_sin = a * sin  # the one temporary: a is overwritten before b needs it
    a.mul_(cos).addcmul_(b, sin, value=-1.0)
    b.mul_(cos).add_(a_sin)
    return x


class _RopeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return rotate(x, cos, sin, layout)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        cos, sin = ctx.saved_tensors
        return rotate(grad, cos, sin, ctx.layout, sign=-1.0), None, None, None


def apply_rope_torch(x: Tensor, cos: Tensor, sin: Tensor, layout: str, inplace: bool) -> Tensor:
    """Dispatch: in place, custom-backward, or plain autograd when cos/sin need gradients."""
    if inplace:
        if torch.is_grad_enabled() and x.requires_grad:
            raise ValueError("inplace=True is for inference: x requires grad")
        return rotate_(x, cos, sin, layout)
    if cos.requires_grad or sin.requires_grad:  # e.g. learnable phases: autograd through both
        P = cos.shape[-1]
        a, b = _pairs(x, P, layout)
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)
        out = out if layout == "interleaved" else out.transpose(-1, -2)
        out = out.flatten(-2).to(x.dtype)
        return out if x.shape[-1] == 2 * P else torch.cat([out, x[..., 2 * P :]], dim=-1)
    rotated: Tensor = _RopeFunction.apply(x, cos, sin, layout)
    return rotated
