"""M-RoPE against transformers 5.23's Qwen2-VL, Qwen2.5-VL and Qwen3-VL (tiny configs, no
downloads): position ids of mixed text/image/video prompts (``get_rope_index``), cos/sin of
their rotary embeddings fed the same 3-D ids, the rotated q/k, and ``rope_from_hf``."""

from __future__ import annotations

import importlib
import types
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import posenc

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor

_TEXT = {
    "hidden_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
}
#: model_type -> (config class, model class, rotary class, mrope_section, interleaved)
MODELS = {
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLModel", "Qwen2VLRotaryEmbedding", [16, 24, 24], False),
    "qwen2_5_vl": (
        "Qwen2_5_VLConfig",
        "Qwen2_5_VLModel",
        "Qwen2_5_VLRotaryEmbedding",
        [16, 24, 24],
        False,
    ),
    "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLModel", "Qwen3VLTextRotaryEmbedding", [24, 20, 20], True),
}
IMG, VID, PAD = 7, 8, 0


def _module(model_type: str) -> Any:
    return importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")


def _config(model_type: str, **rope: Any) -> Any:
    config_cls, *_, section, _ = MODELS[model_type]
    params = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": section, **rope}
    return getattr(transformers, config_cls)(text_config=_TEXT | {"rope_parameters": params})


def _rope_index(model_type: str, config: Any, **inputs: Any) -> torch.Tensor:
    """transformers' ``get_rope_index`` of the model class, on an object holding only the
    config (the method reads nothing else), so no model weights are made."""
    model_cls = getattr(_module(model_type), MODELS[model_type][1])
    holder = SimpleNamespace(config=config)
    holder.get_vision_position_ids = types.MethodType(model_cls.get_vision_position_ids, holder)
    ids: torch.Tensor = model_cls.get_rope_index(holder, **inputs)[0]
    return ids


def _prompts(frames_apart: bool) -> dict[str, torch.Tensor]:
    """Two left-padded rows: text, an image (1, 4, 6), text, a video (2, 4, 4) (Qwen3-VL: its
    frames apart, text between them), text; and a video before an image (1, 4, 4)."""
    video = [VID] * 4 + [3] + [VID] * 4 if frames_apart else [VID] * 8
    rows = [
        [1, 2, 3] + [IMG] * 6 + [4, 5] + video + [9],
        [1] + video + [2, 3] + [IMG] * 4 + [5] * 6,
    ]
    T = max(map(len, rows))
    ids = torch.tensor([[PAD] * (T - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (T - len(r)) + [1] * len(r) for r in rows])
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "mm_token_type_ids": (ids == IMG).long() + 2 * (ids == VID).long(),
        "image_grid_thw": torch.tensor([[1, 4, 6], [1, 4, 4]]),
        "video_grid_thw": torch.tensor([[2, 4, 4], [2, 4, 4]]),
    }


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_position_ids_equal_get_rope_index(model_type: str) -> None:
    config = _config(model_type)
    interleaved = MODELS[model_type][4]
    inputs = _prompts(frames_apart=interleaved)
    extra: dict[str, Any] = {}
    if model_type == "qwen2_5_vl":  # absolute time: 0.7 s and 1.3 s per temporal patch
        extra = {"second_per_grid_ts": torch.tensor([0.7, 1.3])}
    theirs = _rope_index(model_type, config, **inputs, **extra)
    tps = config.vision_config.tokens_per_second if model_type == "qwen2_5_vl" else None
    ours = posenc.mrope_positions(
        inputs["input_ids"],
        image_grid_thw=inputs["image_grid_thw"],
        video_grid_thw=inputs["video_grid_thw"],
        attention_mask=inputs["attention_mask"],
        image_token_id=IMG,
        video_token_id=VID,
        spatial_merge_size=config.vision_config.spatial_merge_size,
        tokens_per_second=tps,
        frames_apart=interleaved,
        **extra,
    )
    assert torch.equal(ours, theirs)
    by_types = posenc.mrope_positions(
        inputs["input_ids"],
        mm_token_type_ids=inputs["mm_token_type_ids"],
        image_grid_thw=inputs["image_grid_thw"],
        video_grid_thw=inputs["video_grid_thw"],
        attention_mask=inputs["attention_mask"],
        tokens_per_second=tps,
        frames_apart=interleaved,
        **extra,
    )
    assert torch.equal(by_types, theirs)


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_rope_from_hf_reads_qwen_vl_as_mrope(model_type: str) -> None:
    section, interleaved = MODELS[model_type][3:]
    pe = posenc.rope_from_hf(_config(model_type))
    assert pe.name == "mrope" and pe.capabilities.axes == 3
    assert (pe.head_dim, pe.base) == (128, 1e6)
    assert (pe.mrope_section, pe.interleaved) == (tuple(section), interleaved)
    default = getattr(transformers, MODELS[model_type][0])()  # no mrope_section: the model's
    assert posenc.rope_from_hf(default).mrope_section == tuple(section)


