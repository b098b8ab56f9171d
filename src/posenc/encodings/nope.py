"""NoPE: no positional encoding (Kazemnejad et al. 2023, arXiv:2305.19466)."""

from __future__ import annotations

from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import NoPETemperatureConfig
from .flows import QueryTemperatureFlow


@register("nope", family="none", paper="Kazemnejad et al., arXiv:2305.19466", year=2023)
class NoPE(PositionalEncoding):
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
class NoPETemperature(QueryTemperatureFlow, PositionalEncoding):
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
