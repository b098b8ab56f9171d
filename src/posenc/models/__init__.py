"""Models built from ``posenc.attention`` layers: ``TinyTransformer`` (decoder-only or
bidirectional; one encoding per layer by a ``LayerSchedule``, with presets of shipped models'
schedules: ``irope``, ``rnope_swa``, ``smollm3``, ``gemma2``, ``gemma3``), ``EncoderDecoder``,
token generation (``Sampling``), and the per-layer key/value cache (``KVCache``)."""

from .._schedule import LayerSchedule, gemma2, gemma3, irope, rnope_swa, smollm3
from .encoder_decoder import EncoderDecoder
from .generate import Sampling
from .kv_cache import KVCache
from .transformer import TinyTransformer

__all__ = [
    "EncoderDecoder",
    "KVCache",
    "LayerSchedule",
    "Sampling",
    "TinyTransformer",
    "gemma2",
    "gemma3",
    "irope",
    "rnope_swa",
    "smollm3",
]
