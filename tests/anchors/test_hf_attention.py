"""attention_from_hf against transformers: DeepSeek's softmax scale under YaRN, Llama 4's
no-position layers and their query temperature, Ministral 3's query temperature; and the
config keys rope_from_hf refuses or reads instead of dropping (M-RoPE, llama_4_scaling_beta)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import posenc
from posenc.hf.attention_config import HFAttention, QueryScale, attention_from_hf
from tests.hf import _tiny

pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor

_DEEPSEEK_YARN = {
    "type": "yarn",
    "factor": 40.0,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
}


@pytest.mark.parametrize("model_type", ["deepseek_v2", "deepseek_v3"])
@pytest.mark.parametrize(
    "rope_scaling",
    [
        _DEEPSEEK_YARN,  # DeepSeek-V3's config.json: mscale(40, 1)^2 = 1.3689^2
        _DEEPSEEK_YARN | {"mscale": 0.707, "mscale_all_dim": 0.707},
        _DEEPSEEK_YARN | {"mscale_all_dim": 0},  # V2-Lite style: no softmax factor
        None,
    ],
)
def test_deepseek_softmax_scale_equals_transformers_attention(
    model_type: str, rope_scaling: dict[str, Any] | None
) -> None:
    """mscale_all_dim multiplies the softmax scale outside the rotation: attention_from_hf's
    logit_scale times qk_head_dim^-1/2 is transformers' ``attn.scaling``."""
    model = _tiny.model(model_type, rope_scaling=rope_scaling, max_position_embeddings=163840)
    attn = model.model.layers[0].self_attn
    spec = attention_from_hf(model.config)
    assert attn.scaling == pytest.approx(attn.qk_head_dim**-0.5 * spec.logit_scale, rel=1e-12)
    if rope_scaling is _DEEPSEEK_YARN:
        assert spec.logit_scale == pytest.approx((0.1 * math.log(40.0) + 1.0) ** 2, rel=1e-12)
    assert attention_from_hf(model.config.to_dict()) == spec  # config.json dict: the same


def test_other_models_have_no_softmax_factor() -> None:
    """Ministral 3's rope_parameters hold mscale_all_dim too, but its attention ignores it."""
    model = _tiny.model("ministral3")
    attn = model.model.layers[0].self_attn
    assert attention_from_hf(model.config).logit_scale == 1.0 == attn.scaling * 16**0.5
    assert attention_from_hf(_tiny.config("llama")) == HFAttention()
    assert attention_from_hf(_tiny.config("gemma3_text")) == HFAttention()


def test_ministral3_query_scale_equals_transformers() -> None:
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    config = _tiny.config("ministral3")
    spec = attention_from_hf(config)
    assert spec.query_scale_layers == (0, 1) and spec.nope_layers == ()
    pos = torch.tensor([[0, 1, 31, 32, 33, 100, 1000, 70_000]])
    theirs = get_llama_4_attn_scale(pos, 0.1, 32)[:, 0, :, 0]  # (B, T)
    torch.testing.assert_close(spec.query_scale(pos).float(), theirs, atol=1e-6, rtol=0)
    # rope_from_hf reads the same rope_parameters (the temperature keys set aside)
    pe = posenc.rope_from_hf(config)
    rotary = _tiny.model("ministral3").model.rotary_emb
    torch.testing.assert_close(pe.inv_freq, rotary.inv_freq, rtol=1.3e-6, atol=0.0)
    assert pe.attention_scaling == pytest.approx(rotary.attention_scaling, rel=1e-12)


