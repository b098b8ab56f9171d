"""Every transformers model type with a ``*RotaryEmbedding``, built from its default config
shrunk to two layers (at most 4 experts, MLP widths <= 256, a 1,024-token vocabulary), weights
at range 0.2 (zero-initialised matrices drawn too, ``_draw_zero_matrices``):
what ``posenc.hf.patch`` does with it. ``statuses()`` computes the table that
docs/hf-coverage.md holds (``render``); ``python -m tests.hf._coverage`` rewrites the page.

Status: "match" (patched logits within 1e-4·max(1, max |logit|) of the unpatched ones: float32
rounding of the angles, amplified through the layers; or, past that, within twice the unpatched
model's own float32 error against its float64 copy (``_float32_floor``: a model whose forward
amplifies rounding so much, like Dia at these random weights, that its own float32 forward is
further from its float64 one than posenc's rotation is from transformers');
``unpatch`` exact),
"refused" (a ValueError from ``patch``, the model untouched), "mismatch", "crash" (any other
exception in ``patch`` or the patched forward), "no rotary" (a vision or audio tower of a model
type whose modeling module has a text rotary, holding no ``*RotaryEmbedding`` itself: patch
refuses it, having nothing to replace), "not built" (the harness cannot build or run the model
from its default config: not a verdict on posenc). Models without token ids get a vision
tower's patches or an audio signal (``_inputs``); hybrid models keep one layer of each type.
Default configs that transformers' own model cannot build or run from get the fixes of
``_FIXES`` (each row names its fix), and forwards that need more than ids or one signal the
inputs of ``_INPUTS``; ``_UNJUDGED`` lists the models whose outputs do not depend on their
rotaries at random weights.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "hf-coverage.md"
_LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_VOCAB = 1024
_NO_ROTARY = (
    "{} has no *RotaryEmbedding module (a tower of a rotary model type that encodes positions "
    "otherwise): nothing for patch to replace, and patch says so"
)
_TOL = 1e-4


@dataclass(frozen=True)
class Status:
    """One model type's verdict and why."""

    model_type: str
    status: str
    detail: str = ""


def _module_name(model_type: str) -> str:
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    return str(model_type_to_module_name(model_type))


def rotary_model_types() -> list[str]:
    """Model types with an auto model class whose modeling module defines a text
    ``*RotaryEmbedding`` class (not only Vision/Audio ones), sorted."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_MAPPING_NAMES,
    )

    found = []
    for model_type in sorted(set(MODEL_MAPPING_NAMES) | set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)):
        name = _module_name(model_type)
        try:
            module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        except Exception:
            continue
        rotaries = [n for n in dir(module) if n.endswith("RotaryEmbedding")]
        if any("Vision" not in n and "Audio" not in n for n in rotaries):
            found.append(model_type)
    return found


def _theta_into_attn_config(config: Any) -> None:
    config.attn_config.rope_theta = config.rope_parameters["rope_theta"]
    config.attn_config.clip_qkv = 8.0  # DBRX's; its attention clamps by it, None or not


def _qsa_indexer(config: Any) -> None:
    head_dim = _get(config, "head_dim") or config.hidden_size // config.num_attention_heads
    config.indexer_n_heads, config.indexer_kv_heads, config.indexer_head_dim = 2, 1, head_dim
    config.indexer_budget, config.indexer_compress_ratio = 8, 4  # 8 of the 16 tokens run


def _four_axis_sections(config: Any) -> None:
    pairs = (_get(config, "head_dim") or config.hidden_size // config.num_attention_heads) // 2
    config.rope_parameters["mrope_section"] = [pairs // 4] * 4


def _audio_pad_last(config: Any) -> None:
    config.audio_pad_token_id = (
        config.vocab_size + config.num_codebooks * config.codebook_vocab_size
    )


def _dropout_rate(config: Any) -> bool:
    """T5Gemma2's standalone encoder config: its text config lacks the dropout_rate its MLP
    reads (the encoder-decoder's has one); whether it was missing."""
    if hasattr(config.text_config, "dropout_rate"):
        return False
    config.text_config.dropout_rate = 0.0
    return True


def _fields(**values: Any) -> Callable[[Any], None]:
    def fix(config: Any) -> None:
        for key, value in values.items():
            setattr(config, key, value)

    return fix


#: What the harness sets in a default config that transformers' own model cannot build or run
#: from (by the model type of the config or sub-config it fixes): the fix, and why. Applied
#: after ``_shrink``; each row's detail names the fixes applied (a fix returning False found
#: nothing to fix).
_FIXES: dict[str, tuple[Callable[[Any], bool | None], str]] = {
    "dbrx": (
        _theta_into_attn_config,
        "attn_config.rope_theta and clip_qkv 8 (DbrxAttention reads both)",
    ),
    "dots1": (
        _fields(n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2),
        "MoE sizes (None by default)",
    ),
    "lfm2_moe": (
        _fields(layer_types=["conv", "full_attention"]),
        "layer_types conv, full_attention (None by default; the layers index it)",
    ),
    "qwen4_exp_text": (_qsa_indexer, "QSA indexer sizes (None by default; its layers build one)"),
    "hunyuan_vl_text": (
        _four_axis_sections,
        "a 4-axis mrope_section (HunyuanOCR's xdrope_section; None by default, which the rotary "
        "reads)",
    ),
    "chameleon": (
        _fields(vocabulary_map={"<image>": _VOCAB - 1}),
        "vocabulary_map with an `<image>` token (None by default)",
    ),
    "cohere_compass_text": (
        _fields(
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}
        ),
        "rope_parameters['full_attention'] theta 10000 (empty by default)",
    ),
    "t5gemma2_encoder": (
        _dropout_rate,
        "text_config.dropout_rate 0 (missing from the encoder's text config)",
    ),
    "moonshine_streaming": (
        lambda config: setattr(config, "num_key_value_heads", config.num_attention_heads),
        "num_key_value_heads = num_attention_heads (missing; its decoder reads it)",
    ),
    "deepseek_ocr2_text": (
        _fields(
            mlp_layer_types=["dense", "sparse"], n_group=1, topk_group=1, num_experts_per_tok=2
        ),
        "mlp_layer_types dense, sparse and routing sizes (None by default)",
    ),
    "diffusion_gemma_text": (
        _fields(num_experts=4, top_k_experts=2, moe_intermediate_size=256),
        "MoE sizes (None by default)",
    ),
    "kyutai_speech_to_text": (
        _audio_pad_last,
        "audio_pad_token_id the last embedding row (the shrunk vocabulary moved it)",
    ),
}


