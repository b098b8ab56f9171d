"""Relative offsets between query and key positions."""

from __future__ import annotations

from typing import Any

import torch

from .._validate import OFFSET_POSITION_LIMIT, check_position_range
from ._xp import namespace, widest_int


def relative_offsets(q_pos: Any, k_pos: Any) -> Any:
    """Offset i - j of every query position i from every key position j (query minus key).

    Causal attention sees offsets >= 0. (T5 uses the opposite sign: key minus query.)
    Shapes: q_pos (..., Tq), k_pos (..., Tk) -> (..., Tq, Tk), the leading dims broadcast.
    Unsigned positions are taken as the widest signed int first (uint8 0 - 1 would wrap to 255).
    Supported positions: |pos| <= 2^52 (``OFFSET_POSITION_LIMIT``): every offset then lies
    within 2^53, exact in float64 (the biases made from it are float), and the int64
    subtraction cannot overflow (2^62 - (-2^62) wraps negative: ALiBi would reward distance).
    Raises: TypeError for positions that are not integer arrays (float, bool); ValueError for
    0-d positions, leading (batch) dims that do not broadcast, or a position outside
    [-2^52, 2^52] (checked where values are free, ``check_position_range``).
    Paper: the offsets of relative position representations, Shaw et al. 2018, arXiv:1803.02155.
    """
    xp = namespace(q_pos, k_pos)
    for what, p in (("q_pos", q_pos), ("k_pos", k_pos)):
        if not _integral(xp, p.dtype):
            raise TypeError(f"{what} must be an integer array of positions, got {p.dtype}")
        if p.ndim == 0:
            raise ValueError(f"{what} must have shape (..., T), got a 0-d array")
    lead_q, lead_k = q_pos.shape[:-1], k_pos.shape[:-1]
    pairs = zip(lead_q[::-1], lead_k[::-1], strict=False)
    if lead_q != lead_k and any(a != b and 1 not in (a, b) for a, b in pairs):
        raise ValueError(
            f"q_pos (..., Tq) and k_pos (..., Tk) must have broadcastable batch dims, got "
            f"{tuple(q_pos.shape)} and {tuple(k_pos.shape)}"
        )
    check_position_range(q_pos, OFFSET_POSITION_LIMIT, "q_pos")
    if k_pos is not q_pos:  # self-attention passes one array twice: read it once
        check_position_range(k_pos, OFFSET_POSITION_LIMIT, "k_pos")
    if _unsigned(xp, q_pos.dtype) or _unsigned(xp, k_pos.dtype):
        q_pos, k_pos = xp.astype(q_pos, widest_int(xp)), xp.astype(k_pos, widest_int(xp))
    return q_pos[..., :, None] - k_pos[..., None, :]


def _integral(xp: Any, dtype: Any) -> bool:
    """True for an integer dtype (not bool); torch dtypes answer without the namespace."""
    if isinstance(dtype, torch.dtype):
        return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)
    return bool(xp.isdtype(dtype, "integral"))


def _unsigned(xp: Any, dtype: Any) -> bool:
    """True for an unsigned integer dtype (of an array ``_integral`` accepted)."""
    if isinstance(dtype, torch.dtype):
        return not dtype.is_signed
    return bool(xp.isdtype(dtype, "unsigned integer"))
