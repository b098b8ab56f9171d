"""FIRE: functional interpolation for relative positions (Li et al. 2023, arXiv:2310.04418)."""

from __future__ import annotations

from typing import Any

from ._xp import device_of, namespace
from .relative import relative_offsets


def fire_psi(x: Any, c: Any) -> Any:
    """FIRE's monotone transform ψ(x) = log(|c·x| + 1).

    FIRE's monotone transform ψ(x) = log(|c·x| + 1) (the paper's ψ(x) = log(cx + 1), c > 0;
    the absolute value as in its reference code keeps negative offsets and c finite).

    Shapes: x (...,) float, c scalar or 0-d array -> (...,).
    Paper: Li et al. 2023, arXiv:2310.04418.
    """
    xp = namespace(x)
    return xp.log1p(xp.abs(c * x))


def fire_distance(
    q_pos: Any,
    k_pos: Any,
    c: Any,
    threshold: Any,
    *,
    eps: float = 1e-6,
    bidirectional: bool = False,
) -> Any:
    """Progressively interpolated distance ψ(i - j) / (ψ(max(L, i)) + eps), FIRE's MLP input.

    i is the query's position, j the key's, L the learnable ``threshold``: queries before L
    share the normaliser ψ(L), later ones map all their keys into [0, 1] (Li et al. 2023,
    progressive interpolation, as in the paper's appendix pseudocode). The paper defines it for
    causal attention (j <= i). ``bidirectional=True`` is posenc's encoder form
    ψ(|i - j|) / (ψ(max(L, i, j)) + eps): the same on every pair a decoder sees, symmetric in
    i and j, and in [0, 1] on every pair (the causal normaliser puts a key far right of an early
    query above 1 once positions pass L).
    ``c`` and ``threshold`` are 0-d float arrays (the arithmetic runs in their dtype).
    Shapes: q_pos (..., Tq), k_pos (..., Tk) integer -> (..., Tq, Tk) in [0, 1] for |i - j| <= i
    (bidirectional: every pair).
    """
    xp = namespace(q_pos, k_pos, c, threshold)
    dtype = xp.result_type(c.dtype, threshold.dtype)
    relative = relative_offsets(q_pos, k_pos)  # (..., Tq, Tk) integer
    if bidirectional:  # max(i, j) = i - min(i - j, 0)
        later = q_pos[..., :, None] - xp.minimum(relative, xp.zeros_like(relative))
        normaliser = fire_normaliser(later, c, threshold, eps=eps)  # (..., Tq, Tk)
    else:
        normaliser = fire_normaliser(q_pos, c, threshold, eps=eps)[..., :, None]  # (..., Tq, 1)
    return fire_psi(xp.astype(relative, dtype), c) / normaliser


def fire_normaliser(q_pos: Any, c: Any, threshold: Any, *, eps: float = 1e-6) -> Any:
    """The denominator of ``fire_distance``, ψ(max(L, i)) + eps, per query position i.

    Shapes: q_pos (...,) integer; c, threshold 0-d float arrays -> (...,) in their dtype.
    Paper: Li et al. 2023, arXiv:2310.04418.
    """
    xp = namespace(q_pos, c, threshold)
    i = xp.astype(q_pos, xp.result_type(c.dtype, threshold.dtype))
    return fire_psi(xp.maximum(i, threshold), c) + eps


def fire_mlp_pieces(w1: Any, b1: Any, w2: Any, b2: Any) -> tuple[Any, Any, Any]:
    """FIRE's MLP as the piecewise-linear function it is: kinks, slopes, intercepts.

    FIRE's MLP f(x) = w2 · relu(w1 x + b1) + b2 of a scalar x as the piecewise-linear function
    it is: unit k bends at -b1_k / w1_k, so between sorted kinks f is one line per head.

    Shapes: w1, b1 (hidden,), w2 (H, hidden), b2 (H,) -> kinks (hidden,) ascending (constant
    units, w1_k = 0, sort last as +inf), slopes and intercepts (H, hidden + 1) with
    f(x) = slopes[:, m] x + intercepts[:, m] on piece m = #kinks below x (``fire_mlp``).
    Differentiable in all four parameters (the piece bookkeeping is integer).
    Paper: Li et al. 2023, arXiv:2310.04418.
    """
    xp = namespace(w1, b1, w2, b2)
    flat = w1 == 0
    kinks = xp.where(flat, xp.inf, -b1 / xp.where(flat, xp.ones_like(w1), w1))  # (hidden,)
    order = xp.argsort(kinks, stable=True)
    rank = xp.argsort(order, stable=True)  # position of each unit's kink in sorted order
    m = xp.arange(w1.shape[0] + 1, device=device_of(w1))[:, None]  # (hidden + 1, 1): piece index
    on = ((w1 > 0) & (rank < m)) | ((w1 < 0) & (rank >= m)) | (flat & (b1 > 0))
    on = xp.astype(on, w1.dtype)  # (hidden + 1, hidden): units active on piece m
    slopes = w2 @ xp.matrix_transpose(on * w1)  # (H, hidden + 1)
    intercepts = w2 @ xp.matrix_transpose(on * b1) + b2[:, None]
    return xp.take(kinks, order), slopes, intercepts


def fire_mlp(x: Any, kinks: Any, slopes: Any, intercepts: Any) -> Any:
    """FIRE's MLP f(x) per head, evaluated piece by piece.

    f(x) per head from ``fire_mlp_pieces``: one searchsorted and two gathers per entry
    instead of a ``hidden``-wide activation. Shapes: x (...,) -> (H, ...).
    Paper: Li et al. 2023, arXiv:2310.04418.
    """
    xp = namespace(x, kinks, slopes, intercepts)
    flat_x = xp.reshape(x, (-1,))
    piece = xp.searchsorted(kinks, flat_x)  # (N,)
    out = xp.take(slopes, piece, axis=1) * flat_x + xp.take(intercepts, piece, axis=1)
    return xp.reshape(out, (slopes.shape[0], *x.shape))
