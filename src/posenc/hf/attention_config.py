"""What a Hugging Face config says about attention outside the RoPE rotation.

``rope_from_hf`` reads the rotation; three settings act elsewhere, and ``attention_from_hf``
reads them so that none is dropped:

- DeepSeek-V2/V3 (and the other multi-head latent attention models) multiply the softmax scale
  by mscale(s, ``mscale_all_dim``)² under YaRN: ``logit_scale``.
- Llama 4 (iRoPE) has layers without positions (``no_rope_layers``: 0 marks one) and scales
  their queries by a temperature growing with the position (``attn_temperature_tuning``).
- Ministral 3 scales every layer's queries the same way (``llama_4_scaling_beta`` in its
  ``rope_parameters``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..extension.config import ScalingConfig
from ..extension.scaling import yarn_mscale
from .rope_config import _as_dict, _rope_params, _scaling

__all__ = ["MSCALE_SOFTMAX_MODEL_TYPES", "HFAttention", "QueryScale", "attention_from_hf"]

#: Architectures whose attention multiplies its softmax scale by mscale(s, mscale_all_dim)²
#: (transformers' ``yarn_apply_mscale``); Ministral 3, whose config also holds the key, does not.
MSCALE_SOFTMAX_MODEL_TYPES = frozenset(
    {
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "glm4_moe_lite",
        "glm_moe_dsa",
        "longcat_flash",
        "minicpm3",
        "mistral4",
        "mistral_large4",
        "youtu",
    }
)
#: Llama4TextConfig's defaults for the keys a config.json may omit.
_LLAMA4_DEFAULTS = {
    "no_rope_layer_interval": 4,
    "attn_temperature_tuning": True,
    "floor_scale": 8192,
    "attn_scale": 0.1,
}


@dataclass(frozen=True, kw_only=True)
class QueryScale:
    """Query temperature: q at position m multiplied by 1 + β·ln(1 + ⌊(m + offset) / L⌋).

    Llama 4's attention temperature tuning on its no-position layers (β = ``attn_scale``,
    L = ``floor_scale``, offset 1; m counted from the cache length, Meta 2025 after
    Nakanishi 2025, arXiv:2501.19399); Ministral 3's on every layer (β =
    ``llama_4_scaling_beta``, L = ``original_max_position_embeddings``, offset 0; m =
    position_ids). Within the first L positions the factor is 1.
    """

    beta: float
    length: int
    offset: int = 0

    def __call__(self, pos: Tensor) -> Tensor:
        """Factors (...) in float64 for int64 positions (...)."""
        return 1.0 + self.beta * torch.log1p(
            torch.floor((pos.double() + self.offset) / self.length)
        )


@dataclass(frozen=True, kw_only=True)
class HFAttention:
    """Attention settings of a config beside its rotation.

    ``logit_scale`` multiplies q·k/√d (outside the rotation; 1.0 for most models).
    ``nope_layers``: indices of layers that do not rotate (no positions). ``query_scale`` and
    ``query_scale_layers``: the query temperature and the layers that apply it.
    """

    logit_scale: float = 1.0
    nope_layers: tuple[int, ...] = ()
    query_scale: QueryScale | None = None
    query_scale_layers: tuple[int, ...] = ()


def attention_from_hf(
    config: Any, *, scaling: ScalingConfig | Mapping[str, Any] | None = None
) -> HFAttention:
    """The attention settings of a Hugging Face config (``config.json`` dict or object) that
    act outside the rotation ``rope_from_hf`` reads; ``scaling`` replaces the config's scaling
    as in ``rope_from_hf`` (the softmax scale follows it).

    Raises: as ``rope_from_hf`` for the config's rope parameters.
    """
    cfg = _as_dict(config)
    model_type = cfg.get("model_type")
    n_layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or 0)
    if model_type in ("llama4", "llama4_text"):
        return _llama4(cfg, n_layers)
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if cfg.get("rope_local_base_freq") is not None or any(
        isinstance(v, Mapping) for v in rope.values()
    ):  # per-layer rope parameters (Gemma 3): none of these settings applies
        return HFAttention()
    params = _rope_params(cfg, None, scaling)
    logit_scale = 1.0
    mscale_all_dim = params.get("mscale_all_dim")
    scaled = model_type in MSCALE_SOFTMAX_MODEL_TYPES and params["rope_type"] != "default"
    if scaled and mscale_all_dim:
        spec = _scaling(cfg, params) or {}
        logit_scale = yarn_mscale(float(spec["factor"]), float(mscale_all_dim)) ** 2
    beta = params.get("llama_4_scaling_beta")
    if beta is None:
        return HFAttention(logit_scale=logit_scale)
    spec = _scaling(cfg, params) or {}
    length: Any = spec.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
    return HFAttention(
        logit_scale=logit_scale,
        query_scale=QueryScale(beta=float(beta), length=int(length), offset=0),
        query_scale_layers=tuple(range(n_layers)),
    )


def _llama4(cfg: Mapping[str, Any], n_layers: int) -> HFAttention:
    """Llama 4: ``no_rope_layers[i]`` is 1 where layer i rotates (default: every layer but
    each ``no_rope_layer_interval``-th); temperature tuning on the others."""
    values: dict[str, Any] = {**_LLAMA4_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    get = values.__getitem__
    interval = int(get("no_rope_layer_interval"))
    uses_rope = values.get("no_rope_layers") or [
        int((i + 1) % interval != 0) for i in range(n_layers)
    ]
    nope = tuple(i for i, use in enumerate(uses_rope) if not use)
    if not get("attn_temperature_tuning") or not nope:
        return HFAttention(nope_layers=nope)
    scale = QueryScale(beta=float(get("attn_scale")), length=int(get("floor_scale")), offset=1)
    return HFAttention(nope_layers=nope, query_scale=scale, query_scale_layers=nope)
