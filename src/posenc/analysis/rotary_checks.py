"""Checks on rotary encodings (Su et al. 2021, arXiv:2104.09864): rotations preserve norms,
scores depend on n - m only, the "half" and "interleaved" layouts agree up to a feature
permutation, and the long-term decay bound falls with distance (sec. 3.4.3). Grid encodings
(rope_2d, rope_3d, rope_mixed, mrope) are checked at grid positions: their scores depend on
the offset (Δy, Δx) (or (Δt, Δh, Δw)) only (Heo et al. 2024, arXiv:2403.13298, eq. 13)."""

from __future__ import annotations

import copy
import itertools
import math

import torch
from torch import Tensor

from .. import functional as PF
from ..encodings.base import PositionalEncoding
from .result import check, largest_rise, relative_error
from .subjects import head_shape, is_rotary, length_dependent, position_axes

#: Rotary encodings that rescale on purpose, with the reason (no norm check for them).
NOT_ORTHOGONAL = {"xpos": "xPos scales q by ζ^m and k by ζ^-n (Sun et al. 2022)"}


def _qk(pe: PositionalEncoding, T: int, seed: int) -> tuple[Tensor, Tensor]:
    """Random float64 q, k (B, H, T, D) in ``pe``'s own head shape."""
    H, D = head_shape(pe)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, T, D, generator=gen, dtype=torch.float64)
    return q, torch.randn(1, H, T, D, generator=gen, dtype=torch.float64)


def _positions(pe: PositionalEncoding, T: int, seed: int, high: int = 10_000) -> Tensor:
    """T random positions in [0, high): (T,), or (T, A) for an encoding of A axes."""
    A = position_axes(pe)
    shape = (T,) if A == 1 else (T, A)
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


@check(
    "rotation_norm_preserved",
    applies=lambda pe: is_rotary(pe) and pe.name not in NOT_ORTHOGONAL,
    tolerance=1e-12,
)
def rotation_norm_preserved(pe: PositionalEncoding) -> tuple[float, str]:
    """A rotation keeps lengths: ||R_m q|| = ||R_0 q|| (= ||q|| for RoPE) at every m (every
    grid position for grid encodings)."""
    q, k = _qk(pe, 64, 0)
    pos = _positions(pe, 64, 1)
    rq, rk = pe.rotate(q, k, pos, pos)
    q0, k0 = pe.rotate(q, k, torch.zeros_like(pos), torch.zeros_like(pos))
    rel = torch.cat([rq.norm(dim=-1) / q0.norm(dim=-1), rk.norm(dim=-1) / k0.norm(dim=-1)]) - 1
    err = float(rel.abs().max())
    where = "positions" if pos.ndim == 1 else f"grid positions ({pos.shape[1]} axes)"
    return err, f"64 {where} < 10^4: max | ||R_m x|| / ||R_0 x|| - 1 | = {err:.1e}"


@check(
    "rotary_relative",
    applies=lambda pe: is_rotary(pe) and not length_dependent(pe),
    tolerance=1e-9,
)
def rotary_relative(pe: PositionalEncoding) -> tuple[float, str]:
    """<R_m q, R_n k> = <q, R_(n-m) k>: the score depends on the offset only (on a grid, on
    the offset (Δy, Δx), or (Δt, Δh, Δw), only)."""
    q, k = _qk(pe, 64, 2)
    m = _positions(pe, 64, 3)
    n = m + _positions(pe, 64, 4, high=500)  # n >= m on every axis
    rq, rk = pe.rotate(q, k, m, n)
    q0, rk0 = pe.rotate(q, k, torch.zeros_like(m), n - m)
    lhs, rhs = (rq * rk).sum(-1), (q0 * rk0).sum(-1)  # (1, H, T) pairwise scores
    err = relative_error(lhs, rhs)
    axes = "" if m.ndim == 1 else f" on each of {m.shape[1]} axes"
    return err, f"64 pairs, m < 10^4, 0 <= n - m < 500{axes}: max relative score diff {err:.1e}"


def half_from_interleaved(dim: int) -> Tensor:
    """Index p with x_half = x_inter[..., p]: pair (2i, 2i+1) goes to (i, i + dim/2)."""
    return torch.cat([torch.arange(0, dim, 2), torch.arange(1, dim, 2)])


def _layout_applies(pe: PositionalEncoding) -> bool:
    return is_rotary(pe) and getattr(pe, "layout", None) in ("half", "interleaved")


