"""Tiny randomly initialised transformers causal LMs built from real config classes (no
downloads): hidden size 64, 2 layers, head_dim 16, vocabulary 97."""

from __future__ import annotations

import copy
from typing import Any

import torch

#: Sizes every family takes (GPT-J and CodeGen spell them differently: ``_GPTJ``).
SMALL: dict[str, Any] = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "vocab_size": 97,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "initializer_range": 0.2,  # weights large enough for positions to move the logits
}
_GPTJ = {"n_embd": 64, "n_head": 4, "n_layer": 2, "rotary_dim": 8, "vocab_size": 97}
_GPTJ["initializer_range"] = 0.2
_MLA = {
    "head_dim": None,
    "num_key_value_heads": 4,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "first_k_dense_replace": 1,
    "n_shared_experts": 1,
}
#: model_type -> its extra config keys: partial rotary (Phi, GPT-NeoX, StableLM, GLM),
#: interleaved pairs (Cohere, GLM, DeepSeek, Llama 4, GPT-J), per-layer types (Gemma 3),
#: complex embeddings (DeepSeek-V2, Llama 4), Llama 4's no-position layer.
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {},
    "mixtral": {"num_local_experts": 2},
    "qwen2": {},
    "qwen2_moe": {
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 16,
    },
    "qwen3": {},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16},
    "phi": {"partial_rotary_factor": 0.5},
    "phi3": {"original_max_position_embeddings": 32},
    "phimoe": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "gemma": {},
    "gemma2": {"sliding_window": 4},
    "gemma3_text": {
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        },
    },
    "gpt_neox": {"rotary_pct": 0.25},
    "stablelm": {"partial_rotary_factor": 0.25},
    "cohere": {},
    "cohere2": {},
    "olmo": {},
    "olmo2": {},
    "starcoder2": {},
    "glm": {},
    "glm4": {},
    "granite": {},
    "helium": {},
    "ernie4_5": {},
    "gpt_oss": {"num_local_experts": 4, "num_experts_per_tok": 2},  # cos/sin of width P
    "persimmon": {},
    "smollm3": {},
    "exaone4": {},
    "ministral3": {  # its defaults at a tiny original length
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 2.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.1,
            "original_max_position_embeddings": 32,
        },
    },
    "deepseek_v2": _MLA | {"q_lora_rank": None},
    "deepseek_v3": _MLA | {"q_lora_rank": 16, "n_group": 1, "topk_group": 1},
    "llama4_text": {"intermediate_size_mlp": 64, "num_local_experts": 2, "no_rope_layers": [1, 0]},
    "gptj": {},
    "codegen": {},
}


def config(model_type: str, **overrides: Any) -> Any:
    """A transformers config of ``model_type`` at the tiny sizes, with ``overrides``."""
    from transformers import CONFIG_MAPPING

    base = _GPTJ if model_type in ("gptj", "codegen") else SMALL
    kw = {k: v for k, v in (base | FAMILIES[model_type] | overrides).items() if v is not None}
    return CONFIG_MAPPING[model_type](**copy.deepcopy(kw))  # configs update nested dicts


def model(model_type: str, seed: int = 0, **overrides: Any) -> Any:
    """A tiny ``*ForCausalLM`` in eval mode, weights drawn from ``seed``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config(model_type, **overrides)).eval()


def twin(reference: Any, model_type: str, **overrides: Any) -> Any:
    """The same weights in a model built from a different config (e.g. with rope_scaling)."""
    other = model(model_type, **overrides)
    other.load_state_dict(reference.state_dict())
    return other


def tokens(B: int = 2, T: int = 12, seed: int = 1) -> torch.Tensor:
    """Token ids (B, T) avoiding the special ids 0-2."""
    return torch.randint(3, 97, (B, T), generator=torch.Generator().manual_seed(seed))
