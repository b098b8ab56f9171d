"""Helpers driving transformers' rotary embeddings (the reference) and a float64 rotation."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import torch

#: model_type -> (modeling module, rotary class, q/k function) of transformers 5.23.
#: The dynamic-method tests' original context length and LongRoPE factors.
ORIGINAL = 16
_rng = np.random.default_rng(1)
FACTORS = {
    "short_factor": (1 + 0.2 * _rng.random(16)).tolist(),
    "long_factor": (1 + 8 * _rng.random(16)).tolist(),
}

ROTARY = {
    "llama": ("llama", "LlamaRotaryEmbedding", "apply_rotary_pos_emb"),
    "qwen2": ("qwen2", "Qwen2RotaryEmbedding", "apply_rotary_pos_emb"),
    "phi": ("phi", "PhiRotaryEmbedding", None),  # partial: split in the attention layer
    "phi3": ("phi3", "Phi3RotaryEmbedding", "apply_rotary_pos_emb"),
    "gpt_neox": ("gpt_neox", "GPTNeoXRotaryEmbedding", "apply_rotary_pos_emb"),
    "cohere": ("cohere", "CohereRotaryEmbedding", "apply_rotary_pos_emb"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3RotaryEmbedding", "apply_rotary_pos_emb_interleave"),
}


def hf_config(cfg: dict[str, Any]) -> Any:
    from transformers import CONFIG_MAPPING

    kw = {k: v for k, v in cfg.items() if k != "model_type"}
    return CONFIG_MAPPING[cfg["model_type"]](**kw)


def hf_rotary(cfg: dict[str, Any]) -> tuple[torch.nn.Module, Any]:
    """(rotary embedding module, q/k rotation) for a config dict."""
    module_name, cls_name, fn_name = ROTARY[cfg["model_type"]]
    mod = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    rotary = getattr(mod, cls_name)(hf_config(cfg))
    if fn_name is None:  # Phi: rotate the first rotary_dim features, pass the rest

        def apply(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
            r = cos.shape[-1]
            qr, kr = mod.apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin)
            return torch.cat([qr, q[..., r:]], -1), torch.cat([kr, k[..., r:]], -1)

        return rotary, apply
    return rotary, getattr(mod, fn_name)


def hf_rotate(
    rotary: torch.nn.Module, apply: Any, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: cos, sin = rotary(q, position_ids); apply(q, k, cos, sin)."""
    position_ids = pos if pos.ndim == 2 else pos[None].expand(q.shape[0], -1)
    cos, sin = rotary(q, position_ids)
    return apply(q, k, cos, sin)


def rotate64(
    x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor, scale: float, layout: str
) -> np.ndarray:
    """Float64 truth: pairs of the first 2P features of x (B, H, T, D) turned by pos·θ, times
    ``scale``; the rest passes through. Written with NumPy index arithmetic, not posenc."""
    xn = x.double().numpy()
    theta = np.asarray(pos, dtype=np.float64)[..., None] * inv_freq.double().numpy()  # (.., T, P)
    if theta.ndim == 3:
        theta = theta[:, None]  # (B, 1, T, P)
    P = theta.shape[-1]
    ia = np.arange(P) if layout == "half" else 2 * np.arange(P)
    ib = ia + P if layout == "half" else ia + 1
    out = xn.copy()
    a, b = xn[..., ia], xn[..., ib]
    out[..., ia] = scale * (a * np.cos(theta) - b * np.sin(theta))
    out[..., ib] = scale * (a * np.sin(theta) + b * np.cos(theta))
    return out


#: A small DeepSeek-V2/V3 config (its MLA sizes: the rope part of each head is 64 wide).
DEEPSEEK_SIZES = {
    "hidden_size": 256,
    "num_attention_heads": 2,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 64,
    "v_head_dim": 64,
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
    "intermediate_size": 64,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 1,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
}
