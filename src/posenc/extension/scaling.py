"""Context extension for RoPE: pure functions from default frequencies to scaled ones.

Each method maps the default inverse frequencies θ_i = base^(-2i/d), i = 0 .. P - 1 (P = d/2,
d the rotated width) and its parameters to ``Scaled(inv_freq, attention_scaling)``: the new
frequencies, and the factor that multiplies cos and sin (so q·k by its square). The functions
run in the dtype of ``inv_freq`` (callers pass float64) on NumPy or torch arrays. The formulas
and defaults follow Hugging Face transformers' ``modeling_rope_utils`` (pinned in the tests).

L below is the pretraining context ``original_max_position_embeddings``; s the ``factor``.
Each function rejects parameters that would make NaN, inf or a division by zero (a factor
<= 0, a length < 1, ...) with a TypeError/ValueError naming the key; the configs
(``config.py``, same checks) also require s >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from array_api_compat import device as array_device

from ..functional._xp import clip, namespace

__all__ = [
    "METHODS",
    "Scaled",
    "dynamic",
    "linear",
    "llama3",
    "longrope",
    "ntk",
    "yarn",
    "yarn_mscale",
]


# Checks shared with the configs (``config.py``): each raises naming the key.


def check_number(value: Any, key: str, *, minimum: float = 0.0, inclusive: bool = False) -> None:
    """Raise unless ``value`` is a finite real number > ``minimum`` (>= if ``inclusive``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"scaling key {key!r} must be a number, got {type(value).__name__}")
    ok = value >= minimum if inclusive else value > minimum
    if not ok or not math.isfinite(value):
        bound = ">=" if inclusive else ">"
        raise ValueError(
            f"scaling key {key!r} must be a finite number {bound} {minimum}, got {value}"
        )


def check_factor(value: Any, key: str = "factor") -> None:
    """Context extension stretches: a factor < 1 would shrink the context (never intended)."""
    check_number(value, key, minimum=1.0, inclusive=True)


def check_length(value: Any, key: str = "original_max_position_embeddings") -> None:
    """Raise unless ``value`` is a positive int (a context length)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"scaling key {key!r} must be a positive integer length, got {value!r}")


def check_optional(value: Any, key: str, *, inclusive: bool = False) -> None:
    """``check_number`` unless ``value`` is None."""
    if value is not None:
        check_number(value, key, inclusive=inclusive)


def check_betas(beta_fast: Any, beta_slow: Any) -> None:
    """YaRN's ramp bounds: numbers > 0 with beta_fast > beta_slow."""
    check_number(beta_slow, "beta_slow")
    check_number(beta_fast, "beta_fast")
    if beta_fast <= beta_slow:
        raise ValueError(
            "scaling key 'beta_fast' must be > 'beta_slow' (turns where the ramp ends/starts), "
            f"got beta_fast={beta_fast}, beta_slow={beta_slow}"
        )


def check_bands(low_freq_factor: Any, high_freq_factor: Any) -> None:
    """Llama 3's band factors: numbers > 0 with low <= high (equal: no band, Llama 4 Scout)."""
    check_number(low_freq_factor, "low_freq_factor")
    check_number(high_freq_factor, "high_freq_factor")
    if low_freq_factor > high_freq_factor:
        raise ValueError(
            "scaling key 'low_freq_factor' must be <= 'high_freq_factor', got "
            f"low_freq_factor={low_freq_factor}, high_freq_factor={high_freq_factor}"
        )


def check_factor_list(values: Any, key: str) -> tuple[float, ...]:
    """LongRoPE's per-pair factors: a list of numbers > 0, returned as a tuple of floats."""
    if isinstance(values, str | bytes) or not hasattr(values, "__len__"):
        raise TypeError(f"scaling key {key!r} must be a list of numbers, got {values!r}")
    for v in values:
        check_number(v, key)
    return tuple(float(v) for v in values)


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
    Raises: TypeError/ValueError unless factor is a finite number > 0.
    """
    check_number(factor, "factor")
    return Scaled(inv_freq / factor, 1.0)


def ntk(inv_freq: Any, *, factor: float) -> Scaled:
    """NTK-aware scaling (bloc97 2023): base' = base · s^(d/(d-2)), i.e. θ'_i = θ_i · s^(-2i/(d-2)).

    The highest frequency (i = 0) is kept, the lowest (i = P - 1) divided by exactly s; only the
    base changes. Shapes: (P,) -> (P,).
    Raises: ValueError when P < 2 (d = 2 has no base to change); TypeError/ValueError
    unless factor is a finite number > 0.
    """
    check_number(factor, "factor")
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
    Raises: TypeError/ValueError for a factor <= 0 or a length that is not a positive int.
    """
    check_number(factor, "factor")
    check_length(original_max_position_embeddings)
    L = original_max_position_embeddings
    T = L if seq_len is None else max(int(seq_len), L)
    return ntk(inv_freq, factor=factor * T / L - (factor - 1))


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
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
    Shapes: (P,) -> (P,). Raises: ValueError when P < 2 (no frequency ratio to ramp over);
    TypeError/ValueError for a factor, beta or scale that is not a finite number > 0 (mscales
    >= 0), beta_fast <= beta_slow, or a length that is not a positive int.
    """
    check_number(factor, "factor")
    check_length(original_max_position_embeddings)
    check_betas(beta_fast, beta_slow)
    check_optional(mscale, "mscale", inclusive=True)  # 0 (DeepSeek's default) counts as unset
    check_optional(mscale_all_dim, "mscale_all_dim", inclusive=True)
    check_optional(attention_factor, "attention_factor")
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
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)
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
    Shapes: (P,) -> (P,). Raises: ValueError when a factor list does not have P entries, or the
    default attention factor would divide by ln L = 0 (L = 1); TypeError/ValueError for a
    factor or scale that is not a finite number > 0, or a length that is not a positive int.
    """
    P = inv_freq.shape[-1]
    check_number(factor, "factor")
    check_length(original_max_position_embeddings)
    check_optional(attention_factor, "attention_factor")
    check_optional(short_mscale, "short_mscale")
    check_optional(long_mscale, "long_mscale")
    for key, values in (("short_factor", short_factor), ("long_factor", long_factor)):
        check_factor_list(values, key)
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
    elif attention_factor is None and factor > 1 and L < 2:
        raise ValueError(
            "longrope's default attention factor sqrt(1 + ln(factor) / ln(L)) needs "
            f"original_max_position_embeddings L >= 2, got {L}; give attention_factor"
        )
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
    Shapes: (P,) -> (P,). Raises: TypeError/ValueError for a factor that is not a finite number
    > 0, low_freq_factor > high_freq_factor, or a length that is not a positive int.
    """
    check_number(factor, "factor")
    check_bands(low_freq_factor, high_freq_factor)
    check_length(original_max_position_embeddings)
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
