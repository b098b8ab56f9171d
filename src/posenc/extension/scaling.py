"""Context extension for RoPE: pure functions from default frequencies to scaled ones.

Each method maps the default inverse frequencies θ_i = base^(-2i/d), i = 0 .. P - 1 (P = d/2,
d the rotated width) and its parameters to ``Scaled(inv_freq, attention_scaling)``: the new
frequencies, and the factor that multiplies cos and sin (so q·k by its square). The functions
run in the dtype of ``inv_freq`` (callers pass float64) on NumPy or torch arrays. The formulas
and defaults follow Hugging Face transformers' ``modeling_rope_utils`` (pinned in the tests).

L below is the pretraining context ``original_max_position_embeddings``; s the ``factor``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from array_api_compat import device as array_device

from ..functional._xp import clip, namespace

__all__ = ["METHODS", "Scaled", "dynamic", "linear", "llama3", "longrope", "ntk", "yarn"]


class Scaled(NamedTuple):
    """Scaled frequencies (P,) and the factor applied to cos/sin (1.0 when unused)."""

    inv_freq: Any
    attention_scaling: float


def _pair_index(inv_freq: Any) -> Any:
    """i = 0 .. P - 1 as floats of inv_freq's dtype and device. Shapes: (P,) -> (P,)."""
    xp = namespace(inv_freq)
    return xp.arange(inv_freq.shape[-1], dtype=inv_freq.dtype, device=array_device(inv_freq))


def linear(inv_freq: Any, *, factor: float) -> Scaled:
    """Position interpolation (Chen et al. 2023, arXiv:2306.15595): θ'_i = θ_i / s.

    Rotating position m by θ/s equals rotating m/s by θ: positions are squeezed into the
    pretraining range. Shapes: (P,) -> (P,).
    """
    return Scaled(inv_freq / factor, 1.0)


def ntk(inv_freq: Any, *, factor: float) -> Scaled:
    """NTK-aware scaling (bloc97 2023): base' = base · s^(d/(d-2)), i.e. θ'_i = θ_i · s^(-2i/(d-2)).

    The highest frequency (i = 0) is kept, the lowest (i = P - 1) divided by exactly s; only the
    base changes. Shapes: (P,) -> (P,).
    Raises: ValueError when P < 2 (d = 2 has no base to change).
    """
    P = inv_freq.shape[-1]
    if P < 2:
        raise ValueError(f"ntk scaling needs a rotated width d >= 4, got d = {2 * P}")
    return Scaled(inv_freq * factor ** (-_pair_index(inv_freq) / (P - 1)), 1.0)


def dynamic(
    inv_freq: Any, *, factor: float, original_max_position_embeddings: int, seq_len: int | None
) -> Scaled:
    """Dynamic NTK (emozilla 2023): NTK scaling by s' = s·T/L - (s - 1) = 1 + s·(T - L)/L.

    T = max(seq_len, L) is the current length: within the pretraining context s' = 1 (default
    frequencies); past it s' grows linearly with T. Shapes: (P,) -> (P,).
    """
    L = original_max_position_embeddings
    T = L if seq_len is None else max(int(seq_len), L)
    return ntk(inv_freq, factor=factor * T / L - (factor - 1))


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN attention temperature √(1/t) = 0.1·m·ln(s) + 1 for s > 1 (Peng et al. 2023, eq. 22)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn_ramp(inv_freq: Any, *, L: int, beta_fast: float, beta_slow: float, truncate: bool) -> Any:
    """Ramp (P,) from 0 (pairs turning > beta_fast times over L) to 1 (< beta_slow times).

    Pair i turns r_i = L·θ_i / 2π times over L; since ln θ_i is linear in i, the pair index
    where r = β is ln(L / 2πβ) / ln(θ_0 / θ_1) (fractional; floor/ceil when ``truncate``).
    """
    P = inv_freq.shape[-1]
    log_ratio = math.log(float(inv_freq[0]) / float(inv_freq[1]))  # 2·ln(base)/d

    def index_of(rotations: float) -> float:
        return math.log(L / (2 * math.pi * rotations)) / log_ratio

    low, high = index_of(beta_fast), index_of(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, 2 * P - 1)
    if low == high:
        high += 0.001  # one-step ramp; same singularity guard as transformers
    return clip((_pair_index(inv_freq) - low) / (high - low), 0.0, 1.0)


