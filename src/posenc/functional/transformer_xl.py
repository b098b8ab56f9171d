"""Transformer-XL relative attention terms (Dai et al. 2019, arXiv:1901.02860, sec. 3.3)."""

from __future__ import annotations

from typing import Any

from ._xp import device_of, namespace
from .relative import relative_offsets
from .shaw import gather_relative
from .sinusoidal import sinusoidal_table


def transformer_xl_terms(
    q: Any, k: Any, q_pos: Any, k_pos: Any, *, r_proj: Any, u: Any, v: Any, base: float = 10000.0
) -> Any:
    """Terms (b) + (c) + (d) of A_ij = q_i·k_j + q_i·W_R R_(i-j) + u·k_j + v·W_R R_(i-j), unscaled.

    R_p is the sinusoidal table row of offset p = i - j (width C); W_R = ``r_proj`` maps it to
    the H heads. W_R R is computed once per distinct offset in [min(i - j), max(i - j)] and
    gathered per pair (the relative shift of the paper, for any positions).
    Shapes: q (B, H, Tq, D); k (B, H, Tk, D); q_pos (Tq,) | (B, Tq); k_pos (Tk,) | (B, Tk);
    r_proj (H*D, C); u, v (H, D) -> (B, H, Tq, Tk).
    """
    xp = namespace(q, k, r_proj)
    H, D = q.shape[1], q.shape[3]
    offsets = relative_offsets(q_pos, k_pos)  # (Tq, Tk) | (B, Tq, Tk), i - j
    lo, hi = int(xp.min(offsets)), int(xp.max(offsets))
    rel = xp.arange(lo, hi + 1, dtype=offsets.dtype, device=device_of(offsets))  # (R,)
    table = xp.astype(sinusoidal_table(rel, r_proj.shape[1], base=base), q.dtype)  # (R, C)
    w_r = xp.matmul(table, xp.matrix_transpose(r_proj))  # (R, H*D)
    w_r = xp.permute_dims(xp.reshape(w_r, (rel.shape[0], H, D)), (1, 0, 2))  # (H, R, D)
    position = xp.matmul(q + v[:, None, :], xp.matrix_transpose(w_r))  # (B, H, Tq, R)
    content = xp.matmul(u[:, None, :], xp.matrix_transpose(k))  # (B, H, 1, Tk)
    return gather_relative(position, offsets - lo) + content
