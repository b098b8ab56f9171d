"""posenc.extension: context extension for rotary encodings (PI, NTK, dynamic NTK, YaRN,
LongRoPE, Llama 3), as pure functions and validated configs. (Hugging Face config readers,
which build ``RoPE`` modules, are ``posenc.hf.rope_config``: this package stays below encodings.)"""

from .config import (
    SCALINGS,
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRoPEScaling,
    NTKScaling,
    ScalingConfig,
    YaRNScaling,
    scaling_config,
)
from .scaling import METHODS, Scaled, dynamic, linear, llama3, longrope, ntk, yarn

__all__ = [
    "METHODS",
    "SCALINGS",
    "DynamicNTKScaling",
    "LinearScaling",
    "Llama3Scaling",
    "LongRoPEScaling",
    "NTKScaling",
    "Scaled",
    "ScalingConfig",
    "YaRNScaling",
    "dynamic",
    "linear",
    "llama3",
    "longrope",
    "ntk",
    "scaling_config",
    "yarn",
]
