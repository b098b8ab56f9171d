"""Relative encodings that rewrite attention logits: Shaw et al. 2018 and Transformer-XL."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from .._validate import check_ndim, check_positions, check_positions_match, check_real_floating
from ..registry import register
from .base import PositionalEncoding, check_qk
from .capabilities import Capabilities
from .configs import ShawConfig, TransformerXLConfig
from .context import Ctx, PositionContext


@register("shaw", family="relative", paper="Shaw et al., arXiv:1803.02155", year=2018)
class Shaw(PositionalEncoding):
    """Learned relative embeddings for keys and values (Shaw et al. 2018, eq. 3-6):

    e_ij = q_i·(k_j + a^K_ij) / sqrt(D),  z_i = Σ_j α_ij (v_j + a^V_ij),
    a_ij = w[clip(j - i, -K, K)] with K = ``max_distance``: distances past K share the edge row.
    One (2K+1, D) table per term, shared by heads (as in the paper); ``values=False`` drops a^V.
    Tables start N(0, 0.02²). Indices come from positions, so cached decoding is exact.
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
        for table in (self.key_table, self.value_table):
            if table is not None:
                nn.init.normal_(table, std=0.02)

    def index(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Table rows clip(j - i, -K, K) + K: (Tq, Tk) or (B, Tq, Tk)."""
        return PF.shaw_relative_index(q_pos, k_pos, max_distance=self.max_distance)

    def relative_logits(
        self, scores: Tensor, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, *, ctx: Ctx = None
    ) -> Tensor:
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.head_dim, scores)
        scaled = q / math.sqrt(self.head_dim)  # scale the (B, H, Tq, D) factor, not the logits
        return scores + PF.relative_key_logits(
            scaled, self.key_table.to(q.dtype), self.index(q_pos, k_pos)
        )  # (B, H, Tq, Tk)

    def relative_values(
        self, probs: Tensor, q_pos: Tensor, k_pos: Tensor, *, ctx: Ctx = None
    ) -> Tensor | None:
        if self.value_table is None:
            return None
        if ctx is None:  # a context's positions were checked by whoever built it
            check_ndim(probs, 4, "probs", "(B, H, Tq, Tk)")
            check_real_floating(probs, "probs")
            q_pos, k_pos = check_positions(q_pos, "q_pos"), check_positions(k_pos, "k_pos")
            check_positions_match(q_pos, probs.shape[0], probs.shape[2], "q_pos")
            check_positions_match(k_pos, probs.shape[0], probs.shape[3], "k_pos")
        return PF.relative_value_output(probs, self.value_table, self.index(q_pos, k_pos))


@register("transformer_xl", family="relative", paper="Dai et al., arXiv:1901.02860", year=2019)
class TransformerXL(PositionalEncoding):
    """Transformer-XL relative attention (Dai et al. 2019, sec. 3.3):

    A_ij = q_i·k_j + q_i·W_R R_(i-j) + u·k_j + v·W_R R_(i-j), all divided by sqrt(D),
    R_p the sinusoidal row (width C = ``dim``) of offset p = i - j, W_R (H·D, C) shared by the
    layers using this encoding, u, v (H, D) the global content and position biases. Parameters
    start N(0, 0.02²) as in the paper's code. Offsets come from positions (cached decoding works).
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
        for p in (self.r_proj, self.u, self.v):
            nn.init.normal_(p, std=0.02)

    def relative_logits(
        self, scores: Tensor, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, *, ctx: Ctx = None
    ) -> Tensor:
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.head_dim, scores)
        for what, x in (("q", q), ("k (key heads repeated)", k)):
            if x.shape[1] != self.n_heads:
                raise ValueError(f"{what} must have n_heads={self.n_heads} heads, got {x.shape[1]}")
        scale = 1.0 / math.sqrt(self.head_dim)  # on the factors q, u, v, not the (Tq, Tk) terms
        terms = PF.transformer_xl_terms(
            q * scale,
            k,
            q_pos,
            k_pos,
            r_proj=self.r_proj.to(q.dtype),
            u=self.u.to(q.dtype) * scale,
            v=self.v.to(q.dtype) * scale,
            base=self.base,
            rows=None if ctx is None else self._rows(ctx, q.dtype),
        )  # (B, H, Tq, Tk), already divided by sqrt(D)
        return scores + terms

    def _rows(self, ctx: PositionContext, dtype: torch.dtype) -> tuple[int, Tensor]:
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
