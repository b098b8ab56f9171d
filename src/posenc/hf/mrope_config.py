"""M-RoPE from a Qwen-VL config (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): what ``rope_from_hf`` returns
for them, read as transformers 5.23's rotary embeddings read the config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..encodings.mrope import MRoPE
from ..functional import Layout

#: Qwen-VL model types (their ``*_text`` language models too) -> (default ``mrope_section``,
#: interleaved): transformers falls back to these sections when the config omits them.
MROPE_MODEL_TYPES: dict[str, tuple[tuple[int, int, int], bool]] = {
    "qwen2_vl": ((16, 24, 24), False),
    "qwen2_5_vl": ((16, 24, 24), False),
    "qwen3_vl": ((24, 20, 20), True),
    "qwen3_vl_moe": ((24, 20, 20), True),
}


def _family(cfg: Mapping[str, Any]) -> str:
    return str(cfg.get("model_type") or "").removesuffix("_text")


def is_mrope(cfg: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """Whether a config's rope parameters describe M-RoPE: a Qwen-VL model type, an
    ``mrope_section`` or ``mrope_interleaved``, or the older ``"type": "mrope"``."""
    return (
        _family(cfg) in MROPE_MODEL_TYPES
        or "mrope_section" in params
        or "mrope_interleaved" in params
        or (params.get("rope_type") == "mrope")
    )


def mrope_from_hf(
    cfg: Mapping[str, Any], params: Mapping[str, Any], head_dim: int, layout: Layout | None
) -> MRoPE:
    """The ``mrope`` encoding of rope ``params`` (flattened by ``rope_from_hf``): base
    ``rope_theta``, ``mrope_section`` (default: the model type's, as transformers'), and
    Qwen3-VL's interleaved sections (its rotary embedding always interleaves; other models
    when ``mrope_interleaved`` says so).
    Raises: ValueError for a scaling method or partial rotary with M-RoPE."""
    sections, interleaved = MROPE_MODEL_TYPES.get(_family(cfg), (None, False))
    if params["rope_type"] not in ("default", "mrope"):
        raise ValueError(
            f"rope_type {params['rope_type']!r} with M-RoPE is not supported; posenc reads "
            "M-RoPE without context extension"
        )
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial_rotary_factor with M-RoPE is not supported")
    return MRoPE(
        head_dim=head_dim,
        base=float(params["rope_theta"]),
        mrope_section=params.get("mrope_section") or sections,
        interleaved=interleaved or bool(params.get("mrope_interleaved", False)),
        layout=layout or "half",
    )
