"""Sinusoidal absolute position table (Vaswani et al. 2017, arXiv:1706.03762, sec. 3.5)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .._validate import check_positive_int
from ._xp import device_of, namespace, np_xp, widest_int
from .frequencies import angles, inv_freq_series


def sinusoidal_table(
    n_positions: Any, dim: int, *, base: float = 10000.0, xp: ModuleType | None = None
) -> Any:
    """Vaswani's table, sin and cos interleaved, one formula per column c = 0 .. dim-1:

    PE[p, 2i] = sin(p / base^(2i/dim)),  PE[p, 2i+1] = cos(p / base^(2i/dim)).

    An odd ``dim`` ends on a sine column, c = 2i = dim - 1, at θ = base^(-(dim-1)/dim), as the
    interleaved tables of XLM, Flaubert and DistilBERT (Hugging Face's
    ``create_sinusoidal_embeddings``) define it; fairseq and tensor2tensor, whose tables put
    all sines before all cosines, pad an odd width with a zero column instead.
    ``n_positions`` is an int N (positions 0..N-1, in namespace ``xp``, default NumPy) or an
    integer array of positions of any shape (its namespace is used). Computed in float64.
    Shapes: N -> (N, dim); pos (...,) -> (..., dim).
    Raises: ValueError for a ``dim`` < 1, a negative N, or base <= 0.
    """
    check_positive_int(dim, "dim")
    if isinstance(n_positions, int):
        if n_positions < 0:
            raise ValueError(f"n_positions must be >= 0, got {n_positions}")
        xp = np_xp if xp is None else xp
        pos = xp.arange(n_positions, dtype=widest_int(xp))
    else:
        pos = n_positions
        xp = namespace(pos)
    inv_freq = inv_freq_series(dim, base=base, xp=xp, device=device_of(pos))  # (ceil(dim/2),)
    ang = angles(pos, inv_freq)  # (..., P)
    table = xp.stack([xp.sin(ang), xp.cos(ang)], axis=-1)  # (..., P, 2)
    table = xp.reshape(table, (*ang.shape[:-1], 2 * ang.shape[-1]))  # sin at even, cos at odd
    return table if dim % 2 == 0 else table[..., :dim]  # (..., dim): odd widths end on a sine
