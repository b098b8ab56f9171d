"""CoPE: contextual position encoding (Golovneva et al. 2024, arXiv:2405.18719)."""

from __future__ import annotations

from typing import Any

import torch

from .._validate import check_positive_int
from ._xp import clip, cumsum_last, namespace, take_along_last, widest_int


def cope_positions(logits: Any, *, n_positions: int) -> Any:
    """Contextual positions p_ij = Σ_(t=j..i) σ(z_it), clamped to n_positions - 1 (eq. 3-4).

    z are the masked attention logits: a masked key has z = -inf, so its gate σ(z) is 0 and
    keys after the query add nothing. The sum over t >= j is a cumulative sum of the flipped
    row, as in the paper's code.
    Shapes: logits (..., Tq, Tk) -> (..., Tq, Tk) in [0, n_positions - 1].
    Raises: ValueError for n_positions < 2.
    Paper: Golovneva et al. 2024, arXiv:2405.18719.
    """
    check_positive_int(n_positions, "n_positions", minimum=2)
    xp = namespace(logits)
    gates = _sigmoid(logits, xp)  # σ(z), 0 where z = -inf
    from_j = xp.flip(cumsum_last(xp.flip(gates, axis=-1)), axis=-1)
    return clip(from_j, high=float(n_positions - 1))


def cope_interpolate(positions: Any, per_position: Any) -> Any:
    """Linear interpolation of integer-position values at fractional positions (eq. 5):

    out_ij = (1 - w) e[floor p_ij] + w e[ceil p_ij], w = p_ij - floor p_ij, with
    e = ``per_position`` (q_i · e[p] for every integer p).
    Shapes: positions (..., Tq, Tk); per_position (..., Tq, P) -> (..., Tq, Tk).
    Paper: Golovneva et al. 2024, arXiv:2405.18719.
    """
    xp = namespace(positions, per_position)
    floor = xp.floor(positions)
    w = positions - floor  # (..., Tq, Tk)
    lo = xp.astype(floor, widest_int(xp))
    hi = xp.astype(xp.ceil(positions), widest_int(xp))
    e_lo = take_along_last(per_position, lo)
    e_hi = take_along_last(per_position, hi)
    return e_lo * (1.0 - w) + e_hi * w


def _sigmoid(z: Any, xp: Any) -> Any:
    """σ(z) without overflow, with finite gradients at z = -inf (each branch sees safe inputs;
    torch's own sigmoid already is, in one pass)."""
    if isinstance(z, torch.Tensor):
        return torch.sigmoid(z)
    nonneg = z >= 0
    z_pos, z_neg = xp.where(nonneg, z, 0.0), xp.where(nonneg, 0.0, z)
    e = xp.exp(z_neg)  # in [0, 1]
    return xp.where(nonneg, 1.0 / (1.0 + xp.exp(-z_pos)), e / (1.0 + e))
