"""PoPE: polar-coordinate position embedding (Gopalakrishnan et al. 2025, arXiv:2509.10534)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..registry import register
from .base import PositionalEncoding, check_qk
from .capabilities import Capabilities
from .configs import PoPEConfig
from .state import Lazy, PositionState


@dataclass(frozen=True, eq=False, kw_only=True)
class PoPEState(PositionState):
    """PoPE's state of one forward: cos, sin of pos·θ (float64, (..., T, D)) at q_pos
    (``q_cos_sin``) and at k_pos (``k_cos_sin``; the queries' when ``keys_are_queries``), each
    made on first use; each layer applies its own phase bias δ."""

    query_cos_sin: Lazy[tuple[Tensor, Tensor]]
    key_cos_sin: Lazy[tuple[Tensor, Tensor]]

    @property
    def q_cos_sin(self) -> tuple[Tensor, Tensor]:
        """The queries' cos, sin."""
        return self.query_cos_sin.get()

    @property
    def k_cos_sin(self) -> tuple[Tensor, Tensor]:
        """The keys' cos, sin (the queries' when the keys are the queries)."""
        return self.q_cos_sin if self.keys_are_queries else self.key_cos_sin.get()


@register("pope", family="rotary", paper="Gopalakrishnan et al., arXiv:2509.10534", year=2025)
class PoPE(PositionalEncoding[PoPEState]):
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

    def __init__(self, **config: object) -> None:
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

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> PoPEState:
        """The forward's ``PoPEState``: cos, sin of the phases made on first use (float64,
        whatever ``dtype``: ``PF.pope_features`` casts them).

        Shapes: q_pos (T,) | (B, T), k_pos (L,) | (B, L) int64 (validated) -> the state.
        """
        same = k_pos is None or k_pos is q_pos
        keys = q_pos if k_pos is None else k_pos
        return PoPEState(
            q_pos=q_pos,
            k_pos=keys,
            offset_bounds=offset_bounds,
            keys_are_queries=same,
            query_cos_sin=Lazy(lambda: PF.rope_cos_sin(q_pos, self.inv_freq)),
            key_cos_sin=Lazy(lambda: PF.rope_cos_sin(keys, self.inv_freq)),
        )

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, *, ctx: PoPEState | None = None
    ) -> tuple[Tensor, Tensor]:
        """Queries at phases pos·θ - δ, keys at pos·θ, as 2D real features (``ctx``'s positions
        and cos, sin when given).

        Shapes: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq,) | (B, Tq), k_pos (Tk,) |
        (B, Tk) -> q (B, H, Tq, 2D), k (B, Hkv, Tk, 2D).
        Raises: ValueError when q has other than n_heads heads, and for inputs that do not
        fit (without ``ctx``).
        """
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.config.head_dim)
            cs_q, cs_k = PF.rope_cos_sin(q_pos, self.inv_freq), None
        else:
            q_pos, k_pos, cs_q, cs_k = ctx.q_pos, ctx.k_pos, ctx.q_cos_sin, ctx.k_cos_sin
        if q.shape[1] != self.config.n_heads:
            raise ValueError(f"q must have n_heads={self.config.n_heads} heads, got {q.shape[1]}")
        shift = self.phase_bias()
        if cs_k is None:
            cs_k = PF.rope_cos_sin(k_pos, self.inv_freq)
        rq = PF.pope_features(q, q_pos, self.inv_freq, shift, cos_sin=cs_q)  # (B, H, Tq, 2D)
        rk = PF.pope_features(k, k_pos, self.inv_freq, None, cos_sin=cs_k)  # (B, Hkv, Tk, 2D)
        return rq, rk
