"""NoPE: no positional encoding (Kazemnejad et al. 2023, arXiv:2305.19466)."""

from __future__ import annotations

from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities


@register("nope", family="none", paper="Kazemnejad et al., arXiv:2305.19466", year=2023)
class NoPE(PositionalEncoding):
    """No position information: every hook is the identity.

    A causal decoder still infers position from its mask (Kazemnejad et al. 2023); an encoder
    is permutation-equivariant.
    Shapes: every hook returns its inputs unchanged
    (``embed``: x (B, T, C); ``rotate``: q (B, H, Tq, D), k (B, Hkv, Tk, D)); ``bias`` is None.
    """

    capabilities = Capabilities()
