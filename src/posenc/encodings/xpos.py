"""xPos: extrapolatable rotary embedding (Sun et al. 2022, arXiv:2212.10554)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import functional as PF
from .._validate import values_checked
from ..kernels.rope_eager import apply_rope
from ..registry import register
from .base import PositionalEncoding, check_qk
from .capabilities import Capabilities
from .configs import XPosConfig
from .rotary import work_dtype
from .state import InDtype, Lazy, PositionState


@dataclass(frozen=True, eq=False, kw_only=True)
class XPosState(PositionState):
    """xPos's state of one forward: the scaled tables ζ^(pos/γ_s) cos, sin of the queries at
    q_pos (``q_tables``), ζ^(-pos/γ_s) cos, sin of the fresh keys at q_pos (``fresh_tables``)
    and of every key at k_pos (``k_tables``: the fresh keys' when ``keys_are_queries``, else
    each (..., T, P) made on first use in the work dtype asked for; ``ends``: the positions'
    extremes, read on the host once (the range check of every layer)."""

    q_tables: InDtype[tuple[Tensor, Tensor]]
    fresh_tables: InDtype[tuple[Tensor, Tensor]]
    key_tables: InDtype[tuple[Tensor, Tensor]]
    ends: Lazy[list[int]]

    def k_tables(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The keys' scaled tables (the fresh keys' when the keys are the queries)."""
        return (self.fresh_tables if self.keys_are_queries else self.key_tables).get(dtype)


@register("xpos", family="rotary", paper="Sun et al., arXiv:2212.10554", year=2022)
class XPos(PositionalEncoding[XPosState]):
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

    capabilities = Capabilities(rotates=True)
    config_class = XPosConfig
    config: XPosConfig

    keep_dtype_buffers = ("inv_freq",)
    inv_freq: Tensor

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.register_fixed_buffers()  # inv_freq (P,) float64

    def fixed_buffers(self) -> dict[str, Tensor]:
        return {"inv_freq": PF.rope_inv_freq(self.rotary_dim, base=self.base, xp=PF.torch_xp)}

    def scaled_cos_sin(self, pos: Tensor, sign: int) -> tuple[Tensor, Tensor]:
        """ζ^(sign·pos/γ_s) cos, sin of pos·θ (Sun et al. 2022, eq. 11), float64.

        Shapes: pos (...,) integer -> cos, sin (..., P).
        """
        c = self.config
        cos, sin = PF.rope_cos_sin(pos, self.inv_freq)
        scale = PF.xpos_scale(sign * pos, c.rotary_dim, scale_base=c.scale_base, gamma=c.gamma)
        return cos * scale, sin * scale

    def tables(self, pos: Tensor, sign: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``scaled_cos_sin`` in ``dtype``, broadcastable to (B, H, T, D): (B, T, P) as
        (B, 1, T, P)."""
        cos, sin = (t.to(dtype) for t in self.scaled_cos_sin(pos, sign))
        if cos.ndim == 3:  # (B, T, P) -> (B, 1, T, P)
            cos, sin = cos[:, None], sin[:, None]
        return cos, sin

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> XPosState:
        """The forward's ``XPosState``, its tables made on first use (``dtype``, the
        activations', is the one their first layer meets).

        Shapes: q_pos (T,) | (B, T), k_pos (L,) | (B, L) int64 (validated) -> the state.
        """
        same = k_pos is None or k_pos is q_pos
        keys = q_pos if k_pos is None else k_pos
        return XPosState(
            q_pos=q_pos,
            k_pos=keys,
            offset_bounds=offset_bounds,
            keys_are_queries=same,
            q_tables=InDtype(lambda work: self.tables(q_pos, 1, work)),
            fresh_tables=InDtype(lambda work: self.tables(q_pos, -1, work)),
            key_tables=InDtype(lambda work: self.tables(keys, -1, work)),
            ends=Lazy(lambda: position_ends(q_pos, keys)),
        )

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, *, ctx: XPosState | None = None
    ) -> tuple[Tensor, Tensor]:
        """ζ^(q_pos/γ_s) R(q_pos) q and ζ^(-k_pos/γ_s) R(k_pos) k (``ctx``'s positions and tables
        when given), by the eager kernel.

        Shapes: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq,) | (B, Tq), k_pos (Tk,) |
        (B, Tk) -> q and k of the same shapes.
        Raises: ValueError where scaled queries or keys would overflow their dtype, and for
        inputs that do not fit (without ``ctx``).
        """
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.config.head_dim)
            self.check_range(q, k, position_ends(q_pos, k_pos))
            tq = self.tables(q_pos, 1, work_dtype(q.dtype))
            tk = self.tables(k_pos, -1, work_dtype(k.dtype))
        else:  # the extremes read once per forward: every layer meets the same positions
            self.check_range(q, k, ctx.ends.get())
            tq = ctx.q_tables.get(work_dtype(q.dtype))
            tk = ctx.k_tables(work_dtype(k.dtype))
        layout = self.layout
        return apply_rope(q, *tq, layout=layout), apply_rope(k, *tk, layout=layout)

    def check_range(self, q: Tensor, k: Tensor, ends: list[int]) -> None:
        """Raise where the scaled queries or keys would overflow q's or k's dtype (NaN scores
        past the dtype's range, either sign), from the positions' extremes ``ends``.

        Raises: ValueError naming the position and the dtype."""
        if not ends or not (q.is_floating_point() and k.is_floating_point()):
            return  # (non-floating: apply_rope's TypeError)
        self.config.check_range(ends, [(torch.finfo(x.dtype).max, str(x.dtype)) for x in (q, k)])


def position_ends(*positions: Tensor) -> list[int]:
    """The extremes of the positions (each tensor's min and max) in one host read, where their
    values are checked (``values_checked``: not while ``torch.compile`` traces); [] else."""
    present = [p for p in positions if p.numel() and values_checked(p)]
    if not present:
        return []
    ends: list[int] = torch.stack([e for p in present for e in p.aminmax()]).tolist()
    return ends
