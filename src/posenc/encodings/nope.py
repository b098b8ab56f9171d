"""NoPE: no positional encoding (Kazemnejad et al. 2023, arXiv:2305.19466)."""

from __future__ import annotations

from torch import Tensor

from .. import functional as PF
from .._validate import check_ndim, check_positions, check_positions_match
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import NoPETemperatureConfig
from .rotary import work_dtype
from .state import PositionState


@register("nope", family="none", paper="Kazemnejad et al., arXiv:2305.19466", year=2023)
class NoPE(PositionalEncoding[PositionState]):
    """No position information: every hook is the identity.

    A causal decoder still infers position from its mask (Kazemnejad et al. 2023); an encoder
    is permutation-equivariant.
    Shapes: every hook returns its inputs unchanged
    (``embed``: x (B, T, C); ``rotate``: q (B, H, Tq, D), k (B, Hkv, Tk, D)); ``bias`` is None.
    """

    capabilities = Capabilities()


@register(
    "nope_temperature",
    family="none",
    paper="Meta AI, Llama 4 (transformers llama4, after Nakanishi, arXiv:2501.19399)",
    year=2025,
)
class NoPETemperature(PositionalEncoding[PositionState]):
    """NoPE with Llama 4's query temperature on its NoPE layers.

    The query at position p is scaled by (Meta 2025; after Nakanishi 2025, arXiv:2501.19399)
    τ(p) = log(⌊(p + 1) / floor_scale⌋ + 1) · attn_scale + 1

    (``posenc.functional.query_temperature``; transformers ``Llama4TextAttention`` with
    ``attn_temperature_tuning`` on its NoPE layers, defaults 8192 and 0.1), keys unchanged.
    Below floor_scale - 1 it is NoPE exactly; past it the logits sharpen with the log of the
    position. Positions are posenc's explicit ones (transformers reads the cache index: the
    same for unpadded rows).

    Shapes: ``rotate`` q (B, H, T, D), k (B, Hkv, L, D), q_pos (T,) | (B, T) -> q scaled, k.
    Raises: ValueError for a floor_scale < 1 or attn_scale <= 0 (the config), and from
    ``rotate`` for q not 4-D or positions that disagree with it.
    """

    capabilities = Capabilities(rotates=True)  # its ``rotate`` scales the queries
    config_class = NoPETemperatureConfig
    config: NoPETemperatureConfig

    def rotate(
        self,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: PositionState | None = None,
    ) -> tuple[Tensor, Tensor]:
        """τ(q_pos) q, k: the product in float32 (float64 for float64 queries), back in q's
        dtype, as transformers'.

        Shapes: q (B, H, T, D), k (B, Hkv, L, D), q_pos (T,) | (B, T) -> q scaled, k.
        Raises: ValueError for q not 4-D or positions that disagree with it (without ``ctx``).
        """
        if ctx is None:
            check_ndim(q, 4, "q", "(B, H, T, D)")
            q_pos = check_positions(q_pos, "q_pos")
            check_positions_match(q_pos, q.shape[0], q.shape[2], "q_pos")
        else:
            q_pos = ctx.q_pos
        c, wide = self.config, work_dtype(q.dtype)
        tau = PF.query_temperature(
            q_pos, floor_scale=c.floor_scale, attn_scale=c.attn_scale, dtype=wide
        )  # (T,) | (B, T)
        tau = tau[:, None, :, None] if tau.ndim == 2 else tau[None, None, :, None]  # (B|1,1,T,1)
        return (q.to(wide) * tau).to(q.dtype), k
