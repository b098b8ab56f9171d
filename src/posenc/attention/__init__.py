"""Attention with explicit positions (``Attention``: self-attention; its sibling
``CrossAttention``: over an encoder's ``Memory``), its backends, what it needs from a KV cache
(``KeyValueCache``; the cache itself is ``posenc.models.KVCache``), and the position helpers."""

from .attention import Attention, Memory
from .cache import KeyValueCache
from .cross import CrossAttention
from .keys import CachedKeys
from .multimodal import mrope_positions
from .positions import decode_positions, grid_positions, packed_positions, positions_from_padding

__all__ = [
    "Attention",
    "CachedKeys",
    "CrossAttention",
    "KeyValueCache",
    "Memory",
    "decode_positions",
    "grid_positions",
    "mrope_positions",
    "packed_positions",
    "positions_from_padding",
]