def test_rope_from_hf_reads_qwen2_vl_config_json() -> None:
    """The released config.json: top-level rope_theta and rope_scaling {"type": "mrope"}."""
    config = {
        "model_type": "qwen2_vl",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    }
    pe = posenc.rope_from_hf(config)
    assert (pe.name, pe.head_dim, pe.mrope_section, pe.interleaved) == (
        "mrope",
        128,
        (16, 24, 24),
        False,
    )
    with pytest.raises(ValueError, match="kv_policy must be 'reference'"):
        posenc.rope_from_hf(config, kv_policy="rerotate")
    scaled = {
        **config,
        "rope_scaling": {"type": "yarn", "factor": 2.0, "mrope_section": [16, 24, 24]},
    }
    with pytest.raises(ValueError, match="with M-RoPE is not supported"):
        posenc.rope_from_hf(scaled)


def _ids(T: int, high: int, seed: int) -> torch.Tensor:
    return torch.randint(0, high, (3, 2, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_cos_sin_and_rotated_qk_equal_transformers(model_type: str) -> None:
    """Fed the same (3, B, T) ids: cos/sin (transformers repeats the P angles twice), then
    apply_rotary_pos_emb. Below position 64 transformers' float32 angles pos·θ are exact to
    ~1e-5 rad; up to 5000 they drift by ~pos·2^-24 while posenc's float64 angles do not."""
    config = _config(model_type)
    rotary = getattr(_module(model_type), MODELS[model_type][2])(config.text_config)
    pe = posenc.rope_from_hf(config)
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 2, 9, 128, generator=gen), torch.randn(2, 1, 9, 128, generator=gen)
    for high, atol in ((64, 1e-5), (5000, 5000 * 2.0**-22)):
        ids = _ids(9, high, seed=high)
        cos, sin = rotary(q, ids)  # (B, T, D)
        ours_cos, ours_sin = pe.cos_sin(ids.movedim(0, -1))  # (B, T, P)
        torch.testing.assert_close(cos, torch.cat([ours_cos] * 2, -1), atol=atol, rtol=0)
        torch.testing.assert_close(sin, torch.cat([ours_sin] * 2, -1), atol=atol, rtol=0)
        theirs = _module(model_type).apply_rotary_pos_emb(q, k, cos, sin)
        ours = pe.rotate(q, k, ids.movedim(0, -1), ids.movedim(0, -1))
        for t, o in zip(theirs, ours, strict=True):
            torch.testing.assert_close(o, t, atol=12 * atol, rtol=0)


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_float64_rotary_equals_transformers_exactly_in_float64(model_type: str) -> None:
    """With transformers' float32 rounding removed (θ and the ids in float64, then its own
    recomposition of the sections), the angles agree to 1e-12."""
    config = _config(model_type)
    rotary = getattr(_module(model_type), MODELS[model_type][2])(config.text_config)
    pe = posenc.rope_from_hf(config)
    ids = _ids(11, 100_000, seed=1)
    theta = 1e6 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)  # (P,)
    freqs = ids[..., None].double() * theta  # (3, B, T, P)
    theirs = rotary.recomposition_frequencies(freqs)[..., :64]  # (B, T, P) their sections
    ours = pe.angles(ids.movedim(0, -1))  # (B, T, P) float64
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-9)