def _fix(config: Any, seen: set[int] | None = None) -> list[str]:
    """Apply ``_FIXES`` to ``config`` and its sub-configs, in place; what it set."""
    seen = set() if seen is None else seen
    if id(config) in seen:
        return []
    seen.add(id(config))
    notes = []
    model_type = getattr(config, "model_type", None)
    if model_type in _FIXES:
        fix, why = _FIXES[model_type]
        if fix(config) is not False:  # False: nothing was missing
            notes.append(why)
    for value in list(vars(config).values()):
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            notes += _fix(value, seen)
    return notes


def _shrink(config: Any, seen: set[int] | None = None) -> None:
    """Two layers, <= 4 experts, a small vocabulary, weights at range 0.2, in place, down every
    sub-config (text_config, vision_config, ...)."""
    seen = set() if seen is None else seen
    if id(config) in seen:
        return
    seen.add(id(config))
    _keep_layers(config)
    for key in _EXPERT_KEYS:
        if isinstance(_get(config, key), int) and _get(config, key) > 4:
            setattr(config, key, 4)
    for key in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"):
        if isinstance(getattr(config, key, None), int) and getattr(config, key) > 256:
            setattr(config, key, 256)
    experts = next(
        (_get(config, k) for k in _EXPERT_KEYS if isinstance(_get(config, k), int)),
        None,
    )
    per_token = _get(config, "num_experts_per_tok")
    if isinstance(per_token, int):
        config.num_experts_per_tok = min(per_token, 2)
    elif "num_experts_per_tok" in vars(config) and experts is not None:
        config.num_experts_per_tok = 2  # DeepSeek-V2's default config leaves it None
    n_group = getattr(config, "n_group", None)
    if isinstance(n_group, int) and experts is not None and n_group > experts:
        config.n_group = 1  # grouped routing: experts per group must stay >= 1
        if isinstance(getattr(config, "topk_group", None), int):
            config.topk_group = 1
    if isinstance(getattr(config, "num_kv_shared_layers", None), int):
        config.num_kv_shared_layers = 0  # Gemma 3n: the two kept layers both hold a cache
    if getattr(config, "position_embedding_type", None) == "absolute":
        config.position_embedding_type = "rotary"  # ESM: ESM-2 checkpoints rotate
    if getattr(config, "model_type", None) == "esm" and config.pad_token_id is None:
        config.pad_token_id = 1  # ESM's embeddings mask input_ids != pad_token_id
    if "vocab_size" in vars(config) and config.vocab_size is None:
        config.vocab_size = _VOCAB  # ESM's default config has none
    if isinstance(getattr(config, "vocab_size", None), int) and config.vocab_size > _VOCAB:
        config.vocab_size = _VOCAB
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(config, key, None)
            if isinstance(value, int) and value >= _VOCAB:
                setattr(config, key, _VOCAB - 1)
    for key in ("num_layers_per_stack", "H_cycles", "L_cycles"):
        # HRM: 16 layers per stack, run 2 x 4 times; at weights 0.2 that recurrence is chaotic
        # (inv_freq moved by 1e-6 moves its logits by 41)
        if isinstance(_get(config, key), int) and _get(config, key) > 1:
            setattr(config, key, 1)
    hashed = getattr(config, "encoder_hash_byte_group_vocab", None)
    if isinstance(hashed, int) and hashed > _VOCAB:
        config.encoder_hash_byte_group_vocab = _VOCAB  # BLT's hash tables: 6 x 500,002 rows
    if (
        "head_dim" in vars(config)
        and _get(config, "head_dim") is None
        and isinstance(_get(config, "num_attention_heads"), int)
    ):
        # HunYuan's default config leaves head_dim None, which its attention cannot read
        config.head_dim = config.hidden_size // config.num_attention_heads
    # vars(): a heterogeneous config (Gemma 4, dots3) raises on reading per-layer attributes
    if vars(config).get("num_key_value_heads", 0) is None and isinstance(
        _get(config, "num_attention_heads"), int
    ):
        # Nemotron's default config leaves it None (multi-head attention: one per query head)
        config.num_key_value_heads = config.num_attention_heads
    if "attn_layer_indices" in vars(config) and not config.attn_layer_indices:
        # Bamba's default config has no attention layer (every layer Mamba): give it one
        config.attn_layer_indices = [1]
    if vars(config).get("sliding_window", 0) is None and _get(config, "layer_types"):
        # Step3p7 builds a sliding-window mask whatever its layer types, and its default config
        # has no window: one wider than the 16 tokens run changes no attention
        config.sliding_window = 4096
    if hasattr(config, "initializer_range"):
        config.initializer_range = 0.2
    for value in list(vars(config).values()):
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            _shrink(value, seen)


