"""Checks on score-bias encodings: ALiBi slopes and linearity (Press et al. 2022,
arXiv:2108.12409), T5 buckets (Raffel et al. 2020, arXiv:1910.10683), distance penalties that
never reward distance (ALiBi, Kerple: Chi et al. 2022, arXiv:2205.09921), FIRE's interpolated
distance in [0, 1] (Li et al. 2023, arXiv:2310.04418)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .. import functional as PF
from ..encodings.base import PositionalEncoding
from .result import check, relative_error
from .subjects import has_bias

#: Encodings whose bias, by construction, falls as |i - j| grows (per head, at init too).
DECAYING_BIASES = ("alibi", "kerple")


def _bias(pe: PositionalEncoding, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    out = pe.bias(q_pos, k_pos)
    if out is None:
        raise ValueError(f"encoding {pe.name!r} returned no bias")
    return out[0].double()  # (H, Tq, Tk)


def _alibi(pe: PositionalEncoding) -> bool:
    return has_bias(pe) and isinstance(getattr(pe, "slopes", None), Tensor)


@check("alibi_slopes_geometric", applies=_alibi, tolerance=1e-6)
def alibi_slopes_geometric(pe: PositionalEncoding) -> tuple[float, str]:
    """Slopes are the published series: m_1 = 2^(-8/H), then ratio 2^(-8/H) head to head
    (H a power of two; otherwise the interleaved rule of functional.alibi_slopes)."""
    slopes: Tensor = getattr(pe, "slopes").double()  # noqa: B009  (a buffer, typed Any here)
    H = int(slopes.shape[0])
    published = PF.alibi_slopes(H, xp=PF.torch_xp)
    M = 1 << (H.bit_length() - 1)  # the leading power-of-two block is geometric
    ratio = 2.0 ** (-8.0 / M)
    errs = [float((slopes[0] - ratio).abs())]
    errs += [float((slopes[1:M] / slopes[: M - 1] - ratio).abs().max())] if M > 1 else []
    errs.append(float((slopes - published).abs().max()))
    return max(errs), (
        f"H={H}: slopes {[round(float(s), 5) for s in slopes]}, expected first term and ratio "
        f"2^(-8/{M}) = {ratio:.5f}"
    )


@check("alibi_bias_linear", applies=_alibi, tolerance=1e-6)
def alibi_bias_linear(pe: PositionalEncoding) -> tuple[float, str]:
    """The bias is the head's slope times the distance: b_h(i, j) = -m_h·(i - j) (|i - j| for
    the bidirectional form), at any absolute position."""
    q_pos, k_pos = torch.arange(500, 564), torch.arange(0, 564, 7)
    bias = _bias(pe, q_pos, k_pos)  # (H, Tq, Tk)
    offset = PF.relative_offsets(q_pos, k_pos).double()  # (Tq, Tk)
    if getattr(pe, "bidirectional", False):
        offset = offset.abs()
    expected = -getattr(pe, "slopes").double()[:, None, None] * offset  # noqa: B009
    err = relative_error(bias, expected)
    return err, f"64 queries x 81 keys, offsets -63..563: max relative deviation {err:.1e}"


def _bias_with(*attrs: str) -> Callable[[PositionalEncoding], bool]:
    """Predicate: an encoding with a score bias and every attribute in ``attrs``."""
    return lambda pe: has_bias(pe) and all(hasattr(pe, a) for a in attrs)


@check(
    "t5_buckets_monotone_clamped",
    applies=_bias_with("buckets", "num_buckets", "max_distance"),
    tolerance=0.0,
)
def t5_buckets_monotone_clamped(pe: PositionalEncoding) -> tuple[float, str]:
    """Buckets never decrease with |distance| (each direction), stay below num_buckets, and
    are one shared bucket from max_distance on. Error = number of violations."""
    t5: Any = pe
    far = 4 * t5.max_distance
    q_pos, k_pos = torch.tensor([far]), torch.arange(0, 2 * far + 1)
    buckets = t5.buckets(q_pos, k_pos)[0].long()  # (Tk,)
    before, after = buckets[: far + 1].flip(0), buckets[far:]  # by |distance| 0..far
    bad = 0
    for side in (before, after):
        bad += int((side[1:] < side[:-1]).sum())  # a decrease
        bad += int((side[t5.max_distance :] != side[-1]).sum())  # one bucket past the clamp
    bad += int(((buckets < 0) | (buckets >= t5.num_buckets)).sum())
    return float(bad), (
        f"distances 0..{far} each way: buckets {before[:6].tolist()}..{before[-1].item()} "
        f"(past keys), {after[:6].tolist()}..{after[-1].item()} (future keys); {bad} violations"
    )


@check(
    "bias_decays_with_distance",
    applies=lambda pe: has_bias(pe) and pe.name in DECAYING_BIASES,
    tolerance=0.0,
)
def bias_decays_with_distance(pe: PositionalEncoding) -> tuple[float, str]:
    """Per head, the bias never rises as the key moves further into the past: b(i, i - d) is
    non-increasing in d, b(i, i) = 0. Error = largest rise."""
    q_pos, k_pos = torch.tensor([300]), torch.arange(300, -1, -1)  # distances 0..300
    bias = _bias(pe, q_pos, k_pos)[:, 0]  # (H, d)
    rise = float((bias[:, 1:] - bias[:, :-1]).clamp_min(0).max())
    rise = max(rise, float(bias[:, 0].abs().max()))
    far = ", ".join(f"{float(b):.2f}" for b in bias[:, -1])
    return rise, f"distances 0..300: bias at 300 per head [{far}]; largest rise {rise:.1e}"


@check("fire_distance_interpolated", applies=_bias_with("c", "threshold", "eps"), tolerance=1e-12)
def fire_distance_interpolated(pe: PositionalEncoding) -> tuple[float, str]:
    """FIRE's MLP input ψ(i - j)/ψ(max(L, i)) lies in [0, 1] and grows with i - j for every
    query i (progressive interpolation). Error = largest step down or excursion."""
    fire: Any = pe
    q_pos, k_pos = torch.tensor([5, 100, 511, 2000, 9000]), torch.arange(0, 9001)
    c, threshold = fire.c.double(), fire.threshold.double()
    x = PF.fire_distance(q_pos, k_pos, c, threshold, eps=fire.eps)  # (Tq, Tk)
    mask = PF.relative_offsets(q_pos, k_pos) >= 0  # causal pairs
    errs = [float((x[mask] - 1).clamp_min(0).max()), float((-x[mask]).clamp_min(0).max())]
    for row, i in zip(x, q_pos.tolist(), strict=True):
        by_distance = row[: i + 1].flip(0)  # distance 0..i
        errs.append(float((by_distance[:-1] - by_distance[1:]).clamp_min(0).max()))
    top = float(x[mask].max())
    return max(errs), f"queries 5..9000, causal keys: range [0, {top:.4f}], error {max(errs):.1e}"
