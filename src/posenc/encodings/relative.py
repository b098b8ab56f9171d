"""Relative encodings that rewrite attention logits: Shaw et al. 2018 and Transformer-XL."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import ShawConfig, TransformerXLConfig
from .context import Ctx, PositionContext
from .flows import ShawFlow, TransformerXLFlow


@register("shaw", family="relative", paper="Shaw et al., arXiv:1803.02155", year=2018)
class Shaw(ShawFlow, PositionalEncoding):
    """Learned relative embeddings for keys and values (Shaw et al. 2018, eq. 3-6):

    e_ij = q_i·(k_j + a^K_ij) / sqrt(D),  z_i = Σ_j α_ij (v_j + a^V_ij),
    a_ij = w[clip(j - i, -K, K)] with K = ``max_distance``: distances past K share the edge row.
    One (2K+1, D) table per term, shared by heads (as in the paper); ``values=False`` drops a^V.
    Tables start N(0, ``init_std``²), 0.02 by default (GPT-2's scale): untrained, q·a^K is
    ~0.02·|q| next to q·k, so an untrained layer's attention by distance is NoPE's (1/(i + 1)
    on one repeated token) until training grows the tables; tutorials that draw the tables
    from ``torch.randn`` (std 1) see a position effect at once: ``init_std=1.0``. Indices come
    from positions, so cached decoding is exact.
    Shapes: ``relative_logits(scores, q, k, q_pos, k_pos)``: scores (B, H, Tq, Tk), q (B, H, Tq, D),
    k (B, Hkv, Tk, D), q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) int64 -> (B, H, Tq, Tk).
    ``relative_values(probs, q_pos, k_pos)``: probs (B, H, Tq, Tk) -> (B, H, Tq, D), added to the
    attention output.
    """

    capabilities = Capabilities(relative_terms=True)
    config_class = ShawConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        shape = (2 * self.max_distance + 1, self.head_dim)  # (2K+1, D)
        self.key_table = nn.Parameter(torch.empty(shape))
        self.value_table = nn.Parameter(torch.empty(shape)) if self.values else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: each table ~ N(0, init_std²)."""
        for table in (self.key_table, self.value_table):
            if table is not None:
                nn.init.normal_(table, std=self.config.init_std)


@register("transformer_xl", family="relative", paper="Dai et al., arXiv:1901.02860", year=2019)
class TransformerXL(TransformerXLFlow, PositionalEncoding):
    """Transformer-XL relative attention (Dai et al. 2019, sec. 3.3):

    A_ij = q_i·k_j + q_i·W_R R_(i-j) + u·k_j + v·W_R R_(i-j), all divided by sqrt(D),
    R_p the sinusoidal row (width C = ``dim``) of offset p = i - j, W_R (H·D, C) shared by the
    layers using this encoding, u, v (H, D) the global content and position biases. Parameters
    start N(0, 0.02²) as in the paper's code. Offsets come from positions (cached decoding works).
    Shapes: ``relative_logits(scores, q, k, q_pos, k_pos)``: scores (B, H, Tq, Tk), q (B, H, Tq, D),
    k (B, Hkv, Tk, D), q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) int64 -> (B, H, Tq, Tk).
    """

    capabilities = Capabilities(relative_terms=True)
    config_class = TransformerXLConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        H, D = self.n_heads, self.head_dim
        self.r_proj = nn.Parameter(torch.empty(H * D, self.dim))  # W_R (H*D, C)
        self.u = nn.Parameter(torch.empty(H, D))  # (H, D)
        self.v = nn.Parameter(torch.empty(H, D))  # (H, D)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: W_R, u, v ~ N(0, 0.02²)."""
        for p in (self.r_proj, self.u, self.v):
            nn.init.normal_(p, std=0.02)

    def position_rows(
        self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, ctx: Ctx
    ) -> tuple[int, Tensor] | None:
        """The context's W_R R rows (``rows``), made once per forward and dtype; None without
        a context."""
        if ctx is None:
            return None
        return ctx.shared(("txl_rows", self, dtype), lambda: self.rows(ctx, dtype))

    def rows(self, ctx: PositionContext, dtype: torch.dtype) -> tuple[int, Tensor]:
        """(lo, W_R R) for every offset lo..hi that the context's positions meet, (H, R, D):
        computed once per forward and sliced by every layer and query block (each would
        otherwise redo a (R, C) x (C, H·D) product). The range is taken per row: rows at
        far-apart positions span only their own offsets. The range is the context's
        ``offset_bounds`` when its maker knows them, else one host read of the extremes."""
        q_pos, k_pos = ctx.q_pos, ctx.k_pos
        if ctx.offset_bounds is not None and q_pos.numel() and k_pos.numel():
            lo, hi = ctx.offset_bounds
        elif q_pos.numel() and k_pos.numel():  # (T,) | (B, T) -> () | (B,) per-row extremes
            ends = torch.stack(
                [(q_pos.amin(-1) - k_pos.amax(-1)).min(), (q_pos.amax(-1) - k_pos.amin(-1)).max()]
            )
            lo, hi = (int(e) for e in ends.tolist())
            torch._check(lo <= hi)  # (traced: the range is not empty)
        else:  # no pair (T = 0): no rows
            lo, hi = 0, -1
        rows = PF.transformer_xl_position_rows(
            lo, hi, r_proj=self.r_proj, n_heads=self.n_heads, dtype=dtype, base=self.base
        )
        return lo, rows
