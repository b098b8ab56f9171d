"""Flax NoPE and NoPE with Llama 4's query temperature: torch's ``posenc.encodings.nope``."""

from __future__ import annotations

import jax

from .. import functional as PF
from .._validate import check_positions_match
from ..encodings import configs
from .base import (
    PositionalEncoding,
    PositionState,
    check_ndim,
    check_positions,
    register,
    tables_dtype,
)

Array = jax.Array


@register(configs.EncodingConfig)
class NoPE(PositionalEncoding[PositionState]):
    """As torch's ``NoPE``: identity hooks."""


@register(configs.NoPETemperatureConfig)
class NoPETemperature(PositionalEncoding[PositionState]):
    """As torch's ``NoPETemperature``: queries at position p scaled by Llama 4's temperature
    τ(p) (``PF.query_temperature``), keys unchanged: q_i·k_j becomes τ(i) q_i·k_j. The product
    runs in float32 (float64 for float64 queries) and returns in q's dtype, as transformers'.

    Shapes: q (B, H, T, D), q_pos (T,) | (B, T)."""

    config: configs.NoPETemperatureConfig

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: PositionState | None = None
    ) -> tuple[Array, Array]:
        if ctx is None:
            check_ndim(q, 4, "q", "(B, H, T, D)")
            q_pos = check_positions(q_pos, "q_pos")
            check_positions_match(q_pos, q.shape[0], q.shape[2], "q_pos")
        c, wide = self.config, tables_dtype(q.dtype)
        tau = PF.query_temperature(
            q_pos, floor_scale=c.floor_scale, attn_scale=c.attn_scale, dtype=wide
        )  # (T,) | (B, T)
        tau = tau[:, None, :, None] if tau.ndim == 2 else tau[None, None, :, None]  # (B|1,1,T,1)
        return (q.astype(wide) * tau).astype(q.dtype), k
