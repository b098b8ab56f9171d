"""ALiBi: attention with linear biases (Press et al. 2022, arXiv:2108.12409)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .._validate import check_positive_int
from ._xp import namespace, np_xp, widest_float
from .relative import relative_offsets


def alibi_slopes(n_heads: int, *, xp: ModuleType | None = None, device: Any = None) -> Any:
    """Per-head slopes m_h = 2^(-8h/H), h = 1..H: a geometric series from 2^(-8/H) to 2^-8.

    For H not a power of two, the rule of the official code (ofirpress/attention_with_linear_
    biases, also BLOOM and x-transformers): the slopes of the closest lower power of two M,
    then every other slope of 2M (2^(-8(2j+1)/2M), j = 0..H-M-1), so the series is not monotone.
    Computed in float64 in namespace ``xp`` (default NumPy).
    Shapes: returns (H,).
    Raises: TypeError/ValueError unless ``n_heads`` is an int >= 1.
    Paper: Press et al. 2022, arXiv:2108.12409.
    """
    check_positive_int(n_heads, "n_heads")
    xp = np_xp if xp is None else xp
    m = 1 << (n_heads.bit_length() - 1)  # closest power of two <= H
    wide = widest_float(xp)  # float64 (float32 on JAX without x64)
    main = xp.arange(1, m + 1, dtype=wide, device=device) * (8.0 / m)  # (M,)
    extra = xp.arange(0, n_heads - m, dtype=wide, device=device) * (8.0 / m) + 4.0 / m
    return 2.0 ** -xp.concat([main, extra])  # (H,)


def alibi_bias(q_pos: Any, k_pos: Any, slopes: Any, *, bidirectional: bool = False) -> Any:
    """Linear distance penalty -m_h·(i - j) for query position i and key position j.

    The causal form keeps the sign (on future keys, masked by attention, it is positive and
    finite; each row equals BLOOM's m_h·j up to a per-row constant, which softmax ignores);
    tutorials that print -m·max(i - j, 0) write 0 there instead: the same scores once masked
    (``posenc.plots.bias_matrix(pe, masked=0.0)`` prints their matrix).
    In an encoder the sign would make it a bias toward later keys (+m_h·j per row), so
    ``bidirectional=True`` is the encoder form -m_h·|i - j|, as bidirectional ALiBi models
    use it (MosaicBERT, x-transformers' ``AlibiPositionalBias``); on keys j <= i both agree.
    The result has ``slopes``' dtype (int offsets are exact in float32 below 2^24).
    Shapes: q_pos (..., Tq), k_pos (..., Tk) integer, slopes (H,) -> (..., H, Tq, Tk).
    Paper: Press et al. 2022, arXiv:2108.12409.
    """
    xp = namespace(q_pos, k_pos, slopes)
    offsets = xp.astype(relative_offsets(q_pos, k_pos), slopes.dtype)  # (..., Tq, Tk)
    if bidirectional:
        offsets = xp.abs(offsets)
    return -slopes[:, None, None] * offsets[..., None, :, :]  # (..., H, Tq, Tk)
