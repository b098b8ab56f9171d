"""FIRE attention in one fused CPU kernel: the bias is computed inside the softmax tiles.

FIRE's bias b_h(i, j) = f_h(ψ(|i - j|) / N_i) is not a function of the offset alone (the
normaliser N_i depends on the query), so it has no Toeplitz view; built per query block it is a
(H, block, L) tensor that SDPA then reads back, 2.7-4.6x the time of SDPA without bias in
``posenc bench bias``. The kernel (``csrc/fire_attention_cpu.cpp``) runs flash-attention tiles
(scores from BLAS, online softmax) and adds the bias in the pass that scales the scores: f is
piecewise linear in x (``functional.fire_mlp_pieces``) and x grows with |i - j|, so along a
tile row the bias is a few runs of one multiply-add each over a ψ table. Memory O(tile).

The kernel takes FIRE's factored terms (``FireTerms``: the ψ table, the queries' normalisers,
the MLP's pieces), which ``Attention``'s backend reads from the encoding
(``attention.backends.fire_attention``), for inference: float32, or bfloat16 / float16
computed in float32 (q, k, v converted first, O(T·D)), consecutive positions, no gradients and
no dropout; the bidirectional form (normaliser ψ(max(L, i, j))) where that is the query's
normaliser, no key past max(L, first query). Anything else (float64 among it) returns None
(the caller's blocks).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from .flex import check_qkv
from .native import NativeKernel

KERNEL = NativeKernel(
    "posenc_fire_attention_cpu",
    Path(__file__).parent / "csrc" / "fire_attention_cpu.cpp",
    "CPU FIRE attention kernel",
)


#: Input dtypes the kernel takes (low precision is computed in float32).
LOW_OR_SINGLE = (torch.float32, torch.bfloat16, torch.float16)


class FireTerms(NamedTuple):
    """FIRE's bias factored for the kernel, for queries at positions a, ..., a + T - 1:

    b_h(i, j) = slopes[h, m] x + intercepts[h, m],  x = psi[|i - j|] · inv_norm[i - a],

    m the number of kinks below x (``functional.fire_mlp_pieces``).

    Shapes: psi (M,), M above every |i - j| of the call; inv_norm (T,); kinks (K,); slopes,
    intercepts (1 | H, K + 1) (one row: shared by every head).
    """

    psi: Tensor
    inv_norm: Tensor
    kinks: Tensor
    slopes: Tensor
    intercepts: Tensor


def fire_fused_takes(q: Tensor, k: Tensor, v: Tensor, *, grads: bool) -> bool:
    """Whether the kernel runs q, k, v: on CPU, one dtype of ``LOW_OR_SINGLE``, and no gradient
    wanted (grad mode with q, k, v, or the terms (``grads``), requiring one)."""
    dtype = q.dtype
    if q.device.type != "cpu" or dtype not in LOW_OR_SINGLE:
        return False
    if any(t.dtype != dtype for t in (k, v)):
        return False
    return not (torch.is_grad_enabled() and (grads or any(t.requires_grad for t in (q, k, v))))


def fire_fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    terms: FireTerms,
    *,
    shift: int,
    causal: bool,
    scale: float,
    checked: bool = False,
) -> Tensor | None:
    """softmax(scale · q k^T + FIRE bias) v in one kernel, or None when it does not apply
    (``fire_fused_takes``; no C++ toolchain: one warning).

    Shapes: q (B, H, T, D); k, v (B, Hkv, L, D); ``terms`` (``FireTerms``) for the T queries.
    Query row r and key c sit at offset ``shift`` + r - c (consecutive positions: shift = first
    query position - first key position). Causal masking is by index (query r sees keys up to
    L - T + r), as in ``Attention``.

    Raises:
        TypeError / ValueError: q, k, v of the wrong kind or shape (``check_qkv``).
    """
    if not checked:  # (``Attention`` checked its inputs once)
        check_qkv(q, k, v, same_dtype=False)
    if not fire_fused_takes(q, k, v, grads=any(t.requires_grad for t in terms)):
        return None
    if not KERNEL.available("FIRE attention runs by query blocks"):
        return None
    dtype, H = q.dtype, q.shape[1]
    psi, inv_norm, kinks, slopes, intercepts = terms
    slopes, intercepts = slopes.expand(H, -1), intercepts.expand(H, -1)
    f32 = [t.detach().float().contiguous() for t in (psi, inv_norm, kinks, slopes, intercepts)]
    if dtype != torch.float32:  # the tiles run in float32: convert the inputs, not the tiles
        q, k, v = (t.float() for t in (q, k, v))
    q, k, v = (t if t.stride(-1) == 1 and t.stride(-2) >= t.shape[-1] else t.contiguous()
               for t in (q, k, v))  # fmt: skip
    out: Tensor = KERNEL.load().fire_attention(q, k, v, *f32, shift, causal, scale)
    return out.to(dtype)
