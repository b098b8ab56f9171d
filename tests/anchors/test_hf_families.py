"""rope_from_hf per model family: each transformers config class, its own rotary embedding
class and q/k rotation (layouts as the model applies them), inside and past the original
context; multimodal wrappers (Llama 4, Gemma 3) and Gemma 3's older per-layer schema."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import posenc
from tests.extension._hf import DEEPSEEK_SIZES

pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor

Rotation = Callable[[torch.Tensor, torch.Tensor, torch.nn.Module, torch.Tensor], Any]

_SMALL = {
    "hidden_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
}
_LLAMA4 = _SMALL | {"head_dim": 128, "intermediate_size_mlp": 64, "num_local_experts": 2}
SCALINGS: dict[str, dict[str, Any] | None] = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
    "yarn-mscale": {
        "type": "yarn",
        "factor": 40.0,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 2048,
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 2048,
    },
}
#: model_type -> (extra config keys, rotary class, how the model rotates q and k).
FAMILIES: dict[str, tuple[dict[str, Any], str, str]] = {
    "llama": (_SMALL, "LlamaRotaryEmbedding", "cos_sin"),
    "mistral": (_SMALL, "MistralRotaryEmbedding", "cos_sin"),
    "qwen2": (_SMALL, "Qwen2RotaryEmbedding", "cos_sin"),
    "cohere": (_SMALL, "CohereRotaryEmbedding", "cos_sin"),
    "glm": (_SMALL | {"head_dim": 128}, "GlmRotaryEmbedding", "cos_sin"),
    "glm4": (_SMALL | {"head_dim": 128}, "Glm4RotaryEmbedding", "cos_sin"),
    "gpt_neox": (_SMALL | {"rotary_pct": 0.25}, "GPTNeoXRotaryEmbedding", "cos_sin"),
    "deepseek_v2": (DEEPSEEK_SIZES, "DeepseekV2RotaryEmbedding", "complex_bhtd"),
    "llama4_text": (_LLAMA4, "Llama4TextRotaryEmbedding", "complex_bthd"),
}
MODULES = {"llama4_text": "llama4"}
POSITIONS = torch.tensor([0, 1, 7, 60, 2047, 2048, 3000, 9000, 40_000])


def _module(model_type: str) -> Any:
    name = MODULES.get(model_type, model_type)
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _rotation(model_type: str, kind: str) -> Rotation:
    """q, k (B, H, T, D), rotary module, position_ids (B, T) -> the model's rotated q, k."""
    mod = _module(model_type)

    def cos_sin(q: torch.Tensor, k: torch.Tensor, rotary: Any, ids: torch.Tensor) -> Any:
        cos, sin = rotary(q, ids)
        return mod.apply_rotary_pos_emb(q, k, cos, sin)

    def complex_bhtd(q: torch.Tensor, k: torch.Tensor, rotary: Any, ids: torch.Tensor) -> Any:
        return mod.apply_rotary_emb(q, k, rotary(q, ids))

    def complex_bthd(q: torch.Tensor, k: torch.Tensor, rotary: Any, ids: torch.Tensor) -> Any:
        hq, hk = mod.apply_rotary_emb(q.transpose(1, 2), k.transpose(1, 2), rotary(q, ids))
        return hq.transpose(1, 2), hk.transpose(1, 2)

    return {"cos_sin": cos_sin, "complex_bhtd": complex_bhtd, "complex_bthd": complex_bthd}[kind]


def _config(model_type: str, scaling: dict[str, Any] | None, **extra: Any) -> Any:
    from transformers import CONFIG_MAPPING

    kw = FAMILIES[model_type][0] | {"max_position_embeddings": 8192} | extra
    return CONFIG_MAPPING[model_type](
        **kw, **({} if scaling is None else {"rope_scaling": scaling})
    )


