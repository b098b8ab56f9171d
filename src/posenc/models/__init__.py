"""Models built from ``posenc.attention`` layers: ``TinyTransformer`` (decoder-only or
bidirectional; one encoding per layer by a ``LayerSchedule``, with presets of shipped models'
schedules: ``irope``, ``rnope_swa``, ``smollm3``, ``gemma2``, ``gemma3``), ``EncoderDecoder``,
and token generation (``Sampling``)."""

from .._schedule import LayerSchedule, gemma2, gemma3, irope, rnope_swa, smollm3
from .encoder_decoder import EncoderDecoder
from .generate import Sampling
from .transformer import TinyTransformer

__all__ = [
    "EncoderDecoder",
    "LayerSchedule",
    "Sampling",
    "TinyTransformer",
    "gemma2",
    "gemma3",
    "irope",
    "rnope_swa",
    "smollm3",
]
