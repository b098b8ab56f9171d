"""Attention with explicit positions (``Attention``: self-attention, and cross-attention over an
encoder's ``Memory``), its backends and KV cache, and the position helpers."""

from .attention import Attention, Memory
from .kv_cache import CachedKeys, KVCache
from .multimodal import mrope_positions
from .positions import decode_positions, grid_positions, packed_positions, positions_from_padding

__all__ = [
    "Attention",
    "CachedKeys",
    "KVCache",
    "Memory",
    "decode_positions",
    "grid_positions",
    "mrope_positions",
    "packed_positions",
    "positions_from_padding",
]
