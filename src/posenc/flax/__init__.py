"""posenc.flax: the encodings, attention, TinyTransformer and EncoderDecoder as Flax nnx
modules, with the torch modules' names, hooks, parameters, configurations and
``posenc.functional`` formulas, and weight conversion both ways. Needs
``pip install "posenc[jax]"``; the core package never imports JAX."""

try:
    import flax.nnx  # noqa: F401
    import jax  # noqa: F401
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "posenc.flax needs JAX and Flax: pip install 'posenc[jax]' "
        f"(jax>=0.4.30, flax>=0.11); import failed with: {err}"
    ) from err

from ..attention.flow import CachedKeys, Memory
from .attention import Attention
from .base import ENCODINGS, PositionalEncoding, PositionContext, build, build_for_model
from .convert import load_torch_state_dict, to_torch_state_dict
from .encoder_decoder import DecoderBlock, EncoderDecoder
from .encodings import Learned, NoPE, PoPE, PRoPE, RoPE, Sinusoidal, XPos
from .grid import Learned2D, MRoPE, RoPE2D, RoPE3D, RoPEMixed, Sincos2D
from .kv_cache import KVCache
from .model import Block, TinyTransformer
from .randomized import Randomized
from .scores import FIRE, ALiBi, CoPE, Kerple, Shaw, T5Bias, TransformerXL
from .train import decoder_arrays, greedy_decode, train_decoder

__all__ = [
    "ENCODINGS",
    "FIRE",
    "ALiBi",
    "Attention",
    "Block",
    "CachedKeys",
    "CoPE",
    "DecoderBlock",
    "EncoderDecoder",
    "KVCache",
    "Kerple",
    "Learned",
    "Learned2D",
    "MRoPE",
    "Memory",
    "NoPE",
    "PRoPE",
    "PoPE",
    "PositionContext",
    "PositionalEncoding",
    "Randomized",
    "RoPE",
    "RoPE2D",
    "RoPE3D",
    "RoPEMixed",
    "Shaw",
    "Sincos2D",
    "Sinusoidal",
    "T5Bias",
    "TinyTransformer",
    "TransformerXL",
    "XPos",
    "build",
    "build_for_model",
    "decoder_arrays",
    "greedy_decode",
    "load_torch_state_dict",
    "to_torch_state_dict",
    "train_decoder",
]
