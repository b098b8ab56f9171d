"""Relative offsets between query and key positions."""

from __future__ import annotations

from typing import Any

from ._xp import namespace, widest_int


def relative_offsets(q_pos: Any, k_pos: Any) -> Any:
    """Offset i - j of every query position i from every key position j (query minus key).

    Causal attention sees offsets >= 0. (T5 uses the opposite sign: key minus query.)
    Shapes: q_pos (..., Tq), k_pos (..., Tk) -> (..., Tq, Tk). Unsigned positions are taken
    as the widest signed int first (uint8 0 - 1 would wrap to 255).
    """
    xp = namespace(q_pos, k_pos)
    if xp.isdtype(q_pos.dtype, "unsigned integer") or xp.isdtype(k_pos.dtype, "unsigned integer"):
        q_pos, k_pos = xp.astype(q_pos, widest_int(xp)), xp.astype(k_pos, widest_int(xp))
    return q_pos[..., :, None] - k_pos[..., None, :]
