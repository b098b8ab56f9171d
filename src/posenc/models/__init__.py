"""Models built from ``posenc.attention`` layers: ``TinyTransformer`` (decoder-only or
bidirectional), ``EncoderDecoder``, and token generation (``Sampling``)."""

from .encoder_decoder import EncoderDecoder
from .generate import Sampling
from .transformer import TinyTransformer

__all__ = ["EncoderDecoder", "Sampling", "TinyTransformer"]
