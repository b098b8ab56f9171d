"""Attention with explicit positions, its KV cache, position helpers and TinyTransformer."""

from .attention import Attention
from .kv_cache import CachedKeys, KVCache
from .model import TinyTransformer
from .multimodal import mrope_positions
from .positions import decode_positions, grid_positions, packed_positions, positions_from_padding

__all__ = [
    "Attention",
    "CachedKeys",
    "KVCache",
    "TinyTransformer",
    "decode_positions",
    "grid_positions",
    "mrope_positions",
    "packed_positions",
    "positions_from_padding",
]
