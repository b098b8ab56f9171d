"""Read and write the RoPE settings of a Hugging Face ``config.json`` (or config object).

``rope_from_hf(config)`` returns a ``rope`` encoding whose ``rotate`` equals the model's rotary
embedding + ``apply_rotary_pos_emb``. Both schemas are read: the older top-level ``rope_theta``
+ ``rope_scaling`` ({"type" | "rope_type", ...}) and the transformers >= 5 ``rope_parameters``
(theta and ``partial_rotary_factor`` inside). Defaults follow transformers 5.23: a missing
``original_max_position_embeddings`` is ``max_position_embeddings`` (a top-level
``original_max_position_embeddings`` wins, as for Phi-3), dynamic NTK's original length is
``max_position_embeddings``, and LongRoPE's missing ``factor`` is their ratio. (It builds
``RoPE`` modules, so it lives with the encodings: ``posenc.extension`` stays below them.)
What a config says about attention outside the rotation (DeepSeek's ``mscale_all_dim``, Llama 4's
no-position layers, query temperatures) is read by ``posenc.hf.attention_config``. Nothing is
dropped silently: multi-axis RoPE (Qwen2-VL's M-RoPE) is refused, naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..encodings.configs import KVPolicy
from ..encodings.mrope import MRoPE
from ..encodings.rotary import PRoPE, RoPE
from ..extension.config import NTKScaling, ScalingConfig
from ..functional import Layout
from .mrope_config import is_mrope, mrope_from_hf
from .odd_width import OddWidthRoPE

__all__ = ["INTERLEAVED_MODEL_TYPES", "rope_from_hf", "rope_to_hf"]

#: Architectures whose rotary pairs are adjacent features (2i, 2i + 1) rather than (i, i + P).
INTERLEAVED_MODEL_TYPES = frozenset(
    {
        "gptj",
        "codegen",
        "cohere",
        "cohere2",
        "cohere2_moe",
        "glm",
        "glm4",
        "helium",
        "ernie4_5",
        "ernie4_5_moe",
        "deepseek_v2",
        "deepseek_v3",
        "llama4",
        "llama4_text",
    }
)
#: transformers' defaults for ``partial_rotary_factor`` when a config omits it.
_DEFAULT_PARTIAL = {
    **dict.fromkeys(("gpt_neox", "stablelm"), 0.25),
    **dict.fromkeys(("phi", "glm", "glm4", "persimmon"), 0.5),
}
_SUPPORTED = frozenset({"linear", "dynamic", "yarn", "longrope", "llama3"})
_TYPE_ALIASES = {"su": "longrope"}  # Phi-3's early name
#: Model types whose config carries a ``rotary_dim`` that transformers' rotary never reads (it
#: rotates head_dim × partial_rotary_factor): MiniMax-M3-VL.
_ROTARY_DIM_UNREAD = frozenset({"minimax_m3_vl", "minimax_m3_vl_text"})
#: Keys of a rope dict that describe the plain rotation rather than its scaling.
_ROPE_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
#: Keys of a rope dict that act on attention, not on the rotation (``attention_config`` reads them):
#: Ministral 3's query temperature and its copy of the model's length.
ATTENTION_KEYS = ("llama_4_scaling_beta", "max_position_embeddings")
#: Keys that size the attention heads; a config without any is a wrapper (``text_config``).
_SIZE_KEYS = ("qk_rope_head_dim", "head_dim", "hidden_size", "n_embd", "d_model")


def _as_dict(config: Any) -> dict[str, Any]:
    if isinstance(config, Mapping):
        cfg = dict(config)
    elif hasattr(config, "to_dict"):
        cfg = dict(config.to_dict())
        # the names a transformers config answers to without storing them (Moonshine's
        # num_attention_heads is decoder_num_attention_heads), as its rotary reads them
        for alias in getattr(config, "attribute_map", None) or {}:
            if cfg.get(alias) is None and getattr(config, alias, None) is not None:
                cfg[alias] = getattr(config, alias)
    else:
        raise TypeError(
            "config must be a dict (config.json) or a transformers config, got "
            f"{type(config).__name__}"
        )
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and all(cfg.get(k) is None for k in _SIZE_KEYS):
        # A multimodal model (Llama 4, Gemma 3): its language model's config holds the RoPE.
        return {"model_type": cfg.get("model_type"), **text}
    return cfg


def _first(cfg: Mapping[str, Any], *keys: str) -> Any:
    return next((cfg[k] for k in keys if cfg.get(k) is not None), None)


def _head_dim(cfg: Mapping[str, Any]) -> int:
    """Rotary head width: MLA's ``qk_rope_head_dim``, else ``head_dim`` (JetMoE's
    ``kv_channels``), else width / heads."""
    explicit = _first(cfg, "qk_rope_head_dim", "head_dim", "kv_channels")
    if explicit is not None:
        return int(explicit)
    width = _first(cfg, "hidden_size", "n_embd", "d_model")
    heads = _first(cfg, "num_attention_heads", "n_head", "n_heads")  # DBRX: d_model, n_heads
    if width is None or heads is None:
        raise ValueError(
            "config needs 'head_dim', or 'hidden_size' and 'num_attention_heads', to size RoPE"
        )
    return int(width) // int(heads)


def _mla_partial(cfg: Mapping[str, Any], partial: float) -> bool:
    """Whether ``partial`` is the share qk_rope_head_dim / head_dim of an MLA config (so the
    rotated width is qk_rope_head_dim itself, not qk_rope_head_dim × partial)."""
    rope, head = cfg.get("qk_rope_head_dim"), cfg.get("head_dim")
    if partial == 1.0 or not isinstance(rope, int) or not isinstance(head, int):
        return False
    return int(head * partial) == rope


def _rope_params(
    cfg: Mapping[str, Any], layer_type: str | None, scaling: Any = None
) -> dict[str, Any]:
    """One flat dict: rope_type, rope_theta, partial_rotary_factor and the scaling keys (those of
    ``scaling`` instead of the config's when given, see ``_override``)."""
    params = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
    nested = sorted(k for k, v in params.items() if isinstance(v, Mapping))
    if not nested and cfg.get("rope_local_base_freq") is not None:
        params = _local_global(cfg, params)  # Gemma 3's older schema
        nested = sorted(params)
    if nested or layer_type is not None:
        if layer_type not in nested:
            raise ValueError(
                f"layer_type must name one of the config's per-layer rope_parameters {nested}, "
                f"got {layer_type!r}"
            )
        params = dict(params[layer_type])
    if scaling is not None:
        params = _override(params, scaling, layer_type)
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    rope_type = _TYPE_ALIASES.get(rope_type, rope_type)
    if cfg.get("model_type") == "phi3" and rope_type == "yarn":
        rope_type = "longrope"  # Phi-3 reads its short/long factor lists under either name
    params["rope_type"] = rope_type
    theta = _first(cfg, "rope_theta", "rotary_emb_base")
    if "rope_theta" not in params:
        params["rope_theta"] = _default_theta(cfg.get("model_type")) if theta is None else theta
    partial = _first(cfg, "partial_rotary_factor", "rotary_pct")
    if partial is None:
        partial = _DEFAULT_PARTIAL.get(cfg.get("model_type", ""), 1.0)
    params.setdefault("partial_rotary_factor", partial)
    return params


def _selected(scaling: Any, layer_type: str | None) -> dict[str, Any] | None:
    """The override for one layer type: ``scaling`` (a dict or a ScalingConfig) as a dict; with
    per-layer parameters a flat dict applies to "full_attention" (as Gemma 3's ``rope_scaling``
    does) and a dict by layer type to the types it names; None where it does not apply."""
    spec = scaling.to_dict() if isinstance(scaling, ScalingConfig) else scaling
    if not isinstance(spec, Mapping):
        raise TypeError(f"scaling must be a dict or a ScalingConfig, got {type(spec).__name__}")
    if layer_type is None:
        return dict(spec)
    if any(isinstance(v, Mapping) for v in spec.values()):
        chosen = spec.get(layer_type)
        return None if chosen is None else dict(chosen)
    return dict(spec) if layer_type == "full_attention" else None


def _override(params: Mapping[str, Any], scaling: Any, layer_type: str | None) -> dict[str, Any]:
    """``params`` with its scaling replaced by the override (``_selected``), keeping rope_theta
    and partial_rotary_factor: what transformers builds from a config carrying that
    ``rope_scaling``."""
    spec = _selected(scaling, layer_type)
    if spec is None:
        return dict(params)
    kept = {k: params[k] for k in ("rope_theta", "partial_rotary_factor") if k in params}
    return kept | spec


def _check_honoured(asked: Mapping[str, Any], spec: Mapping[str, Any] | None) -> None:
    """Raise when the config overrides a value the caller's scaling gives (transformers' dynamic
    NTK measures from ``max_position_embeddings``; Phi-3's top-level
    ``original_max_position_embeddings`` wins), rather than use another silently."""
    for key, value in asked.items():
        if key in _ROPE_KEYS or spec is None or key not in spec or spec[key] == value:
            continue
        raise ValueError(
            f"scaling key {key!r} = {value!r} is not what a transformers model with this config "
            f"uses: its config sets {spec[key]!r} (dynamic NTK measures from "
            "max_position_embeddings; a top-level original_max_position_embeddings wins); "
            "leave the key out or change the config"
        )


def _local_global(cfg: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """Per-layer parameters of Gemma 3's older config.json, as transformers converts it: full
    attention takes ``rope_theta`` and ``rope_scaling``; sliding (local) attention plain RoPE
    at ``rope_local_base_freq``."""
    full = {"rope_type": "default", **params}
    if "rope_theta" not in full and cfg.get("rope_theta") is not None:
        full["rope_theta"] = cfg["rope_theta"]
    full.setdefault("rope_theta", _default_theta(cfg.get("model_type")))
    local = {"rope_type": "default", "rope_theta": cfg["rope_local_base_freq"]}
    return {"full_attention": full, "sliding_attention": local}


def _default_theta(model_type: str | None) -> float:
    """The base a config without ``rope_theta`` means: its transformers config class's
    ``default_theta`` (1e6 for Mixtral and Phi-3.5-MoE, ...) when transformers is installed,
    else 10000 (RoFormer's value, most models' default)."""
    if model_type is None:
        return 10000.0
    try:
        from transformers import CONFIG_MAPPING

        theta = CONFIG_MAPPING[model_type].default_theta
        if isinstance(theta, Mapping):  # Gemma 3: {"global": ..., "local": ...}
            theta = theta["global"]
        return float(theta)
    except (ImportError, KeyError, AttributeError, TypeError, ValueError):
        return 10000.0


def _scaling(cfg: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The posenc scaling dict for HF rope params (None for plain RoPE)."""
    rope_type = params["rope_type"]
    if rope_type == "default":
        return None
    # Ministral 3's temperature keys (with its copy of the model length) are attention_from_hf's
    attention = ATTENTION_KEYS if "llama_4_scaling_beta" in params else ()
    spec = {k: v for k, v in params.items() if k not in _ROPE_KEYS + attention}
    max_len = _first(cfg, "max_position_embeddings", "n_positions")  # GPT-J: n_positions
    if rope_type == "dynamic":
        spec["original_max_position_embeddings"] = max_len  # transformers' dynamic reference
    elif rope_type in ("yarn", "longrope", "llama3"):
        original = _first(cfg, "original_max_position_embeddings")
        original = original or spec.get("original_max_position_embeddings") or max_len
        spec["original_max_position_embeddings"] = original
        if rope_type in ("yarn", "longrope") and spec.get("factor") is None and original:
            spec["factor"] = max_len / original if max_len else None
    if spec.get("original_max_position_embeddings") is None and rope_type not in ("linear", "ntk"):
        raise ValueError(
            f"{rope_type!r} scaling needs 'original_max_position_embeddings' (or "
            "'max_position_embeddings') in the config"
        )
    return {"rope_type": rope_type, **spec}


def _layout(cfg: Mapping[str, Any]) -> Layout:
    if cfg.get("rope_interleave") is not None:
        return "interleaved" if cfg["rope_interleave"] else "half"
    return "interleaved" if cfg.get("model_type") in INTERLEAVED_MODEL_TYPES else "half"


def rope_from_hf(
    config: Any,
    *,
    layout: Layout | None = None,
    kv_policy: KVPolicy = "reference",
    layer_type: str | None = None,
    scaling: ScalingConfig | Mapping[str, Any] | None = None,
) -> RoPE | MRoPE:
    """The ``rope`` encoding of a Hugging Face model config (``config.json`` dict or object);
    ``mrope`` for Qwen2-VL, Qwen2.5-VL and Qwen3-VL (``mrope_config``: rotate at their 3-D
    position ids, ``posenc.mrope_positions``).

    ``rotate(q, k, pos, pos)`` equals the model's rotary embedding + ``apply_rotary_pos_emb``
    at ``position_ids = pos`` (dynamic methods at length max(pos) + 1), within transformers' own
    float32 rounding of pos·θ, which posenc avoids (angles in float64). ``layout`` defaults to
    the architecture's pairing (interleaved for GPT-J, CodeGen, Cohere, GLM, DeepSeek-V2/V3...;
    DeepSeek-V3 rotates in interleaved pairs and then stores the features de-interleaved).
    ``layer_type`` picks one entry of per-layer ``rope_parameters`` (Gemma 3:
    "full_attention" or "sliding_attention"; its older ``rope_local_base_freq`` schema is read
    as transformers reads it). A multimodal config (Llama 4, Gemma 3) is read from its
    ``text_config``. ``scaling`` replaces the config's scaling (theta and partial rotary kept):
    the RoPE of the same model built with that ``rope_scaling`` (per-layer configs: a flat dict
    scales "full_attention", as Gemma 3 does; ``{layer_type: dict}`` names the types); it may
    also name posenc's static ``"ntk"``, which transformers lacks.
    Ministral 3's ``llama_4_scaling_beta`` acts on the queries, not on the rotation:
    ``attention_config.attention_from_hf`` reads it, with DeepSeek's softmax ``mscale_all_dim``.
    transformers' ``proportional`` type (Gemma 4, LFM3) is read as ``p_rope`` (``PRoPE``) with
    p its ``partial_rotary_factor``.
    Raises: ValueError for a rope type posenc lacks or missing sizes;
    TypeError for a bad ``scaling``.
    """
    cfg = _as_dict(config)
    params = _rope_params(cfg, layer_type, scaling)
    head_dim = _head_dim(cfg)
    if is_mrope(cfg, params):
        if kv_policy != "reference":
            raise ValueError(
                f"M-RoPE caches rotated keys: kv_policy must be 'reference', got {kv_policy!r}"
            )
        return mrope_from_hf(cfg, params, head_dim, layout)
    partial = float(params["partial_rotary_factor"])
    if _mla_partial(cfg, partial):
        # Mistral 4, DeepSeek-V4, dots3: partial_rotary_factor = qk_rope_head_dim / head_dim,
        # the share of the whole head that the rotary width qk_rope_head_dim already is
        partial = 1.0
    if cfg.get("rotary_dim") is not None and cfg.get("model_type") not in _ROTARY_DIM_UNREAD:
        # GPT-J / CodeGen (and MiniMax-M2's config.json) give the rotated width itself
        partial = _partial_for(int(cfg["rotary_dim"]), head_dim)
    width = int(head_dim * partial)
    if width % 2 and cfg.get("rotary_dim") is None:
        return _odd_width(cfg, params, head_dim, width, layout, kv_policy, scaling)
    if params["rope_type"] == "proportional":
        return _proportional(cfg, params, head_dim, layout, kv_policy, scaling)
    supported = _SUPPORTED | ({"ntk"} if scaling is not None else set())
    if params["rope_type"] != "default" and params["rope_type"] not in supported:
        raise ValueError(
            f"rope_type {params['rope_type']!r} is not supported; posenc reads 'default' and "
            f"{sorted(supported)}"
        )
    spec = _scaling(cfg, params)
    asked = None if scaling is None else _selected(scaling, layer_type)
    if asked is not None:
        _check_honoured(asked, spec)
    return RoPE(
        head_dim=head_dim,
        base=float(params["rope_theta"]),
        layout=_layout(cfg) if layout is None else layout,
        partial=partial,
        scaling=spec,
        kv_policy=kv_policy,
    )


def _partial_for(width: int, head_dim: int) -> float:
    """The ``partial`` whose ``int(head_dim · partial)`` is ``width``: width / head_dim, nudged
    up one float where the product rounds to just below it (int() of e.g. 23.999999)."""
    partial = width / head_dim
    return math.nextafter(partial, 2.0) if int(head_dim * partial) < width else partial


def _odd_width(
    cfg: Mapping[str, Any],
    params: Mapping[str, Any],
    head_dim: int,
    width: int,
    layout: Layout | None,
    kv_policy: KVPolicy,
    scaling: Any,
) -> OddWidthRoPE:
    """transformers' RoPE over an odd rotated width w (GLM-4.5's default config): w + 1
    features at θ_j = base^(-2j/w) (``OddWidthRoPE``).
    Raises: ValueError for a rope type other than "default" or a ``scaling``."""
    if params["rope_type"] != "default" or scaling is not None:
        asked = params["rope_type"] if scaling is None else "a scaling"
        raise ValueError(
            f"partial_rotary_factor {params['partial_rotary_factor']} of head_dim {head_dim} "
            f"gives an odd rotated width {width}: transformers rotates {width + 1} features at "
            f"theta^(-2j/{width}), which posenc makes without context extension only (got "
            f"{asked})"
        )
    partial = _partial_for(width + 1, head_dim)
    return OddWidthRoPE(
        head_dim=head_dim,
        base=float(params["rope_theta"]),
        layout=_layout(cfg) if layout is None else layout,
        partial=partial,
        width=width,
        kv_policy=kv_policy,
    )


def _proportional(
    cfg: Mapping[str, Any],
    params: Mapping[str, Any],
    head_dim: int,
    layout: Layout | None,
    kv_policy: KVPolicy,
    scaling: Any,
) -> PRoPE:
    """transformers' ``proportional`` rope type (Gemma 4, LFM3) as p-RoPE: θ over the whole
    head_dim, the ``partial_rotary_factor`` share p of the highest kept, the rest 0, all divided
    by ``factor`` (position interpolation; attention factor 1)."""
    if scaling is not None:
        raise ValueError(
            "scaling cannot replace a 'proportional' rope type's own: p-RoPE takes only its "
            "'factor' (position interpolation); edit the config's rope_parameters instead"
        )
    unknown = sorted(set(params) - {*_ROPE_KEYS, "factor", *ATTENTION_KEYS})
    if unknown:
        raise ValueError(f"rope_type 'proportional' takes 'factor' only; got keys {unknown}")
    factor = float(params.get("factor") or 1.0)
    return PRoPE(
        head_dim=head_dim,
        base=float(params["rope_theta"]),
        layout=_layout(cfg) if layout is None else layout,
        p=float(params["partial_rotary_factor"]),
        scaling=None if factor == 1.0 else {"rope_type": "linear", "factor": factor},
        kv_policy=kv_policy,
    )


def rope_to_hf(pe: RoPE) -> dict[str, Any]:
    """The config.json fields (transformers >= 5 ``rope_parameters`` schema) for ``pe``.

    Static NTK has no transformers rope type: it is written as plain RoPE with the enlarged
    ``rope_theta`` = base·s^(d/(d-2)), which has the same frequencies.
    Raises: TypeError when ``pe`` is not a RoPE encoding.
    """
    if not isinstance(pe, RoPE):
        raise TypeError(f"rope_to_hf needs a RoPE encoding, got {type(pe).__name__}")
    theta, d = pe.base, pe.rotary_dim
    params: dict[str, Any] = {"rope_type": "default"}
    out: dict[str, Any] = {"head_dim": pe.head_dim}
    if isinstance(pe.scaling, NTKScaling):
        theta = pe.base * pe.scaling.factor ** (d / (d - 2))
    elif pe.scaling is not None:
        params = pe.scaling.to_dict()
        if params["rope_type"] == "dynamic":  # transformers measures from max_position_embeddings
            out["max_position_embeddings"] = params.pop("original_max_position_embeddings")
    params["rope_theta"] = theta
    if isinstance(pe, PRoPE):
        params = _proportional_params(pe, params)
    elif pe.partial != 1.0:
        params["partial_rotary_factor"] = pe.partial
    if pe.layout == "interleaved":
        out["rope_interleave"] = True
    return {**out, "rope_parameters": params}


def _proportional_params(pe: PRoPE, params: dict[str, Any]) -> dict[str, Any]:
    """``rope_parameters`` of transformers' ``proportional`` type for a p-RoPE ``pe``."""
    linear = isinstance(pe.scaling, ScalingConfig) and pe.scaling.method == "linear"
    if pe.partial != 1.0 or (pe.scaling is not None and not linear):
        raise ValueError(
            "transformers' 'proportional' rope type is p-RoPE over the whole head_dim with at "
            f"most linear scaling; this p_rope has partial={pe.partial}, scaling={pe.scaling!r}"
        )
    out = {"rope_type": "proportional", "rope_theta": params["rope_theta"]}
    out["partial_rotary_factor"] = pe.p
    if linear:
        out["factor"] = params["factor"]
    return out