def _get(config: Any, key: str) -> Any:
    """``getattr(config, key, None)``, None for a per-layer attribute of a heterogeneous
    config (Gemma 4's ``head_dim`` raises there)."""
    try:
        return getattr(config, key, None)
    except Exception:
        return None


def _set_field(config: Any, key: str, value: Any) -> None:
    """``setattr``, skipping a property without a setter (Bamba's ``layers_block_type``,
    computed from other fields)."""
    with contextlib.suppress(AttributeError):
        setattr(config, key, value)


def _keep_layers(config: Any) -> None:
    """Shrink ``config`` to its layers at the first index of each distinct layer type (at least
    two layers): a hybrid model keeps an attention layer and a linear one. Every per-layer list
    (a list as long as the layer count: ``layer_types``, ``mlp_layer_types``, ...) keeps the
    same layers, and so do lists of layer indices (``attn_layer_indices``)."""
    key = next((k for k in _LAYER_KEYS if isinstance(getattr(config, k, None), int)), None)
    if key is None or getattr(config, key) <= 2:
        return
    n = getattr(config, key)
    types = getattr(config, "layer_types", None)
    types = types if isinstance(types, list) and len(types) == n else [None] * n
    first = sorted({types.index(t) for t in types})
    keep = first if len(first) >= 2 else [0, 1]
    renumber = {old: new for new, old in enumerate(keep)}
    for name, value in list(vars(config).items()):
        if isinstance(value, list) and len(value) == n and name != "layer_types":
            _set_field(config, name, [value[i] for i in keep])
        elif (
            isinstance(value, list)
            and name.endswith("layer_indices")
            and all(isinstance(i, int) for i in value)
        ):
            _set_field(config, name, [renumber[i] for i in value if i in renumber])
    if isinstance(getattr(config, "layer_types", None), list) and len(config.layer_types) == n:
        _set_field(config, "layer_types", [config.layer_types[i] for i in keep])
    for k in _LAYER_KEYS:
        if isinstance(getattr(config, k, None), int) and getattr(config, k) > len(keep):
            _set_field(config, k, len(keep))


def _build(model_type: str) -> Any:
    """The shrunk model of ``model_type`` (``_built`` without its notes)."""
    return _built(model_type)[0]


