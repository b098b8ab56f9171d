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
    "KVCache": "posenc.attention",
    "TinyTransformer": "posenc.attention",
    "EncoderDecoder": "posenc.attention",
    "positions_from_padding": "posenc.attention",
    "packed_positions": "posenc.attention",
    "decode_positions": "posenc.attention",
    "grid_positions": "posenc.attention",
    "mrope_positions": "posenc.attention",
    "rope_from_hf": "posenc.encodings.hf",
    "rope_to_hf": "posenc.encodings.hf",
    "attention_from_hf": "posenc.encodings.hf_attention",
}
_SUBMODULES = (
    "functional",
    "encodings",
    "attention",
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
        plots,
        registry,
    )
    from . import eval as eval
    from .attention import (
        Attention,
        EncoderDecoder,
        KVCache,
        TinyTransformer,
        decode_positions,
        grid_positions,
        mrope_positions,
        packed_positions,
        positions_from_padding,
    )
    from .encodings.base import PositionalEncoding
    from .encodings.hf import rope_from_hf, rope_to_hf
    from .encodings.hf_attention import attention_from_hf
    from .registry import build, build_for_model, info, names, register


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"posenc.{name}")
    raise AttributeError(f"module 'posenc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
