"""FIRE attention in one fused CPU kernel: the bias is computed inside the softmax tiles.

FIRE's bias b_h(i, j) = f_h(ψ(|i - j|) / N_i) is not a function of the offset alone (the
normaliser N_i depends on the query), so it has no Toeplitz view; built per query block it is a
(H, block, L) tensor that SDPA then reads back, 2.7-4.6x the time of SDPA without bias in
``posenc bench bias``. The kernel (``csrc/fire_attention_cpu.cpp``) runs flash-attention tiles
(scores from BLAS, online softmax) and adds the bias in the pass that scales the scores: f is
piecewise linear in x (``functional.fire_mlp_pieces``) and x grows with |i - j|, so along a
tile row the bias is a few runs of one multiply-add each over a ψ table. Memory O(tile).

Used by ``Attention`` (``bias_backend="auto"``, CPU) for inference: float32, or bfloat16 /
float16 computed in float32 (q, k, v converted first, O(T·D)), consecutive positions, no
gradients and no dropout; the bidirectional form (normaliser ψ(max(L, i, j))) where that is
the query's normaliser, no key past max(L, first query). Anything else (float64 among it)
returns None (the caller's blocks).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ..encodings.base import PositionalEncoding
from ..encodings.bias import FIRE
from ..kernels.native import NativeKernel
from .flex import check_attention_inputs
from .toeplitz import consecutive_starts

KERNEL = NativeKernel(
    "posenc_fire_attention_cpu",
    Path(__file__).parents[1] / "kernels" / "csrc" / "fire_attention_cpu.cpp",
    "CPU FIRE attention kernel",
)


#: Input dtypes the kernel takes (low precision is computed in float32).
LOW_OR_SINGLE = (torch.float32, torch.bfloat16, torch.float16)


def fire_fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pe: PositionalEncoding,
    q_pos: Tensor,
    k_pos: Tensor,
    *,
    causal: bool,
    scale: float,
    checked: bool = False,
) -> Tensor | None:
    """softmax(scale · q k^T + FIRE bias) v in one kernel, or None when it does not apply
    (also for a FIRE subclass with its own ``bias``: the kernel computes FIRE's).

    Shapes: q (B, H, T, D); k, v (B, Hkv, L, D); q_pos (T,) | (B, T); k_pos (L,) | (B, L).
    Causal masking is by index (query r sees keys up to L - T + r), as in ``Attention``.
    A one-head FIRE is shared by all H heads, as the (B|1, 1, T, L) bias broadcasts.

    Raises:
        TypeError / ValueError: inputs of the wrong kind or shape (``check_attention_inputs``),
            or a FIRE with neither one head nor H.
    """
    # FIRE's own formula only: a subclass rewriting ``bias`` takes the blocks
    if not isinstance(pe, FIRE) or type(pe).bias is not FIRE.bias or q.device.type != "cpu":
        return None
    if not checked:  # (``Attention`` checked its inputs once)
        check_attention_inputs(q, k, v, q_pos, k_pos, same_dtype=False)
    H = q.shape[1]
    if pe.n_heads not in (1, H):
        raise ValueError(f"FIRE has {pe.n_heads} heads, attention has {H}")
    dtype = q.dtype
    if dtype not in LOW_OR_SINGLE or any(t.dtype != dtype for t in (k, v)):
        return None
    needs_grad = any(t.requires_grad for t in (q, k, v, *pe.parameters()))
    if torch.is_grad_enabled() and needs_grad:
        return None
    starts = consecutive_starts(q_pos, k_pos, causal=causal)
    if starts is None or not KERNEL.available("FIRE attention runs by query blocks"):
        return None
    a, b = starts
    T, L = q.shape[2], k.shape[2]
    if not _query_normalised(pe, a, b, T, L, causal=causal):
        return None
    shift = a - b  # offset of query row r and key c: shift + r - c
    max_offset = max(abs(shift + T - 1), abs(shift - L + 1))  # largest |i - j|
    psi, norm = pe.distance_terms(torch.arange(a, a + T), max_offset)
    kinks, slopes, intercepts = pe.mlp_pieces()  # slopes, intercepts (1 | H, K + 1)
    slopes, intercepts = slopes.expand(H, -1), intercepts.expand(H, -1)
    f32 = [t.detach().float().contiguous() for t in (psi, 1.0 / norm, kinks, slopes, intercepts)]
    if dtype != torch.float32:  # the tiles run in float32: convert the inputs, not the tiles
        q, k, v = (t.float() for t in (q, k, v))
    q, k, v = (t if t.stride(-1) == 1 and t.stride(-2) >= t.shape[-1] else t.contiguous()
               for t in (q, k, v))  # fmt: skip
    out: Tensor = KERNEL.load().fire_attention(q, k, v, *f32, shift, causal, scale)
    return out.to(dtype)


def _query_normalised(pe: FIRE, a: int, b: int, T: int, L: int, *, causal: bool) -> bool:
    """Whether every visible pair's normaliser is the query's, ψ(max(L, i)), as the kernel
    computes it: always for the causal form; for the bidirectional form's ψ(max(L, i, j)) when
    no visible key lies after its query (causal, keys b.. not ahead of queries a..) or past
    max(L, first query)."""
    if not pe.bidirectional or (causal and b + L - T <= a):
        return True
    return b + L - 1 <= max(float(pe.threshold), a)
