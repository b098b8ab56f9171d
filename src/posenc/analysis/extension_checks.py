"""Checks on context extension (``posenc.extension``): an extended RoPE must bring positions of
the target length s·L back to angles seen in training (Chen et al. 2023, arXiv:2306.15595;
Peng et al. 2023, arXiv:2309.00071)."""

from __future__ import annotations

from typing import Any

from ..encodings.base import PositionalEncoding
from .result import check
from .subjects import TRAIN_LEN, is_rotary


def _extended(pe: PositionalEncoding) -> bool:
    return is_rotary(pe) and getattr(pe, "scaling", None) is not None and hasattr(pe, "frequencies")


@check("extension_in_training_range", applies=_extended, tolerance=1e-12)
def extension_in_training_range(pe: PositionalEncoding) -> tuple[float, str]:
    """At the target length s·L, the slowest pair turns no further than it did at L in
    training: θ'_min·s·L <= θ_min·L. Error = how far past (relative)."""
    rope: Any = pe
    scaling = rope.scaling
    factor = float(scaling.factor)
    L = int(getattr(scaling, "original_max_position_embeddings", TRAIN_LEN))
    target = int(factor * L)
    scaled, _ = rope.frequencies(target)  # (P,) at length s·L
    default = rope.default_inv_freq64  # (P,)
    reached, trained = float(scaled[-1]) * target, float(default[-1]) * L
    err = max(0.0, reached / trained - 1.0)
    return err, (
        f"{scaling.method}, s={factor:g}, L={L}: slowest pair reaches {reached:.4f} rad at "
        f"{target} vs {trained:.4f} rad at {L} in training"
    )