def _assert_same_rotation(pe: Any, rotary: Any, rotate: Rotation, pos: torch.Tensor) -> None:
    """Frequencies and attention scaling as transformers' (after its dynamic update), rotations
    equal to float32 rounding: tight near 0, within the rounding of pos·θ further out."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 2, len(pos), pe.head_dim, generator=g)
    k = torch.randn(2, 1, len(pos), pe.head_dim, generator=g)
    ids = pos[None].expand(2, -1)
    hq, hk = rotate(q, k, rotary, ids)
    oq, ok = pe.rotate(q, k, pos, pos)
    inv_freq, scale = pe.frequencies(int(pos.max()) + 1)
    torch.testing.assert_close(inv_freq.float(), rotary.inv_freq, rtol=1.3e-6, atol=0.0)
    assert scale == pytest.approx(rotary.attention_scaling, rel=1e-12)
    allowance = 1e-5 + pos.double()[:, None] * 2.0**-21 * 5.0  # |x| < 5, |pos·θ| <= pos
    for ours, theirs in ((oq, hq), (ok, hk)):
        err = (ours - theirs).double().abs().amax(dim=(0, 1, 3))  # (T,)
        assert bool((err <= allowance[:, 0]).all()), (err, allowance[:, 0])
        assert float(err[pos < 64].max()) <= 2e-5


@pytest.mark.parametrize("scaling", list(SCALINGS))
@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_family_rotation_equals_its_transformers_rotary(model_type: str, scaling: str) -> None:
    spec = SCALINGS[scaling]
    cfg = _config(model_type, None if spec is None else dict(spec))
    _, cls, kind = FAMILIES[model_type]
    for pos in (POSITIONS[:5], POSITIONS):  # within, then past the original context
        rotary = getattr(_module(model_type), cls)(cfg)
        _assert_same_rotation(posenc.rope_from_hf(cfg), rotary, _rotation(model_type, kind), pos)
    pe = posenc.rope_from_hf(cfg.to_dict())
    again = posenc.rope_from_hf(posenc.rope_to_hf(pe))
    assert (again.scaling, again.layout, again.rotary_dim, again.base) == (
        pe.scaling,
        pe.layout,
        pe.rotary_dim,
        pe.base,
    )


@pytest.mark.parametrize("partial", [1.0, 0.75])
def test_phi3_longrope_switches_short_to_long_like_transformers(partial: float) -> None:
    from transformers import Phi3Config

    n = int(128 * partial) // 2
    short = [1.0 + 0.01 * i for i in range(n)]
    long = [1.0 + 0.5 * i for i in range(n)]
    cfg = Phi3Config(
        **_SMALL,
        partial_rotary_factor=partial,
        max_position_embeddings=131072,
        original_max_position_embeddings=2048,
        rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long},
    )
    mod = _module("phi3")
    for pos in (POSITIONS[:5], POSITIONS):
        pe = posenc.rope_from_hf(cfg)
        _assert_same_rotation(pe, mod.Phi3RotaryEmbedding(cfg), _rotation("phi3", "cos_sin"), pos)
    assert posenc.rope_from_hf(posenc.rope_to_hf(pe)).scaling == pe.scaling


@pytest.mark.parametrize("codegen", [False, True])
def test_gptj_and_codegen_interleaved_partial_past_the_table(codegen: bool) -> None:
    from transformers import CodeGenConfig, GPTJConfig

    model_type = "codegen" if codegen else "gptj"
    mod = _module(model_type)
    cfg = (CodeGenConfig if codegen else GPTJConfig)(
        n_embd=512, n_head=4, rotary_dim=64, n_positions=2048, n_layer=1
    )
    pe = posenc.rope_from_hf(cfg)
    assert (pe.layout, pe.rotary_dim, pe.head_dim) == ("interleaved", 64, 128)
    sincos = mod.create_sinusoidal_positions(int(POSITIONS.max()) + 1, 64)[POSITIONS][None]
    sin, cos = sincos.chunk(2, dim=-1)

    def rotate(q: torch.Tensor, k: torch.Tensor, rotary: Any, ids: torch.Tensor) -> Any:
        out = []
        for x in (q.transpose(1, 2), k.transpose(1, 2)):  # the model rotates (B, T, H, D)
            rot = mod.apply_rotary_pos_emb(x[..., :64], sin, cos)
            out.append(torch.cat([rot, x[..., 64:]], dim=-1).transpose(1, 2))
        return out

    inv_freq = 1.0 / 10000 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64)  # GPT-J's
    reference = SimpleNamespace(inv_freq=inv_freq.float(), attention_scaling=1.0)
    _assert_same_rotation(pe, reference, rotate, POSITIONS)


def _llama4_text(**scaling: Any) -> dict[str, Any]:
    return _LLAMA4 | {
        "model_type": "llama4_text",
        "max_position_embeddings": 10485760,
        "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "original_max_position_embeddings": 8192} | scaling,
    }


def test_llama4_multimodal_config_is_read_from_its_text_config() -> None:
    """Llama 4's config.json nests the language model under ``text_config``."""
    from transformers import Llama4Config, Llama4TextConfig

    text = _llama4_text(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)
    kw = {k: v for k, v in text.items() if k != "model_type"}
    rotary = _module("llama4_text").Llama4TextRotaryEmbedding(Llama4TextConfig(**kw))
    wrapped = {"model_type": "llama4", "text_config": text}
    for source in (wrapped, Llama4Config(text_config=kw)):
        pe = posenc.rope_from_hf(source)
        assert (pe.layout, pe.head_dim) == ("interleaved", 128)
        _assert_same_rotation(pe, rotary, _rotation("llama4_text", "complex_bthd"), POSITIONS)


