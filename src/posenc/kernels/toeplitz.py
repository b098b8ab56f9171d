"""Offset-only score biases as a zero-copy Toeplitz view: SDPA with no (T, L) bias in memory.

With queries at consecutive positions a + r and keys at b + c, an offset-only bias
(``capabilities.bias == "offset"``: ALiBi, T5, Kerple) is Toeplitz, bias[r, c] = f(a - b + r - c).
Reversing the key order (c = L - 1 - c'; softmax does not care) makes it Hankel,
bias[r, c'] = table[r + c']: a strided view (strides (1, 1)) of the (H, T + L - 1) per-offset
table (an ``OffsetTable``: ``Attention``'s backend reads it from the encoding), which CPU SDPA's
fused kernel takes as ``attn_mask`` without copying. Causal masking is a threshold on the
offset, so it lives in the table as -inf, and causal calls run one query block at a time over
the keys the block can see. Memory O(H·(T + L)); time about SDPA without
bias (``posenc bench bias``). Learned tables (T5, Kerple in training) keep the view: the
gradient of each (block, L_b) window sums back onto the table along its anti-diagonals
(``unfold``'s backward). Falls back (returns None) for non-consecutive positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .flex import OffsetTable, check_attention_inputs

#: Queries per causal block, T / 16 within these bounds: the diagonal block computes its masked
#: half (block / T extra work), smaller blocks pay more SDPA calls. ``posenc bench bias`` at
#: T = 16384: 1.06-1.08x SDPA with 1024-query blocks, 1.12-1.24x with 256.
CAUSAL_BLOCK = (256, 1024)


def arithmetic_start(pos: Tensor) -> int | None:
    """a when every row of pos (T,) | (B, T) is a, a + 1, ..., a + T - 1; else None (also when
    pos is empty: no start to read, T = 0 or B = 0)."""
    if pos.numel() == 0:
        return None
    row = pos.reshape(-1, pos.shape[-1])
    start = row[:1, :1]
    steps = torch.arange(pos.shape[-1], device=pos.device)
    return int(start) if bool((row == start + steps).all()) else None


def consecutive_starts(q_pos: Tensor, k_pos: Tensor, *, causal: bool) -> tuple[int, int] | None:
    """(a, b), the first query and key positions, when both run consecutively (``arithmetic_start``)
    and a causal call has no fewer keys than queries (else rows with no visible key); else None."""
    a, b = arithmetic_start(q_pos), arithmetic_start(k_pos)
    if a is None or b is None or (causal and k_pos.shape[-1] < q_pos.shape[-1]):
        return None
    return a, b


def toeplitz_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    table: OffsetTable,
    q_pos: Tensor,
    k_pos: Tensor,
    *,
    causal: bool,
    scale: float | None = None,
    dropout: float = 0.0,
    block: int | None = None,
    checked: bool = False,
) -> Tensor | None:
    """softmax(q k^T / sqrt(D) + bias) v with the bias read from a per-offset table, or None
    when the positions are not consecutive (or empty) or a causal call has fewer keys than
    queries (rows with no visible key: the caller's blocks).

    Shapes: q (B, H, T, D); k, v (B, Hkv, L, D); q_pos (T,) | (B, T); k_pos (L,) | (B, L);
    ``table`` (H, n) covering every offset q_pos - k_pos. Causal masking is by index (query r
    sees keys up to L - T + r), as in ``Attention``.

    Raises:
        TypeError / ValueError: inputs of the wrong kind or shape (``check_attention_inputs``),
            or a table with other than H rows or not covering the offsets
            (``OffsetTable.covering``).
    """
    if not checked:  # (``Attention`` checked its inputs once)
        check_attention_inputs(q, k, v, q_pos, k_pos, same_dtype=True)
    H, T, D = q.shape[1:]
    L = k.shape[2]
    starts = consecutive_starts(q_pos, k_pos, causal=causal)
    if starts is None:
        return None
    a, b = starts
    lo = a - (b + L - 1)  # smallest offset q_pos - k_pos; the table covers lo .. lo + T + L - 2
    bias = table.covering(lo, a + T - 1 - b, H)  # (H, T + L - 1)
    if causal:  # query r sees cache index <= L - T + r, i.e. offset >= (a - b) - (L - T)
        offsets = torch.arange(lo, lo + T + L - 1, device=bias.device)
        bias = bias.masked_fill(offsets < (a - b) - (L - T), float("-inf"))
    bias = bias.to(q.dtype).contiguous()  # (H, n)
    k_rev, v_rev = k.flip(2), v.flip(2)  # key c' = L - 1 - c
    lo_block, hi_block = CAUSAL_BLOCK
    step = T if not causal else (block or max(lo_block, min(hi_block, T // 16)))
    outs = []
    for s in range(0, T, step):
        e = min(s + step, T)
        Lb = L - T + e if causal else L  # keys the block's last query can see
        # bias[r, c'] for rows s..e-1 and reversed keys L-Lb..L-1 sits at table[h, L-Lb+s+r+c']:
        # windows of the table (strides (n, 1, 1)); a learned table's gradient sums them back
        first = L - Lb + s
        view = bias[:, first : first + e - s + Lb - 1].unfold(-1, Lb, 1)[None]  # (1, H, e-s, Lb)
        outs.append(
            torch.nn.functional.scaled_dot_product_attention(
                q[:, :, s:e],
                k_rev[:, :, L - Lb :],
                v_rev[:, :, L - Lb :],
                attn_mask=view,
                dropout_p=dropout,
                scale=1.0 / math.sqrt(D) if scale is None else scale,
                enable_gqa=k.shape[1] != H,
            )
        )
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)  # (B, H, T, D)
