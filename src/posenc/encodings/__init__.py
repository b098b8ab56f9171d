"""Encoding modules, one per family. ``posenc.registry`` imports each of ``MODULES`` on first
use, which registers its encodings (kept lazy here to avoid an import cycle)."""

from .base import PositionalEncoding

#: Modules of ``posenc.encodings`` whose import registers encodings.
MODULES: tuple[str, ...] = (
    "nope",
    "absolute",
    "rotary",
    "grid_rotary",
    "mrope",
    "grid_tables",
    "bias",
    "relative",
    "xpos",
    "pope",
    "randomized",
    "contextual",
    "data_dependent",
)

__all__ = ["MODULES", "PositionalEncoding"]
