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

from .absolute import Learned, Learned2D, Sincos2D, Sinusoidal
from .attention import Attention
from .base import ENCODINGS, PositionalEncoding, PositionState, build, build_for_model
from .bias import FIRE, ALiBi, Kerple, T5Bias
from .contextual import CoPE
from .convert import load_torch_state_dict, to_torch_state_dict
from .data_dependent import DataDependent, ForgettingAttention, PaTH, StickBreaking
from .encoder_decoder import DecoderBlock, EncoderDecoder
from .grid_rotary import MRoPE, RoPE2D, RoPE3D, RoPEMixed
from .kv_cache import CachedKeys, KVCache, Memory
from .model import Block, TinyTransformer
from .nope import NoPE, NoPETemperature
from .pope import PoPE
from .randomized import Randomized
from .relative import Shaw, TransformerXL
from .rotary import PRoPE, RoPE, RotaryState
from .train import decoder_arrays, greedy_decode, train_decoder
from .xpos import XPos

__all__ = [
    "ENCODINGS",
    "FIRE",
    "ALiBi",
    "Attention",
    "Block",
    "CachedKeys",
    "CoPE",
    "DataDependent",
    "DecoderBlock",
    "EncoderDecoder",
    "ForgettingAttention",
    "KVCache",
    "Kerple",
    "Learned",
    "Learned2D",
    "MRoPE",
    "Memory",
    "NoPE",
    "NoPETemperature",
    "PRoPE",
    "PaTH",
    "PoPE",
    "PositionState",
    "PositionalEncoding",
    "Randomized",
    "RoPE",
    "RoPE2D",
    "RoPE3D",
    "RoPEMixed",
    "RotaryState",
    "Shaw",
    "Sincos2D",
    "Sinusoidal",
    "StickBreaking",
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
