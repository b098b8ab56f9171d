"""RoPE context-extension methods written from their papers, in float64 loops (no posenc).

Each returns (inv_freq as a list of P floats, attention scaling) from ``base`` and the rotated
width ``dim``. Where the papers leave a detail open, the choice of the Hugging Face
implementation is written out (noted per function).
"""

from __future__ import annotations

import math


def default(base: float, dim: int) -> list[float]:
    """θ_i = base^(-2i/d) (Su et al. 2021, eq. 15)."""
    return [base ** (-2 * i / dim) for i in range(dim // 2)]


def linear(base: float, dim: int, factor: float) -> tuple[list[float], float]:
    """Position interpolation (Chen et al. 2023): position m is used as m / s."""
    return [t / factor for t in default(base, dim)], 1.0


def ntk(base: float, dim: int, factor: float) -> tuple[list[float], float]:
    """NTK-aware (bloc97 2023): the same series with base·s^(d/(d-2))."""
    return default(base * factor ** (dim / (dim - 2)), dim), 1.0


def dynamic(
    base: float, dim: int, factor: float, original: int, seq_len: int
) -> tuple[list[float], float]:
    """Dynamic NTK: NTK with s' = s·max(T, L)/L - (s - 1) at the current length T."""
    T = max(seq_len, original)
    return ntk(base, dim, factor * T / original - (factor - 1))[0], 1.0


def yarn(
    base: float,
    dim: int,
    factor: float,
    original: int,
    *,
    beta_fast: float = 32,
    beta_slow: float = 1,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    truncate: bool = True,
) -> tuple[list[float], float]:
    """YaRN (Peng et al. 2023, sec. 3.2 and 3.4): pair i keeps θ_i when it turns more than
    beta_fast times over the original context, uses θ_i/s below beta_slow turns, and blends
    linearly in the (fractional, HF: floored/ceiled) pair index between the two."""

    def index_for(turns: float) -> float:  # solve original·θ_i / 2π = turns for i
        return dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = index_for(beta_fast), index_for(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    out = []
    for i, t in enumerate(default(base, dim)):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)  # 0: keep, 1: interpolate
        out.append(t * (1 - ramp) + (t / factor) * ramp)

    def m(s: float, k: float = 1.0) -> float:  # sqrt(1/t) = 0.1·k·ln(s) + 1
        return 1.0 if s <= 1 else 0.1 * k * math.log(s) + 1.0

    scale = (
        m(factor, mscale) / m(factor, mscale_all_dim) if mscale and mscale_all_dim else m(factor)
    )
    return out, scale


def longrope(
    base: float,
    dim: int,
    short: list[float],
    long: list[float],
    original: int,
    factor: float,
    seq_len: int,
) -> tuple[list[float], float]:
    """LongRoPE (Ding et al. 2024): θ_i / λ_i, λ long past the original length; attention
    scale √(1 + ln s / ln L) (Phi-3's choice)."""
    lam = long if seq_len > original else short
    scale = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    return [t / f for t, f in zip(default(base, dim), lam, strict=True)], scale


def llama3(
    base: float, dim: int, factor: float, low: float, high: float, original: int
) -> tuple[list[float], float]:
    """Llama 3.1 (Meta 2024): wavelength below L/high kept, above L/low divided by s, between
    blended with a = (L/λ - low)/(high - low)."""
    out = []
    for t in default(base, dim):
        wavelength = 2 * math.pi / t
        if wavelength < original / high:
            out.append(t)
        elif wavelength > original / low:
            out.append(t / factor)
        else:
            a = (original / wavelength - low) / (high - low)
            out.append((1 - a) * t / factor + a * t)
    return out, 1.0