def _nope_attention(attn: Any, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A Llama 4 no-position attention layer written out: q·scale(pos), no rotation, causal."""
    B, T, _ = x.shape
    D = attn.head_dim
    q = attn.q_proj(x).view(B, T, -1, D) * scale[None, :, None, None]  # (B, T, H, D)
    k = attn.k_proj(x).view(B, T, -1, D)
    v = attn.v_proj(x).view(B, T, -1, D)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, scale=attn.scaling, enable_gqa=True
    )
    return attn.o_proj(out.transpose(1, 2).reshape(B, T, -1))


def test_llama4_nope_layers_and_temperature_equal_transformers() -> None:
    """iRoPE: the layers ``nope_layers`` names skip the rotation, and their queries are scaled
    by ``query_scale`` at positions 0..T-1 (a short floor_scale so that it exceeds 1)."""
    model = _tiny.model(
        "llama4_text", no_rope_layers=None, num_hidden_layers=4, floor_scale=4, attn_scale=0.5
    )
    spec = attention_from_hf(model.config)
    layers = model.model.layers
    assert spec.nope_layers == (3,)  # every 4th layer (no_rope_layer_interval)
    assert [not layer.self_attn.use_rope for layer in layers] == [False, False, False, True]
    assert spec.query_scale == QueryScale(beta=0.5, length=4, offset=1)
    assert spec.query_scale_layers == spec.nope_layers
    attn = layers[3].self_attn
    x = torch.randn(2, 9, 64)
    pos = torch.arange(9)
    with torch.no_grad():
        theirs, _ = attn(x, position_embeddings=None, attention_mask=None)
        ours = _nope_attention(attn, x, spec.query_scale(pos).float())
        plain = _nope_attention(attn, x, torch.ones(9))
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert (plain - theirs).abs().max() > 1e-3  # the temperature is in effect
    off = attention_from_hf(model.config.to_dict() | {"attn_temperature_tuning": False})
    assert off == HFAttention(nope_layers=(3,))


def test_llama4_config_json_without_defaults() -> None:
    """A config.json that omits the keys takes Llama4TextConfig's defaults (every 4th layer
    without positions, temperature tuning on at floor_scale 8192, attn_scale 0.1)."""
    spec = attention_from_hf({"model_type": "llama4_text", "num_hidden_layers": 8, "head_dim": 8})
    assert spec.nope_layers == (3, 7)
    assert spec.query_scale == QueryScale(beta=0.1, length=8192, offset=1)
    pos = torch.tensor([0, 8190, 8191, 3 * 8192])
    torch.testing.assert_close(
        spec.query_scale(pos),
        torch.tensor(
            [1.0, 1.0, 1.0 + 0.1 * math.log(2), 1.0 + 0.1 * math.log(4)], dtype=torch.float64
        ),
    )


@pytest.mark.parametrize(
    ("rope", "sections"),
    [
        ({"type": "mrope", "mrope_section": [2, 3, 3]}, (2, 3, 3)),  # Qwen2-VL's old form
        ({"type": "default", "mrope_section": [2, 3, 3]}, (2, 3, 3)),  # Qwen2.5-VL
        ({"rope_type": "default", "mrope_interleaved": True}, None),  # Qwen2-VL's split
        ({"type": "mrope"}, None),
    ],
)
def test_multi_axis_rope_is_never_read_as_1d(rope: dict[str, Any], sections: Any) -> None:
    """M-RoPE keys give the ``mrope`` encoding (without ``mrope_section``: Qwen2-VL's split,
    scaled to the head), never 1-D RoPE with the key dropped."""
    cfg = {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4, "rope_scaling": rope}
    pe = posenc.rope_from_hf(cfg)
    assert pe.name == "mrope"
    if sections is not None:
        assert tuple(pe.mrope_section) == sections


def test_scaling_override_equals_the_config_built_with_it() -> None:
    """rope_from_hf(config, scaling=S) is rope_from_hf of the config built with rope_scaling S;
    Gemma 3's flat S scales its full-attention layers only; a dict by layer type names them."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    for model_type in ("llama", "phi", "gpt_neox", "cohere"):
        ours = posenc.rope_from_hf(_tiny.config(model_type), scaling=yarn)
        theirs = posenc.rope_from_hf(_tiny.config(model_type, rope_scaling=yarn))
        assert (ours.scaling, ours.base, ours.rotary_dim, ours.layout) == (
            theirs.scaling,
            theirs.base,
            theirs.rotary_dim,
            theirs.layout,
        )
    gemma = _tiny.config("gemma3_text")
    built = _tiny.config("gemma3_text", rope_scaling=yarn)
    for layer_type in ("full_attention", "sliding_attention"):
        ours = posenc.rope_from_hf(gemma, layer_type=layer_type, scaling=yarn)
        theirs = posenc.rope_from_hf(built, layer_type=layer_type)
        assert (ours.scaling, ours.base) == (theirs.scaling, theirs.base)
    local = posenc.rope_from_hf(
        gemma, layer_type="sliding_attention", scaling={"sliding_attention": yarn}
    )
    assert local.scaling is not None and local.base == 10000.0
    config = posenc.extension.scaling_config(yarn)
    assert posenc.rope_from_hf(gemma, layer_type="full_attention", scaling=config).scaling == config
    ntk = posenc.rope_from_hf(_tiny.config("llama"), scaling={"rope_type": "ntk", "factor": 2.0})
    assert ntk.scaling == posenc.extension.NTKScaling(factor=2.0)
    with pytest.raises(ValueError, match="rope_type 'ntk' is not supported"):
        posenc.rope_from_hf(_tiny.config("llama", rope_scaling={"rope_type": "ntk", "factor": 2}))
    with pytest.raises(TypeError, match="scaling must be a dict or a ScalingConfig"):
        posenc.rope_from_hf(_tiny.config("llama"), scaling=[("rope_type", "linear")])


def test_scaling_override_values_the_config_overrides_are_refused() -> None:
    """transformers' dynamic NTK measures from max_position_embeddings and Phi-3's top-level
    original_max_position_embeddings wins: a scaling asking for another value is an error,
    not silently replaced."""
    dynamic = posenc.extension.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=16)
    with pytest.raises(ValueError, match=r"'original_max_position_embeddings' = 16 .* sets 64"):
        posenc.rope_from_hf(_tiny.config("llama"), scaling=dynamic)
    same = dynamic.to_dict() | {"original_max_position_embeddings": 64}
    assert posenc.rope_from_hf(_tiny.config("llama"), scaling=same).scaling.factor == 2.0
    longrope = {
        "rope_type": "longrope",
        "short_factor": [1.0] * 8,
        "long_factor": [2.0] * 8,
        "original_max_position_embeddings": 16,
    }
    with pytest.raises(ValueError, match="a top-level original_max_position_embeddings wins"):
        posenc.rope_from_hf(_tiny.config("phi3"), scaling=longrope)