def yarn(
    inv_freq: Any,
    *,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    attention_factor: float | None = None,
    truncate: bool = True,
) -> Scaled:
    """YaRN (Peng et al. 2023, arXiv:2309.00071): NTK-by-parts plus an attention temperature.

    θ'_i = (1 - γ_i)·θ_i/s + γ_i·θ_i with γ_i = 1 for pairs turning more than ``beta_fast``
    times over L (kept) and 0 below ``beta_slow`` turns (interpolated, θ/s), linear in i between.
    attention_scaling = ``attention_factor`` if given, else mscale(s, mscale)/mscale(s,
    mscale_all_dim) when both are set and nonzero (DeepSeek), else 0.1·ln(s) + 1.
    Shapes: (P,) -> (P,). Raises: ValueError when P < 2 (no frequency ratio to ramp over).
    """
    P = inv_freq.shape[-1]
    if P < 2:
        raise ValueError(f"yarn scaling needs a rotated width d >= 4, got d = {2 * P}")
    ramp = _yarn_ramp(
        inv_freq,
        L=original_max_position_embeddings,
        beta_fast=beta_fast,
        beta_slow=beta_slow,
        truncate=truncate,
    )
    keep = 1.0 - ramp  # γ_i: 1 = extrapolate (unchanged), 0 = interpolate (θ/s)
    scaled = (inv_freq / factor) * (1.0 - keep) + inv_freq * keep
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(factor)
    return Scaled(scaled, float(attention_factor))


def longrope(
    inv_freq: Any,
    *,
    short_factor: Sequence[float],
    long_factor: Sequence[float],
    original_max_position_embeddings: int,
    factor: float,
    attention_factor: float | None = None,
    short_mscale: float | None = None,
    long_mscale: float | None = None,
    seq_len: int | None = None,
) -> Scaled:
    """LongRoPE (Ding et al. 2024, arXiv:2402.13753): searched factors λ_i, θ'_i = θ_i / λ_i.

    λ = ``long_factor`` when the current length ``seq_len`` exceeds L, else ``short_factor``.
    attention_scaling = ``long_mscale``/``short_mscale`` by the same rule when both are given
    (Phi-3.5-MoE), else ``attention_factor``, else √(1 + ln s / ln L) (1 when s <= 1).
    Shapes: (P,) -> (P,). Raises: ValueError when a factor list does not have P entries.
    """
    P = inv_freq.shape[-1]
    for key, values in (("short_factor", short_factor), ("long_factor", long_factor)):
        if len(values) != P:
            raise ValueError(
                f"longrope {key} must have one entry per rotated pair (rotary_dim / 2 = {P}), "
                f"got {len(values)}"
            )
    L = original_max_position_embeddings
    long = seq_len is not None and seq_len > L
    xp = namespace(inv_freq)
    lam = xp.asarray(
        list(long_factor if long else short_factor),
        dtype=inv_freq.dtype,
        device=array_device(inv_freq),
    )  # (P,)
    if short_mscale is not None and long_mscale is not None:
        attention_factor = long_mscale if long else short_mscale
    elif attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(L))
    return Scaled(inv_freq / lam, float(attention_factor))


def llama3(
    inv_freq: Any,
    *,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_position_embeddings: int,
) -> Scaled:
    """Llama 3.1 scaling (Meta 2024, arXiv:2407.21783): wavelength-banded interpolation.

    With λ_i = 2π/θ_i: λ_i < L/``high_freq_factor`` keeps θ_i; λ_i > L/``low_freq_factor``
    uses θ_i/s; in between θ'_i = (1 - a_i)·θ_i/s + a_i·θ_i, a_i = (L/λ_i - low)/(high - low).
    With low = high (Llama 4 Scout: 1 and 1) there is no band between: θ_i/s past L/low.
    Shapes: (P,) -> (P,).
    """
    xp = namespace(inv_freq)
    L = original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq  # (P,)
    out = xp.where(wavelen > L / low_freq_factor, inv_freq / factor, inv_freq)
    if high_freq_factor == low_freq_factor:
        return Scaled(out, 1.0)
    smooth = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
    medium = (wavelen >= L / high_freq_factor) & (wavelen <= L / low_freq_factor)
    return Scaled(xp.where(medium, blended, out), 1.0)


#: Method name -> pure function. Dynamic methods take the current ``seq_len`` keyword.
METHODS: dict[str, Callable[..., Scaled]] = {
    "linear": linear,
    "ntk": ntk,
    "dynamic": dynamic,
    "yarn": yarn,
    "longrope": longrope,
    "llama3": llama3,
}
