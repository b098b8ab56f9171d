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
    Paper: Vaswani et al. 2017, arXiv:1706.03762, sec. 3.5.
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


def shift_matrix(
    k: int, dim: int, *, base: float = 10000.0, xp: ModuleType | None = None, device: Any = None
) -> Any:
    """M_k, the linear map that shifts Vaswani's table by k positions: PE[p + k] = M_k PE[p].

    Per pair (2i, 2i + 1) at θ_i = base^(-2i/dim), by sin(a + b) and cos(a + b):

        [sin((p + k)θ_i)]   [ cos kθ_i   sin kθ_i] [sin pθ_i]
        [cos((p + k)θ_i)] = [-sin kθ_i   cos kθ_i] [cos pθ_i],

    so M_k is block-diagonal with these 2x2 rotations by -kθ_i (Vaswani et al. 2017,
    arXiv:1706.03762, sec. 3.5: "PE_(pos+k) can be represented as a linear function of
    PE_pos"), independent of p. An odd ``dim`` ends on a sine column without its cosine
    (``sinusoidal_table``): sin((p + k)θ) needs cos(pθ), which the table does not hold, so no
    linear map of PE[p] gives that column; M_k covers the dim - 1 paired columns,
    PE[p + k, :dim - 1] = M_k PE[p, :dim - 1]. Float64 in ``xp`` (default NumPy).

    Shapes: returns (2P, 2P), P = dim // 2 (dim rounded down to even).
    Raises: TypeError/ValueError for a ``k`` that is not an int, a ``dim`` < 2 or base <= 0.
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int (a shift in positions), got {type(k).__name__}")
    check_positive_int(dim, "dim", minimum=2)
    xp = np_xp if xp is None else xp
    P = dim // 2
    inv_freq = inv_freq_series(dim, base=base, xp=xp, device=device)[:P]  # (P,)
    ang = k * inv_freq  # (P,) float64
    cos, sin = xp.cos(ang), xp.sin(ang)
    blocks = xp.stack([xp.stack([cos, sin], axis=-1), xp.stack([-sin, cos], axis=-1)], axis=-2)
    eye = xp.eye(P, dtype=ang.dtype, device=device)  # (P, P)
    M = eye[:, None, :, None] * blocks[:, :, None, :]  # (P, 2, P, 2): M[i, a, j, b]
    return xp.reshape(M, (2 * P, 2 * P))
