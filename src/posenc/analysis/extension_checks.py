"""Checks on context extension (``posenc.extension``): an extended RoPE must bring positions of
the target length s·L back to angles seen in training (Chen et al. 2023, arXiv:2306.15595;
Peng et al. 2023, arXiv:2309.00071); position interpolation is RoPE at positions m/s; dynamic
NTK leaves RoPE as it is up to L and moves away continuously past it; YaRN's ramp keeps fast
pairs and interpolates slow ones.

Expected values come from the papers' formulas or from an unscaled RoPE built alongside;
measured ones from the encoding itself (its ``frequencies`` and ``rotate``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor

from .. import functional as PF
from ..encodings.base import PositionalEncoding
from ..encodings.rotary import RoPE
from .result import check, largest_rise, relative_error
from .subjects import TRAIN_LEN, head_shape, is_rotary


def _extended(pe: PositionalEncoding) -> bool:
    return is_rotary(pe) and getattr(pe, "scaling", None) is not None and hasattr(pe, "frequencies")


def _method(name: str) -> Callable[[PositionalEncoding], bool]:
    """Predicate: an extended RoPE using context-extension method ``name``."""
    return lambda pe: _extended(pe) and getattr(pe.scaling, "method", None) == name


def _plain(pe: Any) -> RoPE:
    """The RoPE that ``pe`` extends: same head_dim, base, layout and partial, no scaling."""
    return RoPE(head_dim=pe.head_dim, base=pe.base, layout=pe.layout, partial=pe.partial).eval()


@check("extension_in_training_range", applies=_extended, tolerance=1e-12)
def extension_in_training_range(pe: PositionalEncoding) -> tuple[float, str]:
    """At the target length s·L, the slowest pair turns no further than it did at L in
    training: θ'_min·s·L <= θ_min·L. Error = how far past (relative)."""
    rope: Any = pe
    scaling = rope.scaling
    factor = float(scaling.factor)
    L = int(getattr(scaling, "original_max_position_embeddings", TRAIN_LEN))
    target = int(factor * L)
    scaled, _ = rope.frequencies(target)  # (P,) at length s·L
    default = rope.default_inv_freq64  # (P,)
    reached, trained = float(scaled[-1]) * target, float(default[-1]) * L
    err = max(0.0, reached / trained - 1.0)
    return err, (
        f"{scaling.method}, s={factor:g}, L={L}: slowest pair reaches {reached:.4f} rad at "
        f"{target} vs {trained:.4f} rad at {L} in training"
    )


