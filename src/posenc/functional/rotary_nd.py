"""RoPE over positions of several axes (images, video, multimodal text): which axis turns each
rotary pair, and by how much.

Axial RoPE (Heo et al. 2024, arXiv:2403.13298, eq. 12) gives each axis a contiguous block of
pairs with its own RoPE series; M-RoPE (Wang et al. 2024, Qwen2-VL, arXiv:2409.12191) keeps the
1-D series θ_p = base^(-2p/D) over all pairs and hands contiguous sections of them to (t, h, w)
(Qwen3-VL interleaves the sections); RoPE-Mixed (Heo et al. 2024, eq. 14) turns every pair by a
learned mix of all axes. Positions are integer arrays (..., A), one coordinate per axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from .._validate import ANGLE_POSITION_LIMIT, check_position_range, check_positive_int
from ._xp import device_of, namespace, np_xp, widest_float
from .frequencies import rope_inv_freq


def check_sections(sections: Sequence[int], pairs: int | None = None) -> tuple[int, ...]:
    """Validate an axial split of the rotary pairs (pairs per axis).

    ``sections`` as a tuple of positive ints (pairs per axis, at least two axes), summing to
    ``pairs`` when given. Raises: TypeError/ValueError naming what is wrong."""
    if isinstance(sections, str) or not isinstance(sections, Sequence):
        raise TypeError(f"sections must be a sequence of ints, got {type(sections).__name__}")
    out = tuple(sections)
    if len(out) < 2:
        raise ValueError(f"sections must give pairs for at least 2 axes, got {out}")
    for s in out:
        check_positive_int(s, "each section")
    if pairs is not None and sum(out) != pairs:
        raise ValueError(f"sections must sum to the {pairs} rotary pairs, got {out} = {sum(out)}")
    return out


def pair_axes(sections: Sequence[int], *, interleaved: bool = False) -> tuple[int, ...]:
    """The axis a(p) whose coordinate turns pair p, for ``sections`` pairs per axis.

    Contiguous (axial RoPE, Qwen2-VL's ``mrope_section``): the first s_0 pairs follow axis 0,
    the next s_1 axis 1, ... ``interleaved`` (Qwen3-VL): pair p follows axis a >= 1 when
    p ≡ a (mod A) and p < A·s_a, else axis 0, so every axis gets high and low frequencies.
    Shapes: returns P = Σ s_a entries.
    Raises: ValueError for invalid sections, or interleaved ones that do not fit (A·s_a > P + a).
    Paper: Heo et al. 2024, arXiv:2403.13298 (axial RoPE); Wang et al. 2024, arXiv:2409.12191
    (M-RoPE).
    """
    sections = check_sections(sections)
    A, P = len(sections), sum(sections)
    if not interleaved:
        return tuple(a for a, s in enumerate(sections) for _ in range(s))
    if any(A * (s - 1) + a >= P for a, s in enumerate(sections) if a):
        raise ValueError(f"interleaved sections {sections} do not fit {P} pairs (A·s_a > P)")
    return tuple(
        next((a for a in range(1, A) if p % A == a and p < A * sections[a]), 0) for p in range(P)
    )


def axial_inv_freq(
    sections: Sequence[int], *, base: float, xp: ModuleType | None = None, device: Any = None
) -> Any:
    """Axial RoPE's frequencies: one RoPE series per position axis.

    Axial RoPE's frequencies: each axis its own RoPE series over its 2·s_a features,
    θ = (base^(-2j/(2 s_a)), j < s_a) for each axis in turn (Heo et al. 2024, eq. 12: with two
    axes of D/4 pairs, θ_j = base^(-4j/D)). Float64 in ``xp`` (default NumPy).

    Shapes: returns (P,), P = Σ s_a.
    Raises: TypeError/ValueError for invalid ``sections`` (``check_sections``) or ``base``.
    """
    xp = np_xp if xp is None else xp
    series = [
        rope_inv_freq(2 * s, base=base, xp=xp, device=device) for s in check_sections(sections)
    ]
    return xp.concat(series)


def axis_angles(pos: Any, inv_freq: Any, axes_of_pairs: Any) -> Any:
    """The angle of each rotary pair from its own axis's coordinate.

    Angles pos[a(p)]·θ_p in float64 (float32: JAX without x64): each pair turns by its own
    axis's coordinate, as ``angles`` turns it by the 1-D position.

    Shapes: pos (..., A) integer; inv_freq (P,); axes_of_pairs (P,) integer (``pair_axes``)
    -> (..., P).
    Raises: ValueError for a coordinate outside [-2^40, 2^40] (``angles``' range).
    Paper: Heo et al. 2024, arXiv:2403.13298 (axial RoPE); Wang et al. 2024, arXiv:2409.12191
    (M-RoPE).
    """
    check_position_range(pos, ANGLE_POSITION_LIMIT)
    xp = namespace(pos, inv_freq)
    wide = widest_float(xp)
    per_pair = xp.take(pos, axes_of_pairs, axis=pos.ndim - 1)  # (..., P)
    return xp.astype(per_pair, wide) * xp.astype(inv_freq, wide)


def mixed_inv_freq(
    head_dim: int, phases: Any, *, base: float = 10.0, xp: ModuleType | None = None
) -> Any:
    """RoPE-Mixed's initial per-head frequencies (``init_2d_freqs``).

    RoPE-Mixed's initial frequencies (Heo et al. 2024, sec. 3.3, their ``init_2d_freqs``):
    per head h with phase φ_h, the first P/2 pairs turn along the direction φ_h and the rest
    along φ_h + π/2, with magnitudes θ_j = base^(-4j/D):

        F[h, x] = (θ cos φ_h, θ cos(φ_h + π/2)),  F[h, y] = (θ sin φ_h, θ sin(φ_h + π/2)).

    Shapes: phases (H,) -> (H, 2, P) float64 (P = D/2; axes (y, x) = (row, column) as
    positions hold them).
    Raises: ValueError unless head_dim is a positive multiple of 4.
    """
    check_positive_int(head_dim, "head_dim")
    if head_dim % 4:
        raise ValueError(f"rope_mixed needs head_dim divisible by 4, got {head_dim}")
    xp = namespace(phases) if xp is None else xp
    wide = widest_float(xp)
    mag = rope_inv_freq(head_dim // 2, base=base, xp=xp, device=device_of(phases))  # (P/2,)
    phi = xp.astype(phases, wide)[:, None]  # (H, 1)
    fx = xp.concat([mag * xp.cos(phi), mag * xp.cos(phi + math.pi / 2)], axis=-1)  # (H, P)
    fy = xp.concat([mag * xp.sin(phi), mag * xp.sin(phi + math.pi / 2)], axis=-1)  # (H, P)
    return xp.stack([fy, fx], axis=1)  # (H, 2, P): axis 0 the row y, axis 1 the column x


def mixed_angles(pos: Any, freqs: Any) -> Any:
    """RoPE-Mixed's angles Σ_a pos_a·F[h, a, p].

    RoPE-Mixed angles Σ_a pos_a·F[h, a, p] (Heo et al. 2024, eq. 14), in the wider of
    float64 (float32: JAX without x64) and the frequencies' dtype.

    Shapes: pos (..., T, A) integer; freqs (H, A, P) -> (..., H, T, P).
    Raises: ValueError for a coordinate outside [-2^40, 2^40] (``angles``' range).
    """
    check_position_range(pos, ANGLE_POSITION_LIMIT)
    xp = namespace(pos, freqs)
    wide = xp.result_type(widest_float(xp), freqs.dtype)
    return xp.matmul(xp.astype(pos, wide)[..., None, :, :], xp.astype(freqs, wide))