def _built(model_type: str) -> tuple[Any, list[str]]:
    """The model of ``model_type``'s default config shrunk (``_shrink``), in eval mode, and
    what the harness changed beyond shrinking (``_fit_mrope_width``), for the page."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = AutoConfig.for_model(model_type)
    _shrink(config)
    notes = _fix(config)
    auto = AutoModelForCausalLM if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else AutoModel
    torch.manual_seed(0)
    model = _from_config(auto, model_type, config)
    widths = _fit_mrope_width(model)
    if widths:  # the rotary width changed: build again from the fixed config
        torch.manual_seed(0)
        model = _from_config(auto, model_type, config)
    drawn = _draw_zero_matrices(model)
    if drawn:
        widths.append(f"zero-initialised {', '.join(drawn)} to range 0.2")
    return model, notes + widths


def _from_config(auto: Any, model_type: str, config: Any) -> Any:
    """``auto.from_config(config)`` in eval mode; where the auto class cannot resolve the class
    it maps ``model_type`` to (Evolla's config is missing from its registry; Voxtral Realtime's
    text model is not exported), that class from the type's modeling module."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    try:
        return auto.from_config(config).eval()
    except ValueError as err:
        text = str(err)
        if "Unrecognized configuration class" not in text and "Could not find" not in text:
            raise
        if model_type not in MODEL_MAPPING_NAMES:
            raise
    name = _module_name(model_type)
    module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    return getattr(module, MODEL_MAPPING_NAMES[model_type])._from_config(config).eval()


def _draw_zero_matrices(model: Any) -> list[str]:
    """Draw each all-zero weight matrix (ndim >= 2) of ``model`` at N(0, 0.2²), in place; the
    names (last component) drawn, sorted. A model that zero-initialises its attention output
    (NeoMME's o_proj) otherwise computes the same output at every position, and any patch
    "matches"."""
    g = torch.Generator().manual_seed(0)
    drawn = set()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim >= 2 and param.is_floating_point() and not param.any():
                param.copy_(0.2 * torch.randn(param.shape, generator=g))
                parts = name.split(".")
                drawn.add(parts[-2] if len(parts) > 1 else parts[-1])  # the module's name
    return sorted(drawn)


def _fit_mrope_width(model: Any) -> list[str]:
    """Give each M-RoPE rotary module's config the rotary width its ``mrope_section`` needs,
    in place; what it set.

    Some default configs leave the sections to the module's built-in default while their
    head width gives another number of rotary pairs (GLM-4.1V: sections (8, 12, 12) = 32
    pairs, head_dim 128 without the checkpoints' partial_rotary_factor 0.5; Qwen3-Omni's
    thinker: 64 pairs, hidden_size / heads = 73 where the checkpoints set head_dim 128), and
    transformers' own forward fails (its ``split`` sizes). With 2S the sections' width: a
    config with a ``partial_rotary_factor`` f gets head_dim 2S/f; otherwise f = 2S/head_dim
    when that is <= 1, else head_dim 2S (what the released checkpoints of these types set)."""
    notes = []
    for module in model.modules():
        sections, inv_freq = (
            getattr(module, "mrope_section", None),
            getattr(module, "inv_freq", None),
        )
        config = getattr(module, "config", None)
        if not isinstance(sections, list | tuple) or not isinstance(inv_freq, torch.Tensor):
            continue
        width = 2 * sum(int(s) for s in sections)  # 2S
        if config is None or width == 2 * inv_freq.numel():
            continue
        params = config.rope_parameters
        head_dim = _get(config, "head_dim") or config.hidden_size // config.num_attention_heads
        if "partial_rotary_factor" in params:
            config.head_dim = int(width / params["partial_rotary_factor"])
            notes.append(f"head_dim {config.head_dim}")
        elif width <= head_dim:
            params["partial_rotary_factor"] = width / head_dim
            notes.append(f"partial_rotary_factor {width / head_dim:g}")
        else:
            config.head_dim = width
            notes.append(f"head_dim {width}")
        notes[-1] += f" (mrope_section {list(sections)} of {inv_freq.numel()} pairs)"
    return notes


def _grid_inputs(model: Any, params: Any) -> dict[str, Any] | None:
    """A vision tower's flattened patches of one 4 x 4 grid (Qwen-VL and its kin:
    ``forward(hidden_states | pixel_values, grid_thw)``), or None for another tower."""
    config = model.config
    if "grid_thw" not in params or not isinstance(getattr(config, "patch_size", None), int):
        return None
    channels = next(
        (
            getattr(config, k)
            for k in ("in_channels", "in_chans", "num_channels")
            if getattr(config, k, None)
        ),
        3,
    )
    temporal = (
        getattr(config, "temporal_patch_size", None) or getattr(config, "patch_temporal", None) or 1
    )  # Muse's vision towers name it patch_temporal
    side = 2 * (getattr(config, "spatial_merge_size", None) or 1)
    width = channels * temporal * config.patch_size**2
    g = torch.Generator().manual_seed(0)
    key = "hidden_states" if "hidden_states" in params else "pixel_values"
    return {
        key: torch.randn(side * side, width, generator=g),
        "grid_thw": torch.tensor([[1, side, side]]),
    }


