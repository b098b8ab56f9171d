"""Rotary encodings: queries and keys rotated by their positions."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import functional as PF
from .._validate import check_even, check_ndim, check_positions, check_positive_float
from ..functional import LAYOUTS, Layout
from ..registry import register
from .base import PositionalEncoding


def check_qk(q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
    """Validate q (B, H, Tq, D), k (B, Hkv, Tk, D) and their positions; return int64 positions."""
    check_ndim(q, 4, "q", "(B, H, Tq, D)")
    check_ndim(k, 4, "k", "(B, Hkv, Tk, D)")
    if q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q (B, H, Tq, D) and k (B, Hkv, Tk, D) must agree on B and D, got "
            f"q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    q_pos, k_pos = check_positions(q_pos, "q_pos"), check_positions(k_pos, "k_pos")
    for pos, x, what in ((q_pos, q, "q_pos"), (k_pos, k, "k_pos")):
        B, T = x.shape[0], x.shape[2]
        if pos.shape[-1] != T or (pos.ndim == 2 and pos.shape[0] not in (1, B)):
            raise ValueError(f"{what} must have shape ({T},) or ({B}, {T}), got {tuple(pos.shape)}")
    return q_pos, k_pos


@register("rope", family="rotary", paper="Su et al., arXiv:2104.09864", year=2021)
class RoPE(PositionalEncoding):
    """Rotary position embedding (Su et al. 2021, RoFormer): q_m -> R_m q_m, k_n -> R_n k_n with

    R_m rotating pair i by m·θ_i, θ_i = base^(-2i/d), so <R_m q, R_n k> = <q, R_(n-m) k>.
    ``layout``: "half" (GPT-NeoX/HF) or "interleaved" (RoFormer/Meta); ``partial``: fraction
    of head_dim rotated (the rest passes through, GPT-NeoX). Angles are computed in float64
    from int64 positions and cos/sin shared by every layer of one forward; ``inv_freq`` stays
    float64 under ``model.to(bf16)``. Rotation runs in float32 (or q's dtype if wider).
    """

    keep_dtype_buffers = ("inv_freq",)
    inv_freq: Tensor

    def __init__(
        self,
        *,
        head_dim: int,
        base: float = 10000.0,
        layout: Layout = "half",
        partial: float = 1.0,
    ) -> None:
        super().__init__()
        check_even(head_dim, "head_dim")
        check_positive_float(base, "base")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.head_dim, self.base, self.layout = head_dim, float(base), layout
        self.partial = float(partial)
        self.rotary_dim = PF.rotary_dim(head_dim, self.partial)
        inv_freq = PF.rope_inv_freq(self.rotary_dim, base=self.base, xp=PF.torch_xp)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (P,) float64
        self._memo: tuple[Tensor, Any, Tensor, Tensor] | None = None

    def clear_cache(self) -> None:
        self._memo = None

    def cos_sin(self, pos: Tensor, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """cos, sin (..., P) in ``dtype`` for int64 positions (...,), from float64 angles.

        The last result is memoised on the position tensor itself, so all layers of a forward
        share one computation.
        """
        key = (pos._version, dtype)
        memo = self._memo
        if memo is not None and memo[0] is pos and memo[1] == key:
            return memo[2], memo[3]
        cos, sin = PF.rope_cos_sin(pos, self.inv_freq)
        cos, sin = cos.to(dtype), sin.to(dtype)
        if not torch.compiler.is_compiling():
            self._memo = (pos, key, cos, sin)
        return cos, sin

    def rotate_one(self, x: Tensor, pos: Tensor) -> Tensor:
        """Rotate x (B, H, T, D) at positions (T,) or (B, T)."""
        work = torch.promote_types(x.dtype, torch.float32)
        cos, sin = self.cos_sin(pos, work)  # (T, P) or (B, T, P)
        if cos.ndim == 3:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, P)
        return PF.apply_rope(x, cos, sin, layout=self.layout)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"q/k must have head_dim={self.head_dim} features, got {q.shape[-1]}")
        q_pos, k_pos = check_qk(q, k, q_pos, k_pos)
        return self.rotate_one(q, q_pos), self.rotate_one(k, k_pos)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}, "
            f"partial={self.partial}"
        )
