"""posenc: every positional encoding for transformers behind one interface.

Public API (imported lazily, so ``posenc --help`` does not load torch):
``names()``, ``build(name, **config)``, ``info(name)``, ``build_for_model``,
``PositionalEncoding``, ``Attention``, ``KVCache``, ``TinyTransformer``, ``EncoderDecoder``,
position helpers (``grid_positions``, ``mrope_positions``, ...), ``rope_from_hf``; submodules
``functional``, ``extension``, ``analysis``, ``plots``, ``lab``, ``eval``, ``hf`` (patch a
transformers model), ``convert`` (checkpoint layouts).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

_LAZY = {
    "names": "posenc.registry",
    "build": "posenc.registry",
    "build_for_model": "posenc.registry",
    "info": "posenc.registry",
    "register": "posenc.registry",
    "PositionalEncoding": "posenc.encodings.base",
    "Attention": "posenc.attention",
    "KVCache": "posenc.models",
    "TinyTransformer": "posenc.models",
    "EncoderDecoder": "posenc.models",
    "positions_from_padding": "posenc.attention",
    "packed_positions": "posenc.attention",
    "decode_positions": "posenc.attention",
    "grid_positions": "posenc.attention",
    "mrope_positions": "posenc.attention",
    "rope_from_hf": "posenc.hf.rope_config",
    "rope_to_hf": "posenc.hf.rope_config",
    "attention_from_hf": "posenc.hf.attention_config",
}
_SUBMODULES = (
    "functional",
    "encodings",
    "attention",
    "models",
    "registry",
    "extension",
    "analysis",
    "plots",
    "lab",
    "eval",
    "hf",
    "convert",
)

__all__ = [
    "Attention",
    "EncoderDecoder",
    "KVCache",
    "PositionalEncoding",
    "TinyTransformer",
    "__version__",
    "analysis",
    "attention",
    "attention_from_hf",
    "build",
    "build_for_model",
    "convert",
    "decode_positions",
    "encodings",
    "eval",
    "extension",
    "functional",
    "grid_positions",
    "hf",
    "info",
    "lab",
    "models",
    "mrope_positions",
    "names",
    "packed_positions",
    "plots",
    "positions_from_padding",
    "register",
    "registry",
    "rope_from_hf",
    "rope_to_hf",
]

if TYPE_CHECKING:
    from . import (
        analysis,
        attention,
        convert,
        encodings,
        extension,
        functional,
        hf,
        lab,
        models,
        plots,
        registry,
    )
    from . import eval as eval
    from .attention import (
        Attention,
        decode_positions,
        grid_positions,
        mrope_positions,
        packed_positions,
        positions_from_padding,
    )
    from .encodings.base import PositionalEncoding
    from .hf.attention_config import attention_from_hf
    from .hf.rope_config import rope_from_hf, rope_to_hf
    from .models import EncoderDecoder, KVCache, TinyTransformer
    from .registry import build, build_for_model, info, names, register


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"posenc.{name}")
    raise AttributeError(f"module 'posenc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