def _patch_size(config: Any) -> int | None:
    """The config's int ``patch_size``, or its vision or backbone config's (SAM 3's ViT sits
    in ``vision_config.backbone_config``), or None."""
    paths = ((), ("vision_config",), ("backbone_config",), ("vision_config", "backbone_config"))
    for path in paths:
        node = config
        for key in path:
            node = getattr(node, key, None)
        patch = getattr(node, "patch_size", None)
        if isinstance(patch, int):
            return patch
    return None


def _image_inputs(model: Any, params: Any) -> dict[str, Any] | None:
    """One random image of a vision tower that reads ``pixel_values`` (MLCD, Pixtral): a 4 x 4
    patch grid, (1, C, 4 p, 4 p) for patch size p (``image_sizes`` too where the forward takes
    them), or flattened patches with their (x, y) ids (Gemma 4: ``pixel_position_ids``, a
    2k x 2k grid for its k x k pooling); None for a model without ``pixel_values`` or a patch
    size."""
    config = model.config
    patch = _patch_size(config)
    if "pixel_values" not in params or patch is None:
        return None
    if "pixel_position_ids" in params:
        side = 2 * (getattr(config, "pooling_kernel_size", None) or 2)
        y, x = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        g = torch.Generator().manual_seed(0)
        return {
            "pixel_values": torch.rand(1, side * side, 3 * patch**2, generator=g),
            "pixel_position_ids": torch.stack([x.flatten(), y.flatten()], dim=-1)[None],
        }
    channels = getattr(config, "num_channels", None) or 3
    side = 4 * patch
    pixels = torch.randn(1, channels, side, side, generator=torch.Generator().manual_seed(0))
    inputs: dict[str, Any] = {"pixel_values": pixels}
    if "image_sizes" in params:
        inputs["image_sizes"] = torch.tensor([[side, side]])
    return inputs


#: The signal an audio or time-series model reads instead of token ids.
_SIGNALS = ("input_features", "audio_mel", "input_values", "past_values")


def _signal_inputs(model: Any, params: Any) -> list[dict[str, Any]]:
    """Candidate inputs of an audio encoder or forecaster, in the order tried: one random
    signal of F features (the config's ``num_mel_bins`` / ``input_feat_size`` /
    ``feature_size``, else 128) by 64 or 3,840 steps (or ``audio_length_per_tok`` per token
    id), as (1, F, T), (1, T, F), (1, 1, T), (1, T); a required mask (Gemma 3n's
    ``audio_mel_mask``: True = padding) marks no padding."""
    name = next((n for n in _SIGNALS if n in params), None)
    if name is None:
        return []
    config = model.config
    keys = ("num_mel_bins", "input_feat_size", "feature_size")
    F = next((getattr(config, k) for k in keys if isinstance(getattr(config, k, None), int)), 128)
    masks = [
        n
        for n, p in params.items()
        if n != name and p.default is inspect.Parameter.empty and "mask" in n
    ]
    found = []
    per_token = getattr(config, "audio_length_per_tok", None)  # Voxtral Realtime: T = 8 per id
    for T in (64, 3840) + ((16 * per_token,) if isinstance(per_token, int) else ()):
        for shape in ((1, F, T), (1, T, F), (1, 1, T), (1, T)):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
            frames = shape[2] if shape[1] == F and len(shape) == 3 else shape[1]
            found.append({name: x, **{m: torch.zeros(1, frames, dtype=torch.bool) for m in masks}})
    return found


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def _protein_inputs(model: Any, ids: torch.Tensor) -> dict[str, Any]:
    protein = torch.randint(3, 100, (1, 16), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "protein_input_ids": protein, "protein_attention_mask": ids > 0}


def _idefics_inputs(model: Any, ids: torch.Tensor) -> dict[str, Any]:
    side = model.config.vision_config.image_size
    return {
        "input_ids": ids,
        "pixel_values": _randn(1, 1, 3, side, side),
        "image_attention_mask": torch.ones(1, ids.shape[1], 1, dtype=torch.long),
    }


def _codec_inputs(model: Any, ids: torch.Tensor) -> dict[str, Any]:
    frames = 16  # wav2vec2-BERT's 160 features (80 mel bins, two stacked) per hop of audio
    hop = model.config.encoder_hop_length if hasattr(model.config, "encoder_hop_length") else 320
    return {"input_values": _randn(1, 1, frames * hop), "input_features": _randn(1, frames, 160)}


def _samples_per_frame(model: Any) -> int:
    """Waveform samples per position of Mimi's encoder transformer (24 kHz at 25 Hz: 960)."""
    return int(model.config.sampling_rate / model.config.encodec_frame_rate)


