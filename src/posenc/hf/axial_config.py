"""The axial 2-D RoPE arrangements of transformers' vision towers (``rope_type: "axial"``):
which frequencies turn by the row and which by the column.

All three turn pair p by one grid coordinate, angle_p = pos[a(p)]·θ_p (posenc's ``AxialRoPE``),
and differ in θ and a(p), for head_dim D and Q = D/4:

- rows first (posenc's ``RoPE2D``; Qwen2-VL/Qwen3-VL vision, GLM-4V vision): pairs j < Q by
  the row, θ_j = base^(-4j/D); pairs Q + j by the column, the same θ_j;
- columns first (``ColumnsFirstRoPE2D``; Step3p7 vision, whose ``recomposition_frequencies``
  flips (h, w)): the same series, the column's block first;
- Pixtral's (``PixtralRoPE2D``; Pixtral, Mistral Large 3/4 vision): RoPE's 1-D series
  φ_i = base^(-2i/D), i < D/2, the even ones for the row and the odd ones for the column:
  pairs j < Q by the row at φ_2j = base^(-4j/D), pairs Q + j by the column at
  φ_(2j+1) = base^(-(4j+2)/D).

``patch`` finds which one a tower's rotary module computes by comparing outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .. import functional as PF
from ..encodings.configs import AxialRoPEConfig
from ..encodings.grid_rotary import RoPE2D

__all__ = [
    "ColumnsFirstRoPE2D",
    "ColumnsFirstRoPE2DConfig",
    "PixtralRoPE2D",
    "PixtralRoPE2DConfig",
]


@dataclass(frozen=True, kw_only=True)
class ColumnsFirstRoPE2DConfig(AxialRoPEConfig):
    """``RoPE2D``'s config with the axes' blocks swapped: ``sections`` (rows, columns) as in
    ``RoPE2D``, the columns' block first in the head."""

    def check(self) -> None:
        super().check()
        sections = tuple(self.sections or ())
        if len(set(sections)) != 1:
            raise ValueError(f"columns-first 2-D RoPE needs equal sections, got {sections}")

    def pair_axes(self) -> tuple[int, ...]:
        """a(p) = 1 (column) for p < s_1, then 0 (row), (P,)."""
        rows, columns = self.sections or (0, 0)
        return (1,) * columns + (0,) * rows


class ColumnsFirstRoPE2D(RoPE2D):
    """Axial 2-D RoPE with the column's block first: at grid position (y, x) pairs j < Q turn
    by x·θ_j and pairs Q + j by y·θ_j, θ_j = base^(-4j/D), Q = D/4 (Heo et al. 2024,
    arXiv:2403.13298, eq. 12, its axes in the other order; transformers 5.23's
    ``Step3p7VisionRotaryEmbedding``). Not in the registry: built by ``patch``.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq, 2) |
    (B, Tq, 2), k_pos (Tk, 2) | (B, Tk, 2) int64 (row, column) -> q and k of the same shapes.
    """

    config_class = ColumnsFirstRoPE2DConfig
    config: ColumnsFirstRoPE2DConfig


def pixtral_inv_freq(head_dim: int, *, base: float, xp: ModuleType | None = None) -> Any:
    """Pixtral's 2-D RoPE frequencies: RoPE's 1-D series split between the axes.

    φ_i = base^(-2i/D) for i < D/2 (``rope_inv_freq``); the row's pairs take the even ones and
    the column's the odd ones, θ = (φ_0, φ_2, ..., φ_1, φ_3, ...). Mistral AI, "Pixtral 12B"
    (2024), arXiv:2410.07073, sec. 2.1.1 (RoPE-2D); transformers 5.23's
    ``PixtralVisionRotaryEmbedding``.
    Shapes: returns (D/2,) float64 in ``xp`` (default NumPy).
    Raises: ValueError for a head_dim not a multiple of 4 or a bad base (``rope_inv_freq``).
    """
    if head_dim % 4:
        raise ValueError(f"Pixtral's 2-D RoPE needs head_dim divisible by 4, got {head_dim}")
    xp = PF.np_xp if xp is None else xp
    series = PF.rope_inv_freq(head_dim, base=base, xp=xp)  # (D/2,)
    return xp.concat([series[0::2], series[1::2]])


@dataclass(frozen=True, kw_only=True)
class PixtralRoPE2DConfig(AxialRoPEConfig):
    """``RoPE2D``'s config with Pixtral's frequencies (``pixtral_inv_freq``); ``sections``
    must be the even split (D/4, D/4)."""

    def check(self) -> None:
        super().check()
        Q = self.head_dim // 4
        if self.head_dim % 4 or tuple(self.sections or ()) != (Q, Q):
            raise ValueError(
                f"Pixtral's 2-D RoPE splits head_dim {self.head_dim} evenly between rows and "
                f"columns (sections ({Q}, {Q})), got {self.sections}"
            )

    def inv_freq(self, xp: ModuleType | None = None) -> Any:
        """θ (P,) float64 in ``xp``: the even terms of RoPE's series, then the odd ones."""
        return pixtral_inv_freq(self.head_dim, base=self.base, xp=xp)


class PixtralRoPE2D(RoPE2D):
    """Pixtral's axial 2-D RoPE: at grid position (y, x) pair j < Q turns by y·base^(-4j/D)
    and pair Q + j by x·base^(-(4j+2)/D), Q = D/4 (``pixtral_inv_freq``; Mistral AI,
    "Pixtral 12B", arXiv:2410.07073). Not in the registry: built by ``patch``.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq, 2) |
    (B, Tq, 2), k_pos (Tk, 2) | (B, Tk, 2) int64 (row, column) -> q and k of the same shapes.
    """

    config_class = PixtralRoPE2DConfig
    config: PixtralRoPE2DConfig
