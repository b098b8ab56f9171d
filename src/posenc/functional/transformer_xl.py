"""Transformer-XL relative attention terms (Dai et al. 2019, arXiv:1901.02860, sec. 3.3)."""

from __future__ import annotations

import math
from typing import Any

import torch

from .._validate import values_checked
from ._xp import device_of, namespace, widest_int
from .relative import relative_offsets
from .shaw import gather_relative
from .sinusoidal import sinusoidal_table


def transformer_xl_position_rows(
    lo: int, hi: int, *, r_proj: Any, n_heads: int, dtype: Any, base: float = 10000.0
) -> Any:
    """W_R R_p for every offset p in lo..hi, split by head: (H, hi - lo + 1, D).

    R_p is the sinusoidal row of offset p (width C); W_R = ``r_proj`` (H*D, C). Computed in
    ``dtype`` (the queries' dtype).
    Paper: Dai et al. 2019, arXiv:1901.02860, sec. 3.3.
    Shapes: r_proj (H·D, C) -> (H, hi - lo + 1, D).
    """
    xp = namespace(r_proj)
    rel = xp.arange(lo, hi + 1, dtype=widest_int(xp), device=device_of(r_proj))  # (R,)
    table = xp.astype(sinusoidal_table(rel, r_proj.shape[1], base=base), dtype)  # (R, C)
    w_r = xp.matmul(table, xp.matrix_transpose(xp.astype(r_proj, dtype)))  # (R, H*D)
    D = r_proj.shape[0] // n_heads
    return xp.permute_dims(xp.reshape(w_r, (rel.shape[0], n_heads, D)), (1, 0, 2))  # (H, R, D)


def transformer_xl_terms(
    q: Any,
    k: Any,
    q_pos: Any,
    k_pos: Any,
    *,
    r_proj: Any,
    u: Any,
    v: Any,
    base: float = 10000.0,
    rows: tuple[int, Any] | None = None,
) -> Any:
    """Terms (b) + (c) + (d) of A_ij = q_i·k_j + q_i·W_R R_(i-j) + u·k_j + v·W_R R_(i-j), unscaled.

    R_p is the sinusoidal table row of offset p = i - j (width C); W_R = ``r_proj`` maps it to
    the H heads. W_R R is computed once per distinct offset in [min(i - j), max(i - j)] and
    gathered per pair (the relative shift of the paper, for any positions); ``rows`` = (lo,
    ``transformer_xl_position_rows(lo, ...)``) reuses rows computed for a wider offset range
    (query blocks of one attention call), sliced to these positions' offsets where their
    values are read (``values_checked``).
    Shapes: q (B, H, Tq, D); k (B, H, Tk, D); q_pos (Tq,) | (B, Tq); k_pos (Tk,) | (B, Tk);
    r_proj (H*D, C); u, v (H, D) -> (B, H, Tq, Tk).
    Raises: ValueError when ``rows`` misses an offset of these positions.
    Paper: Dai et al. 2019, arXiv:1901.02860, sec. 3.3.
    """
    xp = namespace(q, k, r_proj)
    offsets = relative_offsets(q_pos, k_pos)  # (Tq, Tk) | (B, Tq, Tk), i - j
    if math.prod(offsets.shape) == 0:  # no query/key pair (T = 0): nothing to add
        shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])  # (B, H, Tq, Tk)
        return xp.zeros(shape, dtype=q.dtype, device=device_of(q))
    if rows is None:
        lo, hi = int(xp.min(offsets)), int(xp.max(offsets))
        w_r = transformer_xl_position_rows(
            lo, hi, r_proj=r_proj, n_heads=q.shape[1], dtype=q.dtype, base=base
        )  # (H, R, D)
    else:  # rows over a wider range: gathered in place (no read of the offsets' extremes)
        lo, w_r = rows
        if not isinstance(offsets, torch.Tensor) or values_checked(offsets):
            least, most = int(xp.min(offsets)), int(xp.max(offsets))
            if least < lo or most >= lo + w_r.shape[1]:
                raise ValueError(
                    f"rows cover offsets {lo}..{lo + w_r.shape[1] - 1}, "
                    f"the positions need {least}..{most}"
                )
            # only the rows these offsets meet: a query block of a long sequence spans about
            # half the context's offsets, and the product below is the layer's largest
            w_r, lo = w_r[:, least - lo : most - lo + 1], least
    position = xp.matmul(q + v[:, None, :], xp.matrix_transpose(w_r))  # (B, H, Tq, R)
    content = xp.matmul(u[:, None, :], xp.matrix_transpose(k))  # (B, H, 1, Tk)
    return gather_relative(position, offsets - lo) + content