@check("layouts_agree", applies=_layout_applies, tolerance=1e-12)
def layouts_agree(pe: PositionalEncoding) -> tuple[float, str]:
    """Layouts are one rotation in two feature orders: permute, rotate "half", permute back
    equals rotate "interleaved"."""
    half, inter = copy.deepcopy(pe), copy.deepcopy(pe)
    half.layout, inter.layout = "half", "interleaved"  # type: ignore[assignment]
    _, D = head_shape(pe)
    rot = getattr(pe, "rotary_dim", D)
    p = torch.cat([half_from_interleaved(rot), torch.arange(rot, D)])  # (D,)
    q, k = _qk(pe, 32, 5)
    pos = _positions(pe, 32, 6)
    iq, ik = inter.rotate(q, k, pos, pos)
    hq, hk = half.rotate(q[..., p], k[..., p], pos, pos)
    err = max(float((hq - iq[..., p]).abs().max()), float((hk - ik[..., p]).abs().max()))
    return err, f"rotary_dim {rot} of {D}, 32 positions: max diff {err:.1e}"


#: RoFormer's base, the one its decay bound is shown for (Su et al. 2021, sec. 3.4.3).
STANDARD_BASE = 10000.0


def rope_frequencies(pe: PositionalEncoding) -> Tensor | None:
    """The frequencies θ_i (P,) float64 that ``pe`` rotates its feature pairs by, read from the
    encoding (RoPE's ``frequencies()``, xPos's ``inv_freq``); None when it has no such pairs."""
    frequencies = getattr(pe, "frequencies", None)
    if callable(frequencies):
        return frequencies()[0].double()
    inv_freq = getattr(pe, "inv_freq", None)
    if isinstance(inv_freq, Tensor) and 2 * inv_freq.shape[-1] == getattr(pe, "rotary_dim", -1):
        return inv_freq.double()  # PoPE's inv_freq has one entry per feature: not pairs
    return None


def _standard_rope(pe: PositionalEncoding) -> bool:
    """A rotation by the paper's series (base 10000, no context extension, every pair turning:
    not p-RoPE's dropped frequencies), >= 4 pairs."""
    base = getattr(pe, "base", None)
    if not is_rotary(pe) or getattr(pe, "scaling", None) is not None:
        return False
    if not isinstance(base, int | float) or float(base) != STANDARD_BASE:
        return False
    inv_freq = rope_frequencies(pe)
    return inv_freq is not None and inv_freq.shape[-1] >= 4 and bool((inv_freq > 0).all())


def decay_bound(inv_freq: Tensor, n_distances: int) -> Tensor:
    """RoFormer's relative upper bound (1/P)·Σ_{j=1..P} |S_j|, S_j = Σ_{i<j} e^{i·r·θ_i}, at
    distances r = 0 .. n-1 (Su et al. 2021, eq. 37 and fig. 2). Shapes: (P,) -> (n,)."""
    ang = PF.angles(torch.arange(n_distances), inv_freq)  # (n, P) float64
    partial_sums = torch.polar(torch.ones_like(ang), ang).cumsum(-1)  # S_1 .. S_P: (n, P)
    return partial_sums.abs().mean(-1)


@check("rope_long_term_decay", applies=_standard_rope, tolerance=0.02)
def rope_long_term_decay(pe: PositionalEncoding) -> tuple[float, str]:
    """RoFormer's long-term decay (Su et al. 2021, sec. 3.4.3): for q = k = all ones the bound
    (1/P)·Σ_j |S_j|, S_j = Σ_{i<j} e^{i(m-n)θ_i}, falls with the distance m - n. Its means over
    [1, 16), [16, 64), [64, 256), ... (up to the slowest pair's half turn π/θ_min, at least 256)
    never rise by more than 2% of the bound at distance 0, and the last is at most 0.9 of the
    first. Error = largest rise + how far the last misses 0.9.

    Computed from the encoding's own θ_i; for base 10000 and >= 4 pairs only: context
    extensions and other bases reshape the series, and with few pairs (head_dim 8) their window
    means rise by up to 8% of the bound (NTK's base 63496: 0.54 -> 0.62), which the paper's
    bound does not promise otherwise."""
    inv_freq = rope_frequencies(pe)
    assert inv_freq is not None  # guaranteed by _standard_rope
    half_turn = math.pi / float(inv_freq.min())
    edges = [1, 16]
    while edges[-1] * 4 <= min(max(half_turn, 256.0), 2.0**20):
        edges.append(edges[-1] * 4)
    bound = decay_bound(inv_freq, edges[-1])  # (n,)
    at_zero = float(bound[0])  # = (P + 1) / 2: every phase aligned
    means = [float(bound[lo:hi].mean()) / at_zero for lo, hi in itertools.pairwise(edges)]
    rise = largest_rise(means)
    miss = max(0.0, means[-1] / means[0] - 0.9)
    windows = " ".join(f"[{lo},{hi})" for lo, hi in itertools.pairwise(edges))
    return rise + miss, (
        f"{inv_freq.shape[-1]} pairs, bound at 0 = {at_zero:.3f}; means / bound(0) over "
        f"{windows}: " + " ".join(f"{m:.3f}" for m in means) + f"; largest rise {rise:.3f}, "
        f"last / first {means[-1] / means[0]:.3f}"
    )