def test_llama4_scout_equal_low_and_high_freq_factors() -> None:
    from transformers import Llama4TextConfig

    text = _llama4_text(factor=16.0, low_freq_factor=1.0, high_freq_factor=1.0)
    kw = {k: v for k, v in text.items() if k != "model_type"}
    rotary = _module("llama4_text").Llama4TextRotaryEmbedding(Llama4TextConfig(**kw))
    pe = posenc.rope_from_hf(text)
    _assert_same_rotation(pe, rotary, _rotation("llama4_text", "complex_bthd"), POSITIONS)


def _gemma3_old_schema() -> dict[str, Any]:
    """The text part of a Gemma 3 (4B+) config.json as published, before ``rope_parameters``."""
    return {
        "model_type": "gemma3_text",
        "hidden_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "intermediate_size": 32,
        "num_hidden_layers": 6,
        "max_position_embeddings": 131072,
        "rope_theta": 1e6,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    }


@pytest.mark.parametrize("wrapped", [False, True])
def test_gemma3_older_schema_per_layer_and_multimodal_wrapper(wrapped: bool) -> None:
    """``rope_local_base_freq`` + ``rope_scaling`` mean: full attention scaled at rope_theta,
    sliding attention plain at the local base (transformers' conversion)."""
    gemma3 = _module("gemma3")
    from transformers import Gemma3TextConfig

    text = _gemma3_old_schema()
    rotary = gemma3.Gemma3RotaryEmbedding(
        Gemma3TextConfig(**{k: v for k, v in text.items() if k != "model_type"})
    )
    source = {"model_type": "gemma3", "text_config": text} if wrapped else text
    for layer_type in ("full_attention", "sliding_attention"):
        pe = posenc.rope_from_hf(source, layer_type=layer_type)

        def rotate(q: torch.Tensor, k: torch.Tensor, _: Any, ids: torch.Tensor) -> Any:
            cos, sin = rotary(q, ids, layer_type)  # noqa: B023
            return gemma3.apply_rotary_pos_emb(q, k, cos, sin)

        reference = SimpleNamespace(
            inv_freq=getattr(rotary, f"{layer_type}_inv_freq"),
            attention_scaling=getattr(rotary, f"{layer_type}_attention_scaling"),
        )
        _assert_same_rotation(pe, reference, rotate, POSITIONS)
