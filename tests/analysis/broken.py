"""Deliberately broken encodings: each violates exactly the property one check verifies."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

import posenc.encodings.absolute as absolute
import posenc.encodings.bias as bias
import posenc.encodings.nope as nope
import posenc.encodings.rotary as rotary
from posenc import functional as PF
from posenc.analysis import subject
from posenc.analysis.subjects import D_MODEL, HEAD_DIM, N_HEADS


class LeakyNoPE(nope.NoPE):
    """Claims family "none" but adds a position ramp (not constant over features, which
    LayerNorm would remove) to every embedding."""

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        ramp = torch.linspace(-1, 1, x.shape[-1], dtype=x.dtype)  # (C,)
        return x + 0.1 * pos.to(x.dtype)[..., None] * ramp


class InertRoPE(rotary.RoPE):
    """A rotary encoding whose rotation does nothing."""

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return q, k


class WrongSignRoPE(rotary.RoPE):
    """Rotates keys the wrong way: <R_m q, R_-n k> is not a function of n - m."""

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotate_one(q, q_pos), self.rotate_one(k, -k_pos)


class StretchingRoPE(rotary.RoPE):
    """Rotates and also stretches by 1 + pos/1000."""

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        rq, rk = super().rotate(q, k, q_pos, k_pos)
        return rq * (1 + q_pos[..., None] / 1000), rk * (1 + k_pos[..., None] / 1000)


class HalfOnlyRoPE(rotary.RoPE):
    """Ignores its ``layout`` and always pairs i with i + D/2."""

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, *, inplace: bool = False
    ) -> tuple[Tensor, Tensor]:
        cq, sq = PF.rope_cos_sin(q_pos, self.default_inv_freq64)
        ck, sk = PF.rope_cos_sin(k_pos, self.default_inv_freq64)
        return PF.apply_rope(q, cq, sq, layout="half"), PF.apply_rope(k, ck, sk, layout="half")


class AbsoluteALiBi(bias.ALiBi):
    """ALiBi plus log(1 + key position): not a per-row constant, so softmax sees it."""

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return super().bias(q_pos, k_pos) + torch.log1p(k_pos.double())[..., None, :]


class CurvedALiBi(bias.ALiBi):
    """A quadratic, not linear, distance penalty with the published slopes."""

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        linear = super().bias(q_pos, k_pos)
        return linear - 1e-3 * PF.relative_offsets(q_pos, k_pos).double() ** 2


class LengthNormalisedALiBi(bias.ALiBi):
    """Divides the bias by the number of keys: a decoded token sees a different scale."""

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return super().bias(q_pos, k_pos) * 8.0 / k_pos.shape[-1]


class ReversedT5(bias.T5Bias):
    """Buckets counting down with distance."""

    def buckets(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.num_buckets - 1 - super().buckets(q_pos, k_pos)


class RewardingKerple(bias.Kerple):
    """Rewards distance instead of penalising it."""

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return -super().bias(q_pos, k_pos)


class DoubledSinusoidal(absolute.Sinusoidal):
    """Table scaled by 2: out of [-1, 1]."""

    def table(self, pos: Tensor) -> Tensor:
        return 2 * super().table(pos)


class PeriodicSinusoidal(absolute.Sinusoidal):
    """Repeats every 8 positions, so rows are not unique."""

    def table(self, pos: Tensor) -> Tensor:
        return super().table(pos % 8)


class SwappedSinusoidal(absolute.Sinusoidal):
    """cos at even and sin at odd features: no longer shifted by M_k."""

    def table(self, pos: Tensor) -> Tensor:
        t = super().table(pos)
        return t.reshape(*t.shape[:-1], -1, 2).flip(-1).reshape(t.shape)


class FlatSinusoidal(absolute.Sinusoidal):
    """Position 0's vector plus a tiny ramp: similarity does not decay."""

    def table(self, pos: Tensor) -> Tensor:
        return super().table(torch.zeros_like(pos)) + 1e-3 * super().table(pos)


def _build(cls: type, **kw: Any) -> Any:
    pe = cls(**kw)
    return pe.eval()


def broken(check: str) -> Any:
    """An encoding that the named check must FAIL."""
    rope_kw = {"head_dim": HEAD_DIM}
    makers = {
        "permutation_equivariant": lambda: _build(LeakyNoPE),
        "order_sensitive": lambda: _build(InertRoPE, **rope_kw),
        "shift_invariant": lambda: _build(AbsoluteALiBi, n_heads=N_HEADS),
        "kv_cache_decode": lambda: _build(LengthNormalisedALiBi, n_heads=N_HEADS),
        "rotation_norm_preserved": lambda: _build(StretchingRoPE, **rope_kw),
        "rotary_relative": lambda: _build(WrongSignRoPE, **rope_kw),
        "layouts_agree": lambda: _build(HalfOnlyRoPE, **rope_kw),
        "table_bounded": lambda: _build(DoubledSinusoidal, dim=D_MODEL),
        "table_unique_rows": lambda: _build(PeriodicSinusoidal, dim=D_MODEL),
        "table_shift_is_rotation": lambda: _build(SwappedSinusoidal, dim=D_MODEL),
        "table_dot_decays": lambda: _build(FlatSinusoidal, dim=D_MODEL),
        "alibi_slopes_geometric": lambda: _build(
            bias.ALiBi, n_heads=4, slopes=[0.0625, 0.25, 0.00390625, 0.015625]
        ),
        "alibi_bias_linear": lambda: _build(CurvedALiBi, n_heads=N_HEADS),
        "t5_buckets_monotone_clamped": lambda: _build(ReversedT5, n_heads=N_HEADS),
        "bias_decays_with_distance": lambda: _build(RewardingKerple, n_heads=N_HEADS),
        "fire_distance_interpolated": _broken_fire,
        "extension_in_training_range": _forgetful_extension,
    }
    return makers[check]()


def _broken_fire() -> Any:
    """FIRE whose normaliser is too small (negative eps): inputs leave [0, 1]."""
    fire = _build(bias.FIRE, n_heads=N_HEADS)
    fire.eps = -0.5
    return fire


def _forgetful_extension() -> Any:
    """RoPE that declares linear scaling but keeps the default frequencies."""
    pe = subject("rope:linear")
    pe.inv_freq64 = pe.default_inv_freq64.clone()
    return pe
