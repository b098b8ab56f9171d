"""Checks on rotary encodings (Su et al. 2021, arXiv:2104.09864): rotations preserve norms,
scores depend on n - m only, and the "half" and "interleaved" layouts agree up to a feature
permutation."""

from __future__ import annotations

import copy

import torch
from torch import Tensor

from ..encodings.base import PositionalEncoding
from .result import check
from .subjects import head_shape, is_rotary, length_dependent

#: Rotary encodings that rescale on purpose, with the reason (no norm check for them).
NOT_ORTHOGONAL = {"xpos": "xPos scales q by ζ^m and k by ζ^-n (Sun et al. 2022)"}


def _qk(pe: PositionalEncoding, T: int, seed: int) -> tuple[Tensor, Tensor]:
    """Random float64 q, k (B, H, T, D) in ``pe``'s own head shape."""
    H, D = head_shape(pe)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, T, D, generator=gen, dtype=torch.float64)
    return q, torch.randn(1, H, T, D, generator=gen, dtype=torch.float64)


def _positions(T: int, seed: int, high: int = 10_000) -> Tensor:
    return torch.randint(0, high, (T,), generator=torch.Generator().manual_seed(seed))


@check(
    "rotation_norm_preserved",
    applies=lambda pe: is_rotary(pe) and pe.name not in NOT_ORTHOGONAL,
    tolerance=1e-12,
)
def rotation_norm_preserved(pe: PositionalEncoding) -> tuple[float, str]:
    """A rotation keeps lengths: ||R_m q|| = ||R_0 q|| (= ||q|| for RoPE) at every m."""
    q, k = _qk(pe, 64, 0)
    pos = _positions(64, 1)
    with torch.no_grad():
        rq, rk = pe.rotate(q, k, pos, pos)
        q0, k0 = pe.rotate(q, k, torch.zeros_like(pos), torch.zeros_like(pos))
    rel = torch.cat([rq.norm(dim=-1) / q0.norm(dim=-1), rk.norm(dim=-1) / k0.norm(dim=-1)]) - 1
    err = float(rel.abs().max())
    return err, f"64 positions < 10^4: max | ||R_m x|| / ||R_0 x|| - 1 | = {err:.1e}"


@check(
    "rotary_relative",
    applies=lambda pe: is_rotary(pe) and not length_dependent(pe),
    tolerance=1e-9,
)
def rotary_relative(pe: PositionalEncoding) -> tuple[float, str]:
    """<R_m q, R_n k> = <q, R_(n-m) k>: the score depends on the offset only."""
    q, k = _qk(pe, 64, 2)
    m = _positions(64, 3)
    n = m + _positions(64, 4, high=500)  # n >= m
    with torch.no_grad():
        rq, rk = pe.rotate(q, k, m, n)
        q0, rk0 = pe.rotate(q, k, torch.zeros_like(m), n - m)
    lhs, rhs = (rq * rk).sum(-1), (q0 * rk0).sum(-1)  # (1, H, T) pairwise scores
    err = float(((lhs - rhs).abs() / (1 + rhs.abs())).max())
    return err, f"64 pairs, m < 10^4, 0 <= n - m < 500: max relative score diff {err:.1e}"


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
    pos = _positions(32, 6)
    with torch.no_grad():
        iq, ik = inter.rotate(q, k, pos, pos)
        hq, hk = half.rotate(q[..., p], k[..., p], pos, pos)
    err = max(float((hq - iq[..., p]).abs().max()), float((hk - ik[..., p]).abs().max()))
    return err, f"rotary_dim {rot} of {D}, 32 positions: max diff {err:.1e}"
