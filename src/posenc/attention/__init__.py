"""Attention with explicit positions, its KV cache, position helpers, TinyTransformer,
EncoderDecoder and generation."""

from .attention import Attention, Memory
from .encoder_decoder import EncoderDecoder
from .generate import Sampling
from .kv_cache import CachedKeys, KVCache
from .model import TinyTransformer
from .multimodal import mrope_positions
from .positions import decode_positions, grid_positions, packed_positions, positions_from_padding

__all__ = [
    "Attention",
    "CachedKeys",
    "EncoderDecoder",
    "KVCache",
    "Memory",
    "Sampling",
    "TinyTransformer",
    "decode_positions",
    "grid_positions",
    "mrope_positions",
    "packed_positions",
    "positions_from_padding",
]
