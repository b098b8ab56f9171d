"""Relative offsets between query and key positions."""

from __future__ import annotations

from typing import Any

from ._xp import namespace


def relative_offsets(q_pos: Any, k_pos: Any) -> Any:
    """Offset i - j of every query position i from every key position j (query minus key).

    Causal attention sees offsets >= 0. (T5 uses the opposite sign: key minus query.)
    Shapes: q_pos (..., Tq), k_pos (..., Tk) -> (..., Tq, Tk).
    """
    namespace(q_pos, k_pos)
    return q_pos[..., :, None] - k_pos[..., None, :]
