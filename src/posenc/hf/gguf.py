"""GGUF files (llama.cpp, ollama, LM Studio) as transformers models: ``load_gguf(path)``.

A GGUF file holds a model's hyperparameters as metadata keys (``llama.context_length``,
``llama.rope.freq_base``, ``llama.rope.scaling.type``, ...) and its weights as (often
quantised) tensors named ``blk.{i}.attn_q.weight`` and so on. ``load_gguf`` reads both with the
``gguf`` package (maintained by llama.cpp): the metadata becomes a transformers config, each
tensor is dequantised to float32 and renamed, and for the ``llama`` architecture the q and k
rows are permuted back from the interleaved pairs llama.cpp's converter wrote (its rotation
pairs features (2i, 2i + 1)) to transformers' halves (i, i + P) with ``posenc.convert.qk_layout``.

The RoPE scaling in the metadata is kept, as llama.cpp applies it (``posenc.hf.conform``'s
``llamacpp_rope``): transformers' own GGUF loader drops ``rope.scaling.*`` for these
architectures (it reads it for gpt-oss only). Read: ``llama`` (Llama, Mistral, SmolLM),
``qwen2`` and ``qwen3``; other architectures, per-frequency factor tensors (Llama 3.1's
``rope_freqs``, LongRoPE's ``rope_factors_*``) and unknown tensors raise a ValueError naming
them rather than load a model that computes something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..convert import qk_layout

__all__ = [
    "ARCHITECTURES",
    "GGUFFile",
    "gguf_config",
    "gguf_state_dict",
    "load_gguf",
    "read_gguf",
]

#: GGUF architecture -> transformers model_type; only these are read.
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
#: Architectures whose converter interleaved the q/k rows (llama.cpp's "normal" rope mode).
_PERMUTED = frozenset({"llama"})
#: GGUF tensor name (after ``blk.{i}.``) -> transformers parameter (after ``model.layers.{i}.``).
_LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
#: Metadata arrays too long to be worth converting (the vocabulary): read by the tokenizer.
_SKIPPED_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")


@dataclass(frozen=True)
class GGUFFile:
    """A GGUF file's architecture and metadata (key -> str, int, float, bool or list; the
    vocabulary arrays left out) and its tensors' names, types and shapes (rows, columns)."""

    path: Path
    architecture: str
    metadata: dict[str, Any]
    tensors: dict[str, tuple[str, tuple[int, ...]]]

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``{architecture}.{key}`` (e.g. ``rope.freq_base``), or ``default``."""
        return self.metadata.get(f"{self.architecture}.{key}", default)


def _reader(path: str | Path) -> Any:
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ImportError(
            "reading GGUF files needs the gguf package: pip install 'posenc[gguf]'"
        ) from None
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no GGUF file at {str(path)!r}")
    try:
        return GGUFReader(str(path))
    except (ValueError, OSError) as err:
        raise ValueError(f"{str(path)!r} is not a GGUF file: {err}") from None


def read_gguf(path: str | Path) -> GGUFFile:
    """A GGUF file's metadata and tensor listing (no tensor data is read).

    Raises: ValueError for a missing file or one that is not GGUF; ImportError without the
    ``gguf`` package.
    """
    reader = _reader(path)
    metadata: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in _SKIPPED_ARRAYS:
            continue
        metadata[key] = _value(field.contents())
    tensors = {
        t.name: (t.tensor_type.name, tuple(int(n) for n in reversed(t.shape.tolist())))
        for t in reader.tensors
    }
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError(f"{path} has no general.architecture")
    return GGUFFile(Path(path), arch, metadata, tensors)


def _value(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list):
        return [_value(v) for v in value]
    return value


def llamacpp_scaling(file: GGUFFile) -> dict[str, Any] | None:
    """The rope scaling a GGUF file asks llama.cpp for, as transformers' ``rope_parameters``
    keys that compute the same angles and magnitude (None without scaling).

    ``rope.scaling.type`` "linear": {"rope_type": "linear", "factor"}; "yarn": the YaRN keys
    with ``attention_factor`` set to llama.cpp's magnitude (``conform.llamacpp_attn_factor``:
    0.1·ln(s) + 1, or the mscale ratio with ``yarn_log_multiplier``, times
    ``rope.scaling.attn_factor``), since transformers derives its default differently.
    Raises: ValueError for a type or key transformers cannot express (longrope's factor
    tensors, a YaRN ``yarn_ext_factor`` other than 1).
    """
    from .conform import llamacpp_attn_factor

    kind = file.get("rope.scaling.type", "none")
    factor = float(file.get("rope.scaling.factor", 0.0) or 0.0)
    if kind == "none" or (kind in ("linear", "yarn") and factor in (0.0, 1.0)):
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": factor}
    if kind != "yarn":
        raise ValueError(
            f"rope.scaling.type {kind!r} is not read (posenc reads none, linear and yarn; "
            "longrope's factors live in rope_factors_* tensors)"
        )
    ext = file.get("rope.scaling.yarn_ext_factor")
    if ext is not None and float(ext) >= 0.0 and float(ext) != 1.0:
        raise ValueError(
            f"rope.scaling.yarn_ext_factor = {ext} mixes YaRN's ramp partly: transformers' "
            "YaRN has ext_factor 1"
        )
    spec: dict[str, Any] = {"rope_type": "yarn", "factor": factor}
    original = file.get("rope.scaling.original_context_length")
    if original is not None:
        spec["original_max_position_embeddings"] = int(original)
    for key, hf in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
        if file.get(f"rope.scaling.{key}") is not None:
            spec[hf] = float(file.get(f"rope.scaling.{key}"))
    spec["attention_factor"] = llamacpp_attn_factor(
        "yarn", factor, rope_attn_factor=float(file.get("rope.scaling.attn_factor", 1.0))
    )  # the architectures read here do not read yarn_log_multiplier
    return spec


def gguf_config(file: GGUFFile) -> Any:
    """The transformers config of a GGUF file's metadata (``read_gguf``).

    Raises: ValueError for an architecture posenc does not read, per-frequency factor
    tensors, a rotary width other than the head's, or missing sizes.
    """
    from transformers import AutoConfig

    arch = file.architecture
    if arch not in ARCHITECTURES:
        raise ValueError(
            f"GGUF architecture {arch!r} is not read; posenc reads {sorted(ARCHITECTURES)}"
        )
    factors = sorted(n for n in file.tensors if n.startswith(("rope_freqs", "rope_factors")))
    if factors:
        raise ValueError(
            f"{file.path.name} scales RoPE by per-frequency factor tensors {factors} (Llama 3.1, "
            "LongRoPE), which transformers' rope_parameters do not hold: not read"
        )
    need = ("embedding_length", "block_count", "attention.head_count", "feed_forward_length")
    missing = [f"{arch}.{k}" for k in need if file.get(k) is None]
    if missing:
        raise ValueError(f"{file.path.name} lacks metadata {missing}")
    hidden, heads = int(file.get("embedding_length")), int(file.get("attention.head_count"))
    head_dim = int(file.get("attention.key_length", hidden // heads))
    rotary = int(file.get("rope.dimension_count", head_dim))
    if rotary != head_dim:
        raise ValueError(
            f"{arch}.rope.dimension_count = {rotary} rotates part of each {head_dim}-wide head: "
            f"transformers' {ARCHITECTURES[arch]} rotates all of it"
        )
    embd = file.tensors.get("token_embd.weight")
    vocab = int(file.get("vocab_size", embd[1][0] if embd else 0))
    params: dict[str, Any] = {"rope_type": "default"}
    params |= llamacpp_scaling(file) or {}
    params["rope_theta"] = float(file.get("rope.freq_base", 10000.0))
    kwargs: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": int(file.get("feed_forward_length")),
        "num_hidden_layers": int(file.get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(file.get("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "max_position_embeddings": int(file.get("context_length", 2048)),
        "rms_norm_eps": float(file.get("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_parameters": params,
        "tie_word_embeddings": "output.weight" not in file.tensors,
        "bos_token_id": file.metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": file.metadata.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": file.metadata.get("tokenizer.ggml.padding_token_id"),
    }
    if arch == "llama":
        kwargs["attention_bias"] = "blk.0.attn_q.bias" in file.tensors
    if arch == "qwen2" and params["rope_type"] == "default":
        kwargs["use_sliding_window"] = False
    config = AutoConfig.for_model(ARCHITECTURES[arch], **kwargs)
    config.name_or_path = str(file.metadata.get("general.name", file.path.stem))
    return config


def gguf_state_dict(path: str | Path, config: Any) -> dict[str, Tensor]:
    """The weights of a GGUF file as a transformers state dict (float32), for ``config``
    (``gguf_config``): dequantised, renamed, and for ``llama`` the q/k rows of each head
    permuted from interleaved pairs back to halves (``qk_layout``).

    Raises: ValueError for a tensor posenc does not know where to put.
    """
    from gguf import dequantize

    reader = _reader(path)
    arch = str(reader.fields["general.architecture"].contents())
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
    state: dict[str, Tensor] = {}
    for t in reader.tensors:
        name, rows_cols = _hf_name(t.name), tuple(int(n) for n in reversed(t.shape.tolist()))
        array = dequantize(t.data, t.tensor_type).reshape(rows_cols)  # (rows, columns)
        weight = torch.from_numpy(np.array(array, dtype=np.float32))  # a copy: the file is mapped
        kind = t.name.split(".")[2] if t.name.startswith("blk.") else ""
        if arch in _PERMUTED and kind in heads:
            weight = qk_layout(
                weight, n_heads=heads[kind], head_dim=config.head_dim, src="interleaved", dst="half"
            )
        state[name] = weight
    return state


def _hf_name(name: str) -> str:
    if name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[name]
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}.{parts[3]}"
    raise ValueError(f"GGUF tensor {name!r} has no place in a transformers model posenc builds")


def load_gguf(
    path: str | Path,
    *,
    config: Any = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> tuple[Any, Any]:
    """A GGUF file as a transformers causal LM (eval mode) and its tokenizer.

    The config comes from the metadata (``gguf_config``; RoPE scaling as llama.cpp applies
    it) unless ``config`` is given (e.g. that config with another ``rope_parameters``), the
    weights are dequantised to float32 (``gguf_state_dict``) and cast to ``dtype``; the
    tokenizer is transformers' conversion of the file's vocabulary (None for a file without one).
    Raises: ValueError as ``gguf_config``/``gguf_state_dict`` and for a file whose tensors
    do not fill the model; ImportError without gguf or transformers.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    file = read_gguf(path)
    config = gguf_config(file) if config is None else config
    state = gguf_state_dict(file.path, config)
    model: Any = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(
            f"{file.path.name}: tensors missing {missing[:5]} / unexpected {unexpected[:5]} "
            f"for a transformers {config.model_type} model"
        )
    if config.tie_word_embeddings:
        model.tie_weights()
    tokenizer = None
    if "tokenizer.ggml.model" in file.metadata:
        tokenizer = AutoTokenizer.from_pretrained(str(file.path.parent), gguf_file=file.path.name)
    return model.to(device=device, dtype=dtype).eval(), tokenizer
