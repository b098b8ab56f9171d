"""xPos: extrapolatable rotary embedding (Sun et al. 2022, arXiv:2212.10554)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import functional as PF
from .._validate import values_checked
from ..registry import register
from .configs import XPosConfig
from .flows import XPosFlow
from .rotary import Rotary


@register("xpos", family="rotary", paper="Sun et al., arXiv:2212.10554", year=2022)
class XPos(XPosFlow, Rotary):
    """RoPE with exponential decay (Sun et al. 2022, eq. 11; torchscale ``XPOS``):

    q_n -> ζ^(n/γ_s) ⊙ R_n q_n,  k_m -> ζ^(-m/γ_s) ⊙ R_m k_m,  ζ_i = (2i/d + γ)/(1 + γ),
    so q·k decays as ζ^((n - m)/γ_s) with distance; γ_s = ``scale_base`` (512), γ = ``gamma``
    (0.4), R_n the RoPE rotation (θ_i = base^(-2i/d), ``layout``, ``partial`` as in ``rope``).
    The scale multiplies cos/sin (pairs share it); unrotated features are not scaled.
    Meant for causal attention (n >= m): for keys after the query the factor grows.
    Positions are not centred, so cached keys stay valid; past ±``PF.xpos_max_position`` (34k in
    float32 and bfloat16, 2.6k in float16) the scaled keys (or queries, below -limit) would
    overflow: a ValueError.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq,) |
    (B, Tq), k_pos (Tk,) | (B, Tk) int64 -> q and k of the same shapes.
    """

    config_class = XPosConfig
    config: XPosConfig

    keep_dtype_buffers = ("inv_freq",)
    inv_freq: Tensor

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.register_fixed_buffers()  # inv_freq (P,) float64

    def fixed_buffers(self) -> dict[str, Tensor]:
        return {"inv_freq": PF.rope_inv_freq(self.rotary_dim, base=self.base, xp=PF.torch_xp)}

    def check_range(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> None:
        """Raise where the scaled queries or keys would overflow q's or k's dtype (NaN scores
        past the dtype's range, either sign): one host read of the positions' extremes."""
        present = [p for p in (q_pos, k_pos) if p.numel() and values_checked(p)]
        if not present or not (q.is_floating_point() and k.is_floating_point()):
            return  # (non-floating: apply_rope's TypeError)
        ends = torch.stack([e for p in present for e in p.aminmax()]).tolist()  # one read
        self.config.check_range(ends, [(torch.finfo(x.dtype).max, str(x.dtype)) for x in (q, k)])
