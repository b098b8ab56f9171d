"""Rotary position embedding, RoPE (Su et al. 2021, arXiv:2104.09864)."""

from __future__ import annotations

from typing import Any, Literal

import torch

from .._validate import check_positive_int, check_real_floating
from ._xp import namespace
from .frequencies import angles

Layout = Literal["half", "interleaved"]
LAYOUTS: tuple[Layout, ...] = ("half", "interleaved")


def rope_cos_sin(pos: Any, inv_freq: Any) -> tuple[Any, Any]:
    """cos(pos·θ_i), sin(pos·θ_i) from float64 angles (error vs exact < 1e-15 before casting).

    Shapes: pos (...,) integer, inv_freq (P,) -> cos, sin (..., P) float64.
    Paper: Su et al. 2021, arXiv:2104.09864.
    """
    xp = namespace(pos, inv_freq)
    ang = angles(pos, inv_freq)
    return xp.cos(ang), xp.sin(ang)


def check_rope_args(x: Any, cos: Any, sin: Any, layout: str, name: str = "x") -> None:
    """Raise ValueError for a layout other than "half"/"interleaved"; TypeError unless x, cos
    and sin have real floating dtypes (a rotation cannot be stored in integers); ValueError
    unless cos and sin share one shape (..., T, P) that broadcasts to x (..., T, D) without
    enlarging it, and 2P <= D. Errors name x ``name``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    check_real_floating(x, name)
    check_real_floating(cos, "cos")
    check_real_floating(sin, "sin")
    cs, xs = cos.shape, x.shape
    if sin.shape != cs:
        raise ValueError(f"cos and sin must have one shape, got {tuple(cs)} and {tuple(sin.shape)}")
    leading = range(2, len(cs) + 1)  # leading sizes: 1 or x's own
    if not (1 <= len(cs) <= len(xs) and all(cs[-i] in (1, xs[-i]) for i in leading)):
        raise ValueError(
            f"cos/sin of shape {tuple(cs)} do not broadcast to {name} of shape {tuple(xs)}: "
            "expected (..., T, P) with at most its dimensions, each leading size 1 or its own"
        )
    P, D = cs[-1], xs[-1]
    if 2 * P > D:
        raise ValueError(
            f"cos/sin have {P} pairs but {name} has only {D} features (need >= {2 * P})"
        )


def check_rope_inplace(x: Any, cos: Any, sin: Any, name: str = "x") -> None:
    """Raise ValueError unless x may be overwritten by its rotation: a torch tensor (inference:
    neither x nor, under autograd, cos/sin require grad) without elements shared by several
    indices (stride 0: an expanded tensor would be rotated once per index sharing them)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"inplace=True needs torch tensors, got {type(x).__name__}")
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        raise ValueError("inplace=True needs cos/sin without gradients")
    if torch.is_grad_enabled() and x.requires_grad:
        raise ValueError(f"inplace=True is for inference: {name} requires grad")
    if any(st == 0 and n > 1 for n, st in zip(x.shape, x.stride(), strict=False)):
        raise ValueError(
            f"inplace=True needs {name} without shared elements, got strides "
            f"{tuple(x.stride())} for shape {tuple(x.shape)}: clone() it first"
        )


def apply_rope(
    x: Any, cos: Any, sin: Any, *, layout: Layout = "half", inplace: bool = False
) -> Any:
    """Rotate each feature pair (a, b) of x by its angle: (a cos θ - b sin θ, a sin θ + b cos θ).

    "half" pairs feature i with i + P (GPT-NeoX, Hugging Face); "interleaved" pairs 2i with
    2i + 1 (RoFormer, Meta Llama, GPT-J). Features past 2P (partial rotary) pass through.
    Arithmetic runs in the wider of x's and cos's dtypes; the result has x's dtype.
    Shapes: x (..., T, D); cos, sin broadcastable to (..., T, P) with 2P <= D. Returns x's shape.
    ``inplace=True`` (torch tensors, inference) writes the result into x and returns x.
    This is the readable formula on any array-API namespace (NumPy, torch, JAX); the fast torch
    implementations of it are ``posenc.kernels.rope`` (what ``RoPE`` modules run).
    Raises: TypeError for x, cos or sin without a real floating dtype; ValueError for a layout
    other than "half"/"interleaved", 2P > D, cos and sin of different shapes, tables that do
    not broadcast to x without enlarging it, or ``inplace`` where ``check_rope_inplace`` says.
    Paper: Su et al. 2021, arXiv:2104.09864.
    """
    return _rope(x, cos, sin, layout, inplace, "x")


def _rope(x: Any, cos: Any, sin: Any, layout: Layout, inplace: bool, name: str) -> Any:
    """``apply_rope``, its errors naming x ``name``."""
    check_rope_args(x, cos, sin, layout, name)
    if inplace:
        check_rope_inplace(x, cos, sin, name)
    xp = namespace(x, cos, sin)
    P = cos.shape[-1]
    work = xp.result_type(x.dtype, cos.dtype)
    rot, rest = xp.astype(x[..., : 2 * P], work), x[..., 2 * P :]
    if layout == "half":
        a, b = rot[..., :P], rot[..., P:]  # (..., T, P) each
        out = xp.concat([a * cos - b * sin, a * sin + b * cos], axis=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]  # (..., T, P) each
        out = xp.stack([a * cos - b * sin, a * sin + b * cos], axis=-1)  # (..., T, P, 2)
        out = xp.reshape(out, rot.shape)
    out = xp.astype(out, x.dtype)
    out = out if rest.shape[-1] == 0 else xp.concat([out, rest], axis=-1)
    return x.copy_(out) if inplace else out


def apply_rope_pair(
    q: Any,
    k: Any,
    cos_q: Any,
    sin_q: Any,
    cos_k: Any,
    sin_k: Any,
    *,
    layout: Layout = "half",
    inplace: bool = False,
) -> tuple[Any, Any]:
    """RoPE on queries and keys together: ``apply_rope`` of each.

    ``apply_rope`` on queries and keys: (q', k'), errors naming q or k. Shapes as
    ``apply_rope``. (``posenc.kernels.rope.rotate_pair`` rotates both in one kernel.)
    Paper: Su et al. 2021, arXiv:2104.09864.
    """
    return (
        _rope(q, cos_q, sin_q, layout, inplace, "q"),
        _rope(k, cos_k, sin_k, layout, inplace, "k"),
    )


def rotary_dim(head_dim: int, partial: float) -> int:
    """Number of rotated features for a rotary fraction ``partial`` in (0, 1] (must be even).

    Follows GPT-NeoX / Hugging Face: ``int(head_dim * partial)``.
    Raises: TypeError/ValueError for a head_dim that is not a positive int; ValueError for
    ``partial`` outside (0, 1] or an odd rotated width.
    """
    check_positive_int(head_dim, "head_dim")
    if not 0.0 < partial <= 1.0:
        raise ValueError(f"partial (rotary fraction) must be in (0, 1], got {partial}")
    dim = int(head_dim * partial)
    if dim == 0 or dim % 2:
        raise ValueError(
            f"partial={partial} rotates {dim} of head_dim={head_dim} features; "
            "the rotated width must be a positive even number"
        )
    return dim
