"""Shaw et al. 2018 (arXiv:1803.02155): clipped relative-position embeddings for keys/values."""

from __future__ import annotations

from typing import Any

from .._validate import check_positive_int
from ._xp import clip, namespace, scatter_add_last, take_along_last
from .relative import relative_offsets


def shaw_relative_index(q_pos: Any, k_pos: Any, *, max_distance: int) -> Any:
    """Table row of each (query i, key j): clip(j - i, -K, K) + K with K = ``max_distance``.

    Keys further than K on either side share the edge rows (Shaw et al. 2018, eq. 5-6).
    Shapes: q_pos (..., Tq), k_pos (..., Tk) integer -> (..., Tq, Tk) in [0, 2K].
    Raises: ValueError for max_distance < 1.
    """
    check_positive_int(max_distance, "max_distance")
    key_minus_query = -relative_offsets(q_pos, k_pos)  # (..., Tq, Tk), j - i
    return clip(key_minus_query, -max_distance, max_distance) + max_distance


def _head_index(index: Any, B: int, Tq: int, Tk: int) -> Any:
    """``index`` as (Tq, Tk) or (B|1, 1, Tq, Tk), to broadcast over the heads. Raises unless it
    is an integer (Tq, Tk) or (B|1, Tq, Tk) array: another shape would be broadcast over the
    queries or fail deep inside the gather."""
    xp = namespace(index)
    if not xp.isdtype(index.dtype, "integral"):
        raise TypeError(f"index must be an integer array of table rows, got {index.dtype}")
    fits = index.ndim in (2, 3) and tuple(index.shape[-2:]) == (Tq, Tk)
    if not fits or (index.ndim == 3 and index.shape[0] not in (1, B)):
        raise ValueError(
            f"index must have shape ({Tq}, {Tk}) or ({B}, {Tq}, {Tk}), got {tuple(index.shape)}"
        )
    return index[:, None, ...] if index.ndim == 3 else index


def gather_relative(per_offset: Any, index: Any) -> Any:
    """Entry of each pair's relative row: out[..., i, j] = per_offset[..., i, index[i, j]].

    The gather equivalent of Transformer-XL's relative shift, valid for any positions.
    Shapes: per_offset (B, H, Tq, R); index (Tq, Tk) or (B, Tq, Tk) in [0, R) -> (B, H, Tq, Tk).
    Raises: TypeError/ValueError for an index that is not such an integer array.
    Paper: Shaw et al. 2018, arXiv:1803.02155.
    """
    xp = namespace(per_offset, index)
    B, H, Tq, _ = per_offset.shape
    index = _head_index(index, B, Tq, index.shape[-1])
    index = xp.broadcast_to(index, (B, H, Tq, index.shape[-1]))
    return take_along_last(per_offset, index)


def relative_key_logits(q: Any, table: Any, index: Any) -> Any:
    """q_i · a^K_ij with a^K_ij = table[index_ij] (Shaw et al. 2018, eq. 5), unscaled.

    Shapes: q (B, H, Tq, D); table (R, D); index (Tq, Tk) or (B, Tq, Tk) -> (B, H, Tq, Tk).
    """
    xp = namespace(q, table)
    per_row = xp.matmul(q, xp.matrix_transpose(table))  # (B, H, Tq, R)
    return gather_relative(per_row, index)


def relative_value_output(probs: Any, table: Any, index: Any) -> Any:
    """Σ_j α_ij a^V_ij with a^V_ij = table[index_ij] (Shaw et al. 2018, eq. 3).

    Attention mass is summed per table row (m_ir = Σ_(j: index_ij = r) α_ij, one scatter-add
    over the weights), then mixed by the table: Σ_r m_ir a^V_r.
    Shapes: probs (B, H, Tq, Tk); table (R, D); index (Tq, Tk) or (B, Tq, Tk) -> (B, H, Tq, D).
    Raises: TypeError/ValueError for an index that is not an integer array of these shapes.
    """
    xp = namespace(probs, table, index)
    index = _head_index(index, probs.shape[0], probs.shape[2], probs.shape[3])
    per_row = scatter_add_last(probs, index, table.shape[0])  # (B, H, Tq, R)
    return xp.matmul(per_row, xp.astype(table, probs.dtype))  # (B, H, Tq, D)