@check("pi_equals_scaled_positions", applies=_method("linear"), tolerance=1e-10)
def pi_equals_scaled_positions(pe: PositionalEncoding) -> tuple[float, str]:
    """Position interpolation is RoPE at positions m/s (Chen et al. 2023, arXiv:2306.15595):
    rotate(q, k, m) equals the unscaled RoPE's rotate at m/s, through its ``rotate`` where m/s
    is a whole number and its rotation at fractional m/s elsewhere. Error = max relative diff."""
    rope: Any = pe
    plain = _plain(rope)
    factor = float(rope.scaling.factor)
    H, D = head_shape(pe)
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(1, H, 64, D, generator=gen, dtype=torch.float64)  # (B, H, T, D)
    k = torch.randn(1, H, 64, D, generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 10_000, (64,), generator=gen)  # any positions (T,)
    errs = []
    ratio = Fraction(factor).limit_denominator(64)  # s = a/b: m = a·j lands on m/s = b·j
    whole = ""
    if abs(float(ratio) - factor) < 1e-12:
        j = torch.randint(0, 10_000 // ratio.numerator + 1, (64,), generator=gen)
        sq, sk = rope.rotate(q, k, ratio.numerator * j, ratio.numerator * j)
        pq, pk = plain.rotate(q, k, ratio.denominator * j, ratio.denominator * j)
        errs.append(max(relative_error(sq, pq), relative_error(sk, pk)))
        whole = f"m = {ratio.numerator}j vs rotate at {ratio.denominator}j: {errs[-1]:.1e}; "
    sq, sk = rope.rotate(q, k, pos, pos)
    cos, sin = PF.rope_cos_sin(pos.double() / factor, plain.inv_freq64)  # (T, P) at m/s
    pq = PF.apply_rope(q, cos, sin, layout=plain.layout)
    pk = PF.apply_rope(k, cos, sin, layout=plain.layout)
    errs.append(max(relative_error(sq, pq), relative_error(sk, pk)))
    return max(errs), (
        f"s={factor:g}, 64 positions m < 10^4: {whole}any m vs RoPE at m/s: {errs[-1]:.1e}"
    )


def _dynamic_lengths(pe: Any) -> tuple[int, Tensor, dict[int, Tensor]]:
    """(L, plain RoPE's θ (P,), {length: θ(length) (P,)}) for L/2, L, L + 1, 2L (and 1)."""
    L = int(pe.scaling.original_max_position_embeddings)
    lengths = sorted({1, max(L // 2, 1), L, L + 1, 2 * L})
    return L, _plain(pe).inv_freq64, {n: pe.frequencies(n)[0] for n in lengths}


@check("dynamic_ntk_plain_within_original", applies=_method("dynamic"), tolerance=0.0)
def dynamic_ntk_plain_within_original(pe: PositionalEncoding) -> tuple[float, str]:
    """Dynamic NTK (emozilla 2023; Peng et al. 2023, sec. 3.3) changes nothing within the
    pretraining context: at lengths <= L (original_max_position_embeddings) the frequencies
    are plain RoPE's, bit for bit. Error = max relative difference at lengths 1, L/2, L."""
    L, plain, freqs = _dynamic_lengths(pe)
    within = {n: f for n, f in freqs.items() if n <= L}
    devs = {n: float(((f - plain).abs() / plain).max()) for n, f in within.items()}
    return max(devs.values()), f"L={L}: max |θ(n) / θ_plain - 1| " + ", ".join(
        f"{d:.1e} at n={n}" for n, d in devs.items()
    )


@check("dynamic_ntk_continuous", applies=_method("dynamic"), tolerance=0.25)
def dynamic_ntk_continuous(pe: PositionalEncoding) -> tuple[float, str]:
    """Dynamic NTK is continuous at L: the step from length L to L + 1 is small next to the
    change from L to 2L (s' = 1 + s·(n - L)/L grows from 1; about (1 + s)/(L + s) for the
    slowest pair, 0.07 at s = 4, L = 64; near 1 for a method jumping to s past L).
    Error = max over pairs of |θ(L+1) - θ(L)| / |θ(2L) - θ(L)|."""
    rope: Any = pe
    L, _, freqs = _dynamic_lengths(rope)
    jump = (freqs[L + 1] - freqs[L]).abs()  # (P,)
    change = (freqs[2 * L] - freqs[L]).abs()  # (P,)
    moved = change > 0
    if not bool(moved.any()):  # factor 1: nothing moves, nothing may jump
        err = float(jump.max())
        return err, f"L={L}: frequencies do not change up to 2L; max step at L+1 {err:.1e}"
    ratio = jump[moved] / change[moved]
    slow = int(moved.nonzero()[-1])
    err = float(ratio.max())
    return err, (
        f"L={L}, s={float(rope.scaling.factor):g}: slowest pair θ(L), θ(L+1), "
        f"θ(2L) = {float(freqs[L][slow]):.4e}, {float(freqs[L + 1][slow]):.4e}, "
        f"{float(freqs[2 * L][slow]):.4e}; max step/change {err:.3f}"
    )


@check("yarn_ramp_endpoints", applies=_method("yarn"), tolerance=1e-12)
def yarn_ramp_endpoints(pe: PositionalEncoding) -> tuple[float, str]:
    """YaRN's NTK-by-parts ramp (Peng et al. 2023, arXiv:2309.00071, sec. 3.2): pair i turns
    r_i = L·θ_i/2π times over L; pairs with r_i > beta_fast keep θ_i, pairs with r_i < beta_slow
    get θ_i/s, and θ'_i/θ_i lies in [1/s, 1] and never rises from fast to slow pairs.
    Error = max relative endpoint deviation, excursion or rise."""
    rope: Any = pe
    cfg = rope.scaling
    s, L = float(cfg.factor), int(cfg.original_max_position_embeddings)
    d = int(getattr(rope, "rotary_dim", rope.head_dim))
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = float(rope.base) ** (-2 * i / d)  # (P,) the paper's θ_i, not the library's
    turns = L * theta / (2 * math.pi)  # (P,) r_i
    ratio = rope.frequencies()[0] / theta  # (P,) θ'_i / θ_i
    fast, slow = turns > cfg.beta_fast, turns < cfg.beta_slow
    errs = [0.0]
    errs += [float((ratio[fast] - 1).abs().max())] if fast.any() else []
    errs += [float((ratio[slow] * s - 1).abs().max())] if slow.any() else []
    errs.append(float((ratio - 1).clamp_min(0).max()))  # above 1
    errs.append(float((1 / s - ratio).clamp_min(0).max() * s))  # below 1/s
    errs.append(largest_rise(ratio.tolist()))
    between = ~(fast | slow)
    return max(errs), (
        f"s={s:g}, L={L}, beta {cfg.beta_fast:g}/{cfg.beta_slow:g}: {int(fast.sum())} pairs kept "
        f"(r > {cfg.beta_fast:g}), {int(slow.sum())} at θ/s (r < {cfg.beta_slow:g}), "
        f"{int(between.sum())} between with θ'/θ "
        + " ".join(f"{float(x):.3f}" for x in ratio[between][:8])
        + f"; error {max(errs):.1e}"
    )
