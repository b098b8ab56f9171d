"""Checks through a model: order sensitivity, offset-only dependence, KV-cache decoding."""

from __future__ import annotations

import torch

from ..attention import decode_positions
from ..encodings.base import PositionalEncoding
from .result import check
from .subjects import (
    VOCAB,
    is_additive,
    length_dependent,
    model_geometry,
    position_axes,
    probe_positions,
    tiny_attention,
    tiny_model,
)

#: Encodings whose scores depend on absolute positions on purpose, with the reason.
NOT_SHIFT_INVARIANT = {
    "fire": "FIRE divides the offset by the query position (Li et al. 2023, eq. 6)",
}


def _order_gap(pe: PositionalEncoding) -> tuple[float, str]:
    """max |f(P x) - P f(x)| of a bidirectional encoder (float64) for one permutation P."""
    model = tiny_model(pe, causal=False)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, VOCAB, (1, 16), generator=gen)  # (B, T)
    perm = torch.randperm(16, generator=gen)
    pos = probe_positions(pe, 16)  # (T,) | (T, A): a 4x4 grid for grid encodings
    shuffled = model.features(idx[:, perm], pos)
    gap = float((shuffled - model.features(idx, pos)[:, perm]).abs().max())
    return gap, f"encoder of 16 tokens, one shuffle: max |f(Px) - P f(x)| = {gap:.2e}"


def _unordered(pe: PositionalEncoding) -> bool:
    """No position information at all: NoPE, not Llama 4's NoPE-layer temperature, whose
    queries scale with the position (it would pass only below ``floor_scale`` - 1)."""
    return pe.family == "none" and pe.name != "nope_temperature"


@check("permutation_equivariant", applies=_unordered, tolerance=1e-10)
def permutation_equivariant(pe: PositionalEncoding) -> tuple[float, str]:
    """Without positions, self-attention is permutation-equivariant: f(P x) = P f(x)."""
    return _order_gap(pe)


def _order_applies(pe: PositionalEncoding) -> bool:
    """An encoder can take the encoding: not one computing causal attention from the data
    (FoX, stick-breaking, PaTH), whose forms have no encoder."""
    return pe.family != "none" and not pe.capabilities.attention_form


@check("order_sensitive", applies=_order_applies, tolerance=1e-8, comparison=">=")
def order_sensitive(pe: PositionalEncoding) -> tuple[float, str]:
    """With the encoding, shuffling tokens changes more than their order: f(P x) != P f(x)."""
    return _order_gap(pe)


def _shift_applies(pe: PositionalEncoding) -> bool:
    return (
        not is_additive(pe)
        and pe.family != "none"
        and pe.name not in NOT_SHIFT_INVARIANT
        and not length_dependent(pe)
        # FoX, stick-breaking, PaTH never read position ids: a shift would pass trivially
        and not pe.capabilities.attention_form
    )


@check("shift_invariant", applies=_shift_applies, tolerance=1e-9)
def shift_invariant(pe: PositionalEncoding) -> tuple[float, str]:
    """Relative encodings see only offsets: outputs unchanged when all positions shift."""
    attn = tiny_attention(pe)
    C, _ = model_geometry(pe)
    x = torch.randn(2, 12, C, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    pos = probe_positions(pe, 12)  # every coordinate shifts for grid encodings
    ref = attn(x, pos)
    errs = [float((attn(x, pos + shift) - ref).abs().max()) for shift in (1, 37, 1000)]
    return max(errs), "shifts 1, 37, 1000 of 12 positions: max |out| change " + ", ".join(
        f"{e:.1e}" for e in errs
    )


@check("kv_cache_decode", applies=lambda pe: True, tolerance=1e-9)
def kv_cache_decode(pe: PositionalEncoding) -> tuple[float, str]:
    """Decoding token by token through the KV cache gives the full forward's logits."""
    model = tiny_model(pe, causal=True)
    idx = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(2))
    pos = probe_positions(pe, 12)  # (T,) = 0..11 as by default, or (T, A) on a grid
    full = model(idx, pos)  # (B, T, V)
    cache = model.new_cache()
    steps = [model(idx[:, :5], pos[:5], cache=cache)]
    steps += [model(idx[:, t : t + 1], pos[t : t + 1], cache=cache) for t in range(5, 12)]
    err = float((torch.cat(steps, dim=1) - full).abs().max())
    return err, f"prefix 5 + 7 single-token steps vs one forward of 12: max |logit diff| {err:.1e}"


@check("decode_positions", applies=lambda pe: position_axes(pe) == 1, tolerance=0.0)
def decode_position_ids(pe: PositionalEncoding) -> tuple[float, str]:
    """Decoded tokens get positions advancing by one from the prefix length (explicit ids
    equal the cache's defaults)."""
    model = tiny_model(pe, causal=True)
    idx = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(3))
    ids = decode_positions(6, 3)
    step_err = float((ids - torch.arange(6, 9)).abs().max())
    implicit, explicit = model.new_cache(), model.new_cache()
    model(idx[:, :6], cache=implicit), model(idx[:, :6], cache=explicit)
    a = model(idx[:, 6:], cache=implicit)
    b = model(idx[:, 6:], ids, cache=explicit)
    err = max(step_err, float((a - b).abs().max()))
    return err, f"decode_positions(6, 3) = {ids.tolist()}; default vs explicit ids diff {err:.1e}"