def _video(model: Any) -> torch.Tensor:
    """16 random frames (1, 16, 3, S, S) at the input size S of the timm tower's patch
    embedding (PE Video)."""
    size = next(
        m.img_size for m in model.modules() if isinstance(getattr(m, "img_size", None), tuple)
    )
    return _randn(1, 16, 3, *size)


def _draft_inputs(model: Any, ids: torch.Tensor) -> dict[str, Any]:
    config = model.config
    width = config.hidden_size * len(config.target_layer_ids)
    return {
        "noise_embeds": _randn(1, config.block_size, config.hidden_size),
        "context_hidden_states": _randn(1, 16, width),
    }


#: Inputs of the model types whose forward needs more than token ids or one signal (by type:
#: a function of the model and the 16 token ids).
_INPUTS: dict[str, Callable[[Any, torch.Tensor], dict[str, Any]]] = {
    "evolla": _protein_inputs,  # a protein (SaProt's rotary) besides the text
    "idefics": _idefics_inputs,  # exactly one image source: one image per text
    "neucodec": _codec_inputs,  # a waveform and its features for the semantic encoder
    "xcodec2": _codec_inputs,
    # text and audio streams: one text token and num_codebooks audio codes per step
    "kyutai_speech_to_text": lambda model, ids: {
        "input_ids": torch.randint(
            3, 100, (1, 16, model.config.num_codebooks + 1), generator=torch.Generator()
        )
    },
    # 16 frames of a waveform (64 samples make one: position 0, which no rotation moves)
    "mimi_encoder": lambda model, ids: {
        "input_values": _randn(1, 1, 16 * _samples_per_frame(model))
    },
    # the delay conditioning VoxtralRealtimeModel computes from its time embedding, (1, 1, C)
    "voxtral_realtime_text": lambda model, ids: {
        "input_ids": ids,
        "t_cond": _randn(1, 1, model.config.hidden_size),
    },
    "mimi_decoder": lambda model, ids: {"latents": _randn(1, model.config.hidden_size, 16)},
    # a DFlash draft block: noise embeddings and the target model's hidden states
    "muse_glimmer_assistant": _draft_inputs,
    # 16 video frames (the rotary turns by frame), each an image of its timm tower
    "pe_video": lambda model, ids: {"input_ids": ids, "pixel_values_videos": _video(model)},
    "pe_video_encoder": lambda model, ids: {"pixel_values_videos": _video(model)},
    # the speech encoder's frames it reads (num_frames, hidden_size)
    "nemotron3_5_transcribe_word_timestamp": lambda model, ids: {
        "inputs_embeds": _randn(1, 16, model.config.hidden_size)
    },
}


def _inputs(model: Any) -> dict[str, Any]:
    """16 token ids below the vocabulary size (and 100) (no cache: hybrid models' caches need
    an attention layer to measure); a vision tower's patches (``_grid_inputs``) or image
    (``_image_inputs``); the first audio or time-series signal its forward runs on
    (``_signal_inputs``), with decoder ids where it needs them (Moonshine); with the ids, a
    signal, an image or decoder ids for a model that reads both (Voxtral Realtime: text ids
    and audio features; SAM 3: a text prompt and an image; T5Gemma: decoder ids) when the ids
    alone do not run."""
    params = inspect.signature(model.forward).parameters
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type in _INPUTS:
        ids = torch.randint(3, 100, (1, 16), generator=torch.Generator().manual_seed(0))
        inputs = _INPUTS[model_type](model, ids)
        return {**inputs, "use_cache": False} if "use_cache" in params else inputs
    if "input_ids" not in params:
        grid = _grid_inputs(model, params)
        if grid is not None:
            return grid
        image = _image_inputs(model, params)
        if image is not None:
            return image
        signals = _signal_inputs(model, params)
        if signals and "decoder_input_ids" in params:  # an audio encoder-decoder (Moonshine)
            ids = torch.randint(3, 100, (1, 16), generator=torch.Generator().manual_seed(0))
            signals = [{**c, "decoder_input_ids": ids} for c in signals]
        if signals:
            return _first_that_runs(model, signals)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    top = min(_VOCAB, 100, vocab if isinstance(vocab, int) and vocab > 3 else _VOCAB)
    ids = torch.randint(3, top, (1, 16), generator=torch.Generator().manual_seed(0))
    inputs: dict[str, Any] = {"input_ids": ids, "use_cache": False}
    if "attention_mask" in params and getattr(model.config, "pad_token_id", 0) is None:
        inputs["attention_mask"] = torch.ones_like(ids)  # ESM masks input_ids != pad otherwise
    extra = [{**inputs, **c} for c in _signal_inputs(model, params)]
    if "decoder_input_ids" in params:  # an encoder-decoder (T5Gemma): its decoder reads ids too
        extra.append({**inputs, "decoder_input_ids": ids})
    image = _image_inputs(model, params)
    if image is not None:  # a model that reads both (SAM 3: an image and a text prompt)
        with contextlib.suppress(TypeError):  # none runs: the ids' own error, as without it
            return _first_that_runs(model, [inputs, *extra, {**inputs, **image}])
    return _first_that_runs(model, [inputs, *extra]) if extra else inputs


