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
from posenc.analysis.subjects import D_MODEL, EXAMPLE_SCALINGS, HEAD_DIM, N_HEADS
from posenc.extension import ntk


class LeakyNoPE(nope.NoPE):
    """Claims family "none" but adds a position ramp (not constant over features, which
    LayerNorm would remove) to every embedding."""

    def embed(self, x: Tensor, pos: Tensor, **_: Any) -> Tensor:
        ramp = torch.linspace(-1, 1, x.shape[-1], dtype=x.dtype)  # (C,)
        return x + 0.1 * pos.to(x.dtype)[..., None] * ramp


class InertRoPE(rotary.RoPE):
    """A rotary encoding whose rotation does nothing."""

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, **_: Any
    ) -> tuple[Tensor, Tensor]:
        return q, k


class WrongSignRoPE(rotary.RoPE):
    """Rotates keys the wrong way: <R_m q, R_-n k> is not a function of n - m."""

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, **_: Any
    ) -> tuple[Tensor, Tensor]:
        return self.rotate_one(q, q_pos), self.rotate_one(k, -k_pos)


class StretchingRoPE(rotary.RoPE):
    """Rotates and also stretches by 1 + pos/1000."""

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, **_: Any
    ) -> tuple[Tensor, Tensor]:
        rq, rk = super().rotate(q, k, q_pos, k_pos)
        return rq * (1 + q_pos[..., None] / 1000), rk * (1 + k_pos[..., None] / 1000)


class HalfOnlyRoPE(rotary.RoPE):
    """Ignores its ``layout`` and always pairs i with i + D/2."""

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, **_: Any
    ) -> tuple[Tensor, Tensor]:
        cq, sq = PF.rope_cos_sin(q_pos, self.default_inv_freq64)
        ck, sk = PF.rope_cos_sin(k_pos, self.default_inv_freq64)
        return PF.apply_rope(q, cq, sq, layout="half"), PF.apply_rope(k, ck, sk, layout="half")


class AbsoluteALiBi(bias.ALiBi):
    """ALiBi plus log(1 + key position): not a per-row constant, so softmax sees it."""

    def bias(self, q_pos: Tensor, k_pos: Tensor, **_: Any) -> Tensor:
        return super().bias(q_pos, k_pos) + torch.log1p(k_pos.double())[..., None, :]


class CurvedALiBi(bias.ALiBi):
    """A quadratic, not linear, distance penalty with the published slopes."""

    def bias(self, q_pos: Tensor, k_pos: Tensor, **_: Any) -> Tensor:
        linear = super().bias(q_pos, k_pos)
        return linear - 1e-3 * PF.relative_offsets(q_pos, k_pos).double() ** 2


class LengthNormalisedALiBi(bias.ALiBi):
    """Divides the bias by the number of keys: a decoded token sees a different scale."""

    def bias(self, q_pos: Tensor, k_pos: Tensor, **_: Any) -> Tensor:
        return super().bias(q_pos, k_pos) * 8.0 / k_pos.shape[-1]


class ReversedT5(bias.T5Bias):
    """Buckets counting down with distance."""

    def buckets(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.num_buckets - 1 - super().buckets(q_pos, k_pos)


class RewardingKerple(bias.Kerple):
    """Rewards distance instead of penalising it."""

    def bias(self, q_pos: Tensor, k_pos: Tensor, **_: Any) -> Tensor:
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


class RoundingPI(rotary.RoPE):
    """Position interpolation by whole positions: m -> s·floor(m/s), i.e. RoPE at floor(m/s)
    (integer-divided position ids), right only where s divides m."""

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, **_: Any
    ) -> tuple[Tensor, Tensor]:
        s = int(self.scaling.factor)  # type: ignore[union-attr]
        return super().rotate(q, k, q_pos - q_pos % s, k_pos - k_pos % s)


class _DynamicNTK(rotary.RoPE):
    """Dynamic NTK with its own factor rule s'(n) at length n."""

    def ntk_factor(self, seq_len: int) -> float:
        raise NotImplementedError

    def frequencies(self, seq_len: int | None = None) -> tuple[Tensor, float]:
        cfg: Any = self.scaling
        n = cfg.original_max_position_embeddings if seq_len is None else seq_len
        return ntk(self.default_inv_freq64, factor=self.ntk_factor(n)).inv_freq, 1.0


class EagerDynamicNTK(_DynamicNTK):
    """Dynamic NTK by s' = s·n/L at every length n: scales inside the pretraining context
    (s' = s at n = L), though continuously."""

    def ntk_factor(self, seq_len: int) -> float:
        cfg: Any = self.scaling
        return cfg.factor * seq_len / cfg.original_max_position_embeddings


class JumpingDynamicNTK(_DynamicNTK):
    """Plain RoPE up to L, then s' = s·n/L (the "- (s - 1)" dropped): jumps from 1 to s."""

    def ntk_factor(self, seq_len: int) -> float:
        cfg: Any = self.scaling
        L = cfg.original_max_position_embeddings
        return 1.0 if seq_len <= L else cfg.factor * seq_len / L


def _build(cls: type, **kw: Any) -> Any:
    pe = cls(**kw)
    return pe.eval()


def broken(check: str) -> Any:
    """An encoding that the named check must FAIL."""
    rope_kw = {"head_dim": HEAD_DIM}
    dynamic_kw = {**rope_kw, "scaling": {"rope_type": "dynamic", **EXAMPLE_SCALINGS["dynamic"]}}
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
        "rope_long_term_decay": _one_frequency_rope,
        "pi_equals_scaled_positions": lambda: _build(
            RoundingPI, **rope_kw, scaling={"rope_type": "linear", **EXAMPLE_SCALINGS["linear"]}
        ),
        "dynamic_ntk_plain_within_original": lambda: _build(EagerDynamicNTK, **dynamic_kw),
        "dynamic_ntk_continuous": lambda: _build(JumpingDynamicNTK, **dynamic_kw),
        "yarn_ramp_endpoints": _reversed_yarn,
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


def _one_frequency_rope() -> Any:
    """RoPE whose every pair turns at θ_0 = 1 rad/position (a broadcast bug): the partial sums
    S_j = j·e^{irθ_0} never dephase, so the bound stays at (P + 1)/2."""
    pe = subject("rope")
    pe.inv_freq64 = torch.full_like(pe.default_inv_freq64, float(pe.default_inv_freq64[0]))
    return pe


def _reversed_yarn() -> Any:
    """YaRN with the ramp the wrong way round (γ for 1 - γ): slow pairs keep θ, fast get θ/s."""
    pe = subject("rope:yarn")
    s = float(pe.scaling.factor)
    ratio = pe.inv_freq64 / pe.default_inv_freq64  # γ + (1 - γ)/s
    pe.inv_freq64 = pe.default_inv_freq64 * (1 + 1 / s - ratio)  # (1 - γ) + γ/s
    return pe
