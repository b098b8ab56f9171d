"""Checkpoint layouts: permute q/k projection weights between RoPE's two pair layouts.

A rotary model pairs the features of each head either as (2i, 2i + 1) ("interleaved": Meta's
Llama, GPT-J, RoFormer) or as (i, i + P) ("half": GPT-NeoX, Hugging Face Llama). Permuting the
output rows of the q and k projections (each head's first ``rotary_dim`` rows) turns one into
the other with the same attention scores: q·k is unchanged by a permutation applied to both, and
the rotation then meets each pair where the other layout expects it. Meta -> Hugging Face Llama
is interleaved -> half (transformers' ``convert_llama_weights_to_hf.permute``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._validate import check_positive_int
from .functional.rotary import LAYOUTS, Layout

__all__ = ["qk_layout", "qk_permutation"]


def qk_permutation(
    *, n_heads: int, head_dim: int, src: Layout, dst: Layout, rotary_dim: int | None = None
) -> Tensor:
    """Row indices (n_heads·head_dim,) int64: row r of the converted projection is row
    ``perm[r]`` of the original.

    Within each head, interleaved -> half puts feature 2j at j and 2j + 1 at P + j (P =
    rotary_dim / 2); half -> interleaved is the inverse; features past ``rotary_dim`` (partial
    rotary) and src == dst stay in place.
    Raises: ValueError for a layout other than "half"/"interleaved", a size that is not a
    positive int, an odd head_dim or rotary_dim, or rotary_dim > head_dim.
    """
    for name, layout in (("src", src), ("dst", dst)):
        if layout not in LAYOUTS:
            raise ValueError(f"{name} must be one of {LAYOUTS}, got {layout!r}")
    check_positive_int(n_heads, "n_heads")
    check_positive_int(head_dim, "head_dim")
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    check_positive_int(rotary_dim, "rotary_dim")
    if head_dim % 2 or rotary_dim % 2 or rotary_dim > head_dim:
        raise ValueError(
            "head_dim and rotary_dim must be even with rotary_dim <= head_dim, got "
            f"head_dim={head_dim}, rotary_dim={rotary_dim}"
        )
    P = rotary_dim // 2
    head = torch.arange(head_dim)  # (D,)
    pairs = torch.arange(rotary_dim).view(P, 2)  # row j: interleaved features 2j, 2j + 1
    if src == "interleaved" and dst == "half":
        head[:rotary_dim] = pairs.t().reshape(-1)  # [0, 2, ..., 1, 3, ...]
    elif src == "half" and dst == "interleaved":
        head[:rotary_dim] = pairs.view(2, P).t().reshape(-1)  # [0, P, 1, P + 1, ...]
    return (torch.arange(n_heads)[:, None] * head_dim + head).reshape(-1)  # (H·D,)


def qk_layout(
    weight: Tensor,
    *,
    n_heads: int,
    head_dim: int,
    src: Layout,
    dst: Layout,
    rotary_dim: int | None = None,
) -> Tensor:
    """A q or k projection weight (n_heads·head_dim, in_features) or bias (n_heads·head_dim,)
    with its rows permuted from the ``src`` pair layout to ``dst`` (a new tensor).

    For k give the key/value heads as ``n_heads`` (grouped-query attention); ``rotary_dim``:
    the rotated features of each head (partial rotary; default head_dim). Equals transformers'
    Llama conversion ``w.view(H, D // 2, 2, in).transpose(1, 2).reshape(H·D, in)`` for
    interleaved -> half; ``qk_layout(qk_layout(w, src=a, dst=b), src=b, dst=a)`` is w.
    Raises: TypeError unless weight is a tensor; ValueError for a weight that is not 1-D or
    2-D with n_heads·head_dim rows, and as ``qk_permutation``.
    """
    if not isinstance(weight, Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    perm = qk_permutation(
        n_heads=n_heads, head_dim=head_dim, src=src, dst=dst, rotary_dim=rotary_dim
    )
    if weight.ndim not in (1, 2) or weight.shape[0] != perm.numel():
        raise ValueError(
            "weight must be a projection weight (n_heads·head_dim, in_features) or bias "
            f"(n_heads·head_dim,) with n_heads·head_dim = {n_heads}·{head_dim} = {perm.numel()} "
            f"rows, got shape {tuple(weight.shape)}"
        )
    return weight.index_select(0, perm.to(weight.device))
