"""Relative encodings that rewrite attention logits: Shaw et al. 2018 and Transformer-XL."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import functional as PF
from .._validate import (
    check_ndim,
    check_positions,
    check_positions_match,
    check_real_floating,
    check_scores,
)
from ..registry import register
from .base import PositionalEncoding, check_qk
from .capabilities import Capabilities
from .configs import ShawConfig, TransformerXLConfig
from .state import InDtype, PositionState

#: Transformer-XL's W_R R rows: (lo, (H, R, D)) for the offsets lo..lo + R - 1.
Rows = tuple[int, Tensor]


@dataclass(frozen=True, eq=False, kw_only=True)
class TransformerXLState(PositionState):
    """Transformer-XL's state of one forward: the W_R R rows of every offset its positions
    meet (``rows``, made on first use in the dtype of the first layer's q), sliced by every
    layer and query block."""

    rows: InDtype[Rows]


@register("shaw", family="relative", paper="Shaw et al., arXiv:1803.02155", year=2018)
class Shaw(PositionalEncoding[PositionState]):
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
    config: ShawConfig

    def __init__(self, **config: object) -> None:
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

    def index(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Table rows clip(j - i, -K, K) + K: (Tq, Tk) or (B, Tq, Tk)."""
        return PF.shaw_relative_index(q_pos, k_pos, max_distance=self.config.max_distance)

    def relative_logits(
        self,
        scores: Tensor,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: PositionState | None = None,
    ) -> Tensor:
        """scores + q_i·a^K_ij / sqrt(D) (inputs checked without ``ctx``).

        Shapes: scores (B, H, Tq, Tk), q (B, H, Tq, D), k (B, H, Tk, D) -> (B, H, Tq, Tk).
        Raises: ValueError/TypeError for inputs that do not fit (without ``ctx``).
        """
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.config.head_dim)
            check_scores(scores, q, k)
        scaled = q / math.sqrt(self.config.head_dim)  # scale the (B, H, Tq, D) factor
        table = self.key_table.to(q.dtype)
        return scores + PF.relative_key_logits(scaled, table, self.index(q_pos, k_pos))

    def relative_values(
        self, probs: Tensor, q_pos: Tensor, k_pos: Tensor, *, ctx: PositionState | None = None
    ) -> Tensor | None:
        """Σ_j α_ij a^V_ij (None without the value table; inputs checked without ``ctx``).

        Shapes: probs (B, H, Tq, Tk) -> (B, H, Tq, D).
        Raises: ValueError/TypeError for inputs that do not fit (without ``ctx``).
        """
        if self.value_table is None:
            return None
        if ctx is None:  # a state's positions were checked by whoever built it
            check_ndim(probs, 4, "probs", "(B, H, Tq, Tk)")
            check_real_floating(probs, "probs")
            q_pos, k_pos = check_positions(q_pos, "q_pos"), check_positions(k_pos, "k_pos")
            check_positions_match(q_pos, probs.shape[0], probs.shape[2], "q_pos")
            check_positions_match(k_pos, probs.shape[0], probs.shape[3], "k_pos")
        table = self.value_table
        return PF.relative_value_output(probs, table, self.index(q_pos, k_pos))  # (B, H, Tq, D)


@register("transformer_xl", family="relative", paper="Dai et al., arXiv:1901.02860", year=2019)
class TransformerXL(PositionalEncoding[TransformerXLState]):
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
    config: TransformerXLConfig

    def __init__(self, **config: object) -> None:
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

    @property
    def head_dim(self) -> int:
        """D, the config's (dim // n_heads unless given).

        Raises: ValueError if the config left it unset (it never does).
        """
        D = self.config.head_dim
        if D is None:  # (the config fills it in: never)
            raise ValueError("TransformerXLConfig.head_dim was not filled in")
        return D

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> TransformerXLState:
        """The forward's ``TransformerXLState`` (its rows made on first use, in the dtype
        of the first layer's q: ``dtype``, the activations').

        Shapes: q_pos (T,) | (B, T), k_pos (L,) | (B, L) int64 (validated) -> the state.
        """
        keys = q_pos if k_pos is None else k_pos
        bounds = offset_bounds
        return TransformerXLState(
            q_pos=q_pos,
            k_pos=keys,
            offset_bounds=offset_bounds,
            keys_are_queries=k_pos is None or k_pos is q_pos,
            rows=InDtype(lambda work: self.rows(q_pos, keys, bounds, work)),
        )

    def relative_logits(
        self,
        scores: Tensor,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: TransformerXLState | None = None,
    ) -> Tensor:
        """scores + (q_i·W_R R_(i-j) + u·k_j + v·W_R R_(i-j)) / sqrt(D) (inputs checked without
        ``ctx``; with it, the rows of the whole call, sliced to these positions).

        Shapes: scores (B, H, Tq, Tk), q (B, H, Tq, D), k (B, H, Tk, D) -> (B, H, Tq, Tk).
        Raises: ValueError when q or k has other than n_heads heads, and for inputs that do
        not fit (without ``ctx``).
        """
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.head_dim)
            check_scores(scores, q, k)
        n_heads = self.config.n_heads
        for what, x in (("q", q), ("k (key heads repeated)", k)):
            if x.shape[1] != n_heads:
                raise ValueError(f"{what} must have n_heads={n_heads} heads, got {x.shape[1]}")
        rows = None if ctx is None else ctx.rows.get(q.dtype)  # the whole call's, once
        scale = 1.0 / math.sqrt(self.head_dim)  # on the factors q, u, v, not the terms
        return scores + PF.transformer_xl_terms(
            q * scale,
            k,
            q_pos,
            k_pos,
            r_proj=self.r_proj.to(q.dtype),
            u=self.u.to(q.dtype) * scale,
            v=self.v.to(q.dtype) * scale,
            base=self.config.base,
            rows=rows,
        )  # (B, H, Tq, Tk), already divided by sqrt(D)

    def rows(
        self,
        q_pos: Tensor,
        k_pos: Tensor,
        offset_bounds: tuple[int, int] | None,
        dtype: torch.dtype,
    ) -> Rows:
        """(lo, W_R R) for every offset lo..hi that the positions meet, (H, R, D): computed
        once per forward and sliced by every layer and query block (each would otherwise redo
        a (R, C) x (C, H·D) product). The range is taken per row: rows at far-apart positions
        span only their own offsets. The range is ``offset_bounds`` when the state's maker
        knows them, else one host read of the extremes."""
        if offset_bounds is not None and q_pos.numel() and k_pos.numel():
            lo, hi = offset_bounds
        elif q_pos.numel() and k_pos.numel():  # (T,) | (B, T) -> () | (B,) per-row extremes
            ends = torch.stack(
                [(q_pos.amin(-1) - k_pos.amax(-1)).min(), (q_pos.amax(-1) - k_pos.amin(-1)).max()]
            )
            lo, hi = (int(e) for e in ends.tolist())
            torch._check(lo <= hi)  # (traced: the range is not empty)
        else:  # no pair (T = 0): no rows
            lo, hi = 0, -1
        rows = PF.transformer_xl_position_rows(
            lo, hi, r_proj=self.r_proj, n_heads=self.config.n_heads, dtype=dtype,
            base=self.config.base,
        )  # fmt: skip
        return lo, rows
