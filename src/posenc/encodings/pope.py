"""PoPE: polar-coordinate position embedding (Gopalakrishnan et al. 2025, arXiv:2509.10534)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import PoPEConfig
from .flows import PoPEFlow


@register("pope", family="rotary", paper="Gopalakrishnan et al., arXiv:2509.10534", year=2025)
class PoPE(PoPEFlow, PositionalEncoding):
    """PoPE: polar coordinates decouple content ("what") from position ("where").

    Gopalakrishnan et al. 2025 (arXiv:2509.10534), sec. 3:

    q̃_tc = softplus(q_tc) e^(i t θ_c),  k̃_sc = softplus(k_sc) e^(i (s θ_c + δ_c)),
    a_ts = Re[q̃_t^H k̃_s] = Σ_c μ_qc μ_kc cos((s - t) θ_c + δ_c),  θ_c = base^(-c/D), c < D.
    Each of the D features is one complex component (D frequencies, not D/2), returned as 2D
    real features [μ cos φ, μ sin φ]; attention still scales by 1/sqrt(D).
    Choices where the paper is open (following x-transformers' ``PolarEmbedding``): the phase
    bias δ is learned per head and frequency, starts at 0 and is clamped to [-2π, 0]; we apply
    it as -δ on the query, which gives the same a_ts and works with grouped key heads.
    ``phase_bias=False`` drops δ. Phases are computed in float64, magnitudes in float32.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq,) |
    (B, Tq), k_pos (Tk,) | (B, Tk) int64 -> q and k as 2D real features, q (B, H, Tq, 2D) and k
    (B, Hkv, Tk, 2D).
    """

    capabilities = Capabilities(rotates=True)
    config_class = PoPEConfig
    config: PoPEConfig

    keep_dtype_buffers = ("inv_freq",)
    inv_freq: Tensor

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.register_fixed_buffers()  # inv_freq (D,) float64
        delta = torch.zeros(self.n_heads, self.head_dim)
        self.delta = nn.Parameter(delta) if self.config.phase_bias else None

    def fixed_buffers(self) -> dict[str, Tensor]:
        # base^(-c/D), c < D
        return {"inv_freq": PF.rope_inv_freq(2 * self.head_dim, base=self.base, xp=PF.torch_xp)}

    def phase_bias(self) -> Tensor | None:
        """δ clamped to [-2π, 0], (H, D), or None."""
        return None if self.delta is None else self.delta.clamp(-2 * math.pi, 0.0)