def _first_that_runs(model: Any, candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """The first of ``candidates`` that ``model``'s forward runs on.
    Raises: TypeError naming the signal shapes tried and the last error."""
    failed: Exception | None = None
    for candidate in candidates:
        try:
            with torch.no_grad():
                _logits(model, candidate)
        except Exception as err:
            failed = err
            continue
        return candidate
    shapes = sorted({tuple(v.shape) for c in candidates for k, v in c.items() if k in _SIGNALS})
    raise TypeError(f"no signal shape of {shapes} runs: {type(failed).__name__}: {failed}")


def _logits(model: Any, inputs: dict[str, Any]) -> torch.Tensor:
    """The model's logits (or hidden states, masks, latents, audio) on ``inputs``, with torch's
    generator seeded first: a forward that draws (DiffusionGemma's noise) draws the same."""
    torch.manual_seed(0)
    out = model(**inputs)
    for key in (
        "logits",
        "last_hidden_state",
        "pooler_output",
        "latents",
        "audio_values",
        "pred_masks",
    ):
        value = out.get(key) if hasattr(out, "get") else getattr(out, key, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(out, torch.Tensor):
        return out
    raise TypeError(
        f"{type(model).__name__} returned no logits or hidden states: {type(out).__name__}"
    )


def _not_built(model_type: str, err: Exception) -> Status:
    """A "not built" row: the error, and why for transformers' misleading "requires the timm
    library" (timm is installed, but ``import timm`` needs torchvision, which this environment
    lacks, and transformers' ``is_timm_available`` checks both)."""
    detail = f"{type(err).__name__}: {' '.join(str(err).split())}"[:160]
    if isinstance(err, ImportError) and "requires the timm library" in str(err):
        try:
            import timm  # noqa: F401
        except ImportError as why:
            detail = f"{detail[:100]}... (timm is installed; importing it fails: {why})"
    return Status(model_type, "not built", detail)


#: Model types whose built model runs, but whose outputs do not depend on its rotaries at the
#: harness's random weights (a "match" would be vacuous): "not built", and why.
_UNJUDGED = {
    "mimi": (
        "MimiModel's outputs (discrete codes, and audio decoded from codebooks initialised to "
        "zero) do not depend on its rotaries at random weights; its two transformers are "
        "judged as mimi_encoder and mimi_decoder"
    ),
}


def status(model_type: str) -> Status:
    """What ``patch`` does with ``model_type`` (see the module docstring). A refusal is
    patch's verdict on the built model, whether or not the harness can run its forward."""
    if model_type in _UNJUDGED:
        return Status(model_type, "not built", _UNJUDGED[model_type])
    try:
        model, notes = _built(model_type)
    except Exception as err:
        return _not_built(model_type, err)
    verdict = _verdict(model_type, model)
    if not notes:
        return verdict
    detail = f"harness set {', '.join(notes)}; {verdict.detail}"
    return Status(model_type, verdict.status, detail)


def _verdict(model_type: str, model: Any) -> Status:
    """``status`` of the built ``model``."""
    from posenc.hf import patch, unpatch

    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        patch(model)
    except ValueError as err:
        touched = any(not torch.equal(v, state[k]) for k, v in model.state_dict().items())
        if not touched and not any(
            type(m).__name__.endswith("RotaryEmbedding") for m in model.modules()
        ):
            return Status(model_type, "no rotary", _NO_ROTARY.format(type(model).__name__))
        kind = "crash" if touched else "refused"
        return Status(model_type, kind, " ".join(str(err).split())[:240])
    except Exception as err:
        try:  # patch undid its changes: does transformers itself run this model?
            with torch.no_grad():
                _logits(model, _inputs(model))
        except Exception as own:
            return _not_built(model_type, own)
        return Status(model_type, "crash", f"patch: {type(err).__name__}: {err}"[:160])
    unpatch(model)
    try:
        inputs = _inputs(model)
        with torch.no_grad():
            before = _logits(model, inputs)
    except Exception as err:
        return _not_built(model_type, err)
    try:
        patch(model)
        with torch.no_grad():
            patched = _logits(model, inputs)
            unpatch(model)
            after = _logits(model, inputs)
    except Exception as err:
        return Status(model_type, "crash", f"forward: {type(err).__name__}: {err}"[:160])
    gap, scale = float((patched - before).abs().max()), float(before.abs().max())
    detail = f"max |Δ| {gap:.2g} of max |logit| {scale:.3g}"
    if not torch.equal(after, before):
        return Status(model_type, "mismatch", detail + "; unpatch does not restore the outputs")
    if gap <= _TOL * max(1.0, scale):
        return Status(model_type, "match", detail)
    floor = _float32_floor(model, inputs, before)
    if floor is not None and gap <= 2 * floor:
        return Status(
            model_type,
            "match",
            f"{detail}: within 2x the unpatched model's own float32 error ({floor:.2g} "
            "against its float64 copy)",
        )
    return Status(model_type, "mismatch", detail)


def _float32_floor(model: Any, inputs: dict[str, Any], before: torch.Tensor) -> float | None:
    """max |unpatched float32 outputs - the float64 copy's| of ``model`` on ``inputs``: how far
    the model's own float32 rounding moves its outputs; None where it does not run in float64."""
    wide = {
        k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in inputs.items()
    }
    try:
        model64 = copy.deepcopy(model).double()
        with torch.no_grad():
            before64 = _logits(model64, wide)
    except Exception:
        return None
    return float((before.double() - before64).abs().max())


def statuses(model_types: list[str] | None = None) -> list[Status]:
    """``status`` of each type (default: every ``rotary_model_types()``)."""
    return [status(t) for t in (rotary_model_types() if model_types is None else model_types)]


def render(rows: list[Status], pending: tuple[str, ...] = ()) -> str:
    """docs/hf-coverage.md: the counts, then one row per model type; ``pending``: types not
    run yet (listed as "not run")."""
    import transformers

    rows = rows + [Status(t, "not run", "the harness has not run it yet") for t in pending]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    lines = [
        "# posenc.hf.patch on every transformers rotary model type",
        "",
        f"transformers {transformers.__version__}: {len(rows)} model types with a "
        f"`*RotaryEmbedding`; {summary}. Generated by `python -m tests.hf._coverage` "
        "(tests/hf/_coverage.py: default config shrunk to two layers, or one layer of each "
        "layer type, <= 4 experts, MLP widths <= 256, a 1,024-token vocabulary, weights at "
        "range 0.2, zero-initialised matrices too; 16 token ids, or a vision tower's 4 x 4 "
        "patch grid, or an audio signal, or the inputs a forward needs besides (`_INPUTS`); "
        "a default config that transformers' own model cannot build from gets the fix its "
        "row names (`_FIXES`); "
        "patched outputs within 1e-4·max(1, max |output|) of the unpatched ones = match). "
        '"refused" is patch\'s ValueError, the model untouched; "no rotary" a tower without a '
        "`*RotaryEmbedding` of a model type whose modeling module has one; "
        '"not built" is the harness failing to build or run the model from its default '
        "config (or a model whose outputs do not depend on its rotaries at random weights, "
        "`_UNJUDGED`), not a verdict on posenc.",
        "",
        "| model type | status | detail |",
        "| --- | --- | --- |",
    ]
    for r in rows:
        detail = r.detail.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r.model_type} | {r.status} | {detail} |")
    return "\n".join(lines) + "\n"


def page_rows() -> dict[str, Status]:
    """The rows of the committed page, by model type (details unescaped)."""
    rows = {}
    for line in PAGE.read_text().splitlines():
        cells = re.fullmatch(r"\| (\S+) \| ([a-z ]+) \| (.*) \|", line)
        if cells and cells[1] != "model" and cells[1] != "---":
            rows[cells[1]] = Status(cells[1], cells[2], cells[3].replace("\\|", "|"))
    return rows


def update(model_types: list[str]) -> str:
    """The page with the rows of ``model_types`` recomputed (and its counts), the others as
    committed."""
    rows = page_rows()
    for model_type in model_types:
        rows[model_type] = status(model_type)
    return render([rows[t] for t in sorted(rows)])


if __name__ == "__main__":
    # no arguments: every type, then the page; --update TYPES: those rows of the page
    # recomputed; with model types: print theirs only
    args = sys.argv[1:]
    if args[:1] == ["--update"]:
        PAGE.write_text(update(args[1:]))
        raise SystemExit(0)
    start = time.perf_counter()
    rows = []
    for model_type in args or rotary_model_types():
        rows.append(status(model_type))
        print(rows[-1], f"{time.perf_counter() - start:.0f}s", file=sys.stderr, flush=True)
    if not args:
        PAGE.write_text(render(rows))
