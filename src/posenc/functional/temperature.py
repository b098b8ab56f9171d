"""Llama 4's query temperature on its NoPE layers (Meta 2025; transformers ``llama4``
``attn_temperature_tuning``, after Nakanishi 2025's scalable softmax, arXiv:2501.19399)."""

from __future__ import annotations

from typing import Any

from .._validate import check_positive_float, check_positive_int
from ._xp import astype, namespace


def query_temperature(
    pos: Any, *, floor_scale: int = 8192, attn_scale: float = 0.1, dtype: Any = None
) -> Any:
    """Llama 4's query temperature of a NoPE layer at each position.

    τ(p) = log(⌊(p + 1) / floor_scale⌋ + 1) · attn_scale + 1, the factor Llama 4 scales a
    NoPE layer's query at position p by (Meta 2025, transformers ``Llama4TextAttention``'s
    ``attn_temperature_tuning``: log1p of the floor, defaults ``floor_scale`` 8192,
    ``attn_scale`` 0.1; after Nakanishi 2025, arXiv:2501.19399): 1 for p < floor_scale - 1,
    then growing with the log of the position, so attention stays sharp over long contexts.

    The floor is taken in integers (transformers divides in float32; equal below 2^24).
    Shapes: pos (...,) integer -> (...,) in ``dtype`` (default float32).
    Raises: ValueError for floor_scale < 1 or attn_scale <= 0.
    """
    check_positive_int(floor_scale, "floor_scale")
    check_positive_float(attn_scale, "attn_scale")
    xp = namespace(pos)
    steps = (pos + 1) // floor_scale  # ⌊(p + 1) / floor_scale⌋, exact
    wide = xp.float32 if dtype is None else dtype
    return xp.log1p(astype(steps, wide)) * float(attn_scale) + 1.0
