"""rope_from_hf against transformers (pinned in constraints.txt): frequencies, attention
scaling, and rotated q/k inside and far outside the original context."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

import posenc
from tests.extension._hf import DEEPSEEK_SIZES, hf_config, hf_rotary, hf_rotate, rotate64

pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor

_rng = np.random.default_rng(0)
SHORT48, LONG48 = (
    (1 + 0.1 * _rng.random(48)).round(4).tolist(),
    (1 + 40 * _rng.random(48)).round(3).tolist(),
)


def _llama(**kw: Any) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
    } | kw


CONFIGS: dict[str, dict[str, Any]] = {
    "plain": _llama(rope_theta=10000.0, max_position_embeddings=4096),
    "linear": _llama(rope_scaling={"type": "linear", "factor": 4.0}, max_position_embeddings=4096),
    "llama3.1": _llama(
        rope_theta=500000.0,
        max_position_embeddings=131072,
        rope_scaling={
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    ),
    "yarn4-qwen": _llama(
        model_type="qwen2",
        rope_theta=1e6,
        max_position_embeddings=131072,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    ),
    "yarn40-deepseek": _llama(
        head_dim=64,
        rope_theta=10000.0,
        max_position_embeddings=163840,
        rope_scaling={
            "type": "yarn",
            "factor": 40.0,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
        },
    ),
    "yarn40-mscale": _llama(
        head_dim=64,
        max_position_embeddings=163840,
        rope_scaling={
            "rope_type": "yarn",
            "factor": 40.0,
            "mscale": 0.707,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
        },
    ),
    "yarn32-gptoss": _llama(
        head_dim=64,
        max_position_embeddings=131072,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 150000.0,
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 4096,
        },
    ),
    "dynamic": _llama(
        max_position_embeddings=2048, rope_scaling={"type": "dynamic", "factor": 2.0}
    ),
    "phi3-longrope": {
        "model_type": "phi3",
        "hidden_size": 192,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"type": "longrope", "short_factor": SHORT48, "long_factor": LONG48},
    },
    "phi4-partial-longrope": {
        "model_type": "phi3",
        "hidden_size": 256,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "partial_rotary_factor": 0.75,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"type": "longrope", "short_factor": SHORT48, "long_factor": LONG48},
    },
    "phi-partial": {
        "model_type": "phi",
        "hidden_size": 160,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "partial_rotary_factor": 0.4,
        "max_position_embeddings": 2048,
    },
    "neox-partial-dynamic": {
        "model_type": "gpt_neox",
        "hidden_size": 128,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "rotary_pct": 0.25,
        "max_position_embeddings": 2048,
        "rope_scaling": {"type": "dynamic", "factor": 3.0},
    },
    "cohere-interleaved": {
        "model_type": "cohere",
        "hidden_size": 128,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "max_position_embeddings": 8192,
        "rope_theta": 8e6,
        "rope_scaling": {"type": "linear", "factor": 2.0},
    },
}
ORIGINAL = {
    "plain": 4096,
    "linear": 4096,
    "llama3.1": 8192,
    "yarn4-qwen": 32768,
    "yarn40-deepseek": 4096,
    "yarn40-mscale": 4096,
    "yarn32-gptoss": 4096,
    "dynamic": 2048,
    "phi3-longrope": 4096,
    "phi4-partial-longrope": 4096,
    "phi-partial": 2048,
    "neox-partial-dynamic": 2048,
    "cohere-interleaved": 8192,
}


def _qk(pe: Any, T: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return (
        torch.randn(2, 2, T, pe.head_dim, generator=g).to(dtype),
        torch.randn(2, 1, T, pe.head_dim, generator=g).to(dtype),
    )


@pytest.mark.parametrize("name", list(CONFIGS))
def test_frequencies_and_attention_scaling_equal_transformers(name: str) -> None:
    cfg = CONFIGS[name]
    rotary, _ = hf_rotary(cfg)
    for source in (cfg, hf_config(cfg)):  # config.json dict, and transformers' config object
        pe = posenc.rope_from_hf(source)
        assert pe.inv_freq.dtype == torch.float32
        # transformers computes in float32 (a few ulps off); posenc rounds float64 once
        torch.testing.assert_close(pe.inv_freq, rotary.inv_freq, rtol=1.3e-6, atol=0.0)
        ours, theirs = (pe.inv_freq.double() - pe.inv_freq64), (rotary.inv_freq - pe.inv_freq64)
        assert bool((ours.abs() <= theirs.abs()).all())
        assert math.isclose(pe.attention_scaling, rotary.attention_scaling, rel_tol=1e-12)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("where", ["inside", "far"])
def test_rotated_qk_equal_transformers(name: str, where: str) -> None:
    """Within transformers' float32 rounding of pos·θ, and never further from float64 truth."""
    cfg, L = CONFIGS[name], ORIGINAL[name]
    pe = posenc.rope_from_hf(cfg)
    q, k = _qk(pe, T=6)
    if where == "inside":
        pos = torch.tensor([[0, 1, 2, 3, 17, L - 1], [5, 6, 7, 8, 9, 10]])
    else:
        pos = torch.tensor(
            [[0, 1, L, 3 * L, 20 * L, 100_000], [8, L + 5, 4 * L, 7 * L, 9 * L, 10 * L]]
        )
    rotary, apply = hf_rotary(cfg)
    hq, hk = hf_rotate(rotary, apply, q, k, pos)
    oq, ok = pe.rotate(q, k, pos, pos)
    inv64, scale = pe.frequencies(int(pos.max()) + 1)  # checked against the references
    for ours, theirs, x in ((oq, hq, q), (ok, hk, k)):
        truth = torch.from_numpy(rotate64(x, pos, inv64, scale, pe.layout))
        err_ours = (ours.double() - truth).abs().max().item()
        err_theirs = (theirs.double() - truth).abs().max().item()
        assert err_ours <= 5e-6, err_ours
        assert err_ours <= err_theirs + 1e-6, (err_ours, err_theirs)
        assert (ours - theirs).abs().max().item() <= err_theirs + 5e-6
        near = (pos < 64)[:, None, :, None].expand_as(ours)  # transformers' rounding is ~1e-6 here
        torch.testing.assert_close(ours[near], theirs[near], atol=1e-5, rtol=1e-5)


def test_dynamic_rotation_uses_the_current_length() -> None:
    """Dynamic NTK at max(pos) + 1 differs from the default beyond the original context."""
    pe = posenc.rope_from_hf(CONFIGS["dynamic"])
    plain = posenc.rope_from_hf(CONFIGS["dynamic"] | {"rope_scaling": None})
    q, k = _qk(pe, T=2)
    inside, outside = torch.tensor([5, 2047]), torch.tensor([5, 4095])
    torch.testing.assert_close(pe.rotate(q, k, inside, inside), plain.rotate(q, k, inside, inside))
    assert not torch.allclose(
        pe.rotate(q, k, outside, outside)[0], plain.rotate(q, k, outside, outside)[0]
    )


def test_gptj_interleaved_partial_equals_transformers() -> None:
    gptj = pytest.importorskip("transformers.models.gptj.modeling_gptj")
    cfg = {"model_type": "gptj", "n_embd": 256, "n_head": 4, "rotary_dim": 32, "n_positions": 2048}
    pe = posenc.rope_from_hf(cfg)
    assert (pe.layout, pe.rotary_dim) == ("interleaved", 32)
    q, _ = _qk(pe, T=5)
    pos = torch.tensor([0, 1, 100, 1000, 2047])
    sincos = gptj.create_sinusoidal_positions(2048, 32)[pos][None]  # (1, T, 32)
    sin, cos = sincos.chunk(2, dim=-1)
    x = q.transpose(1, 2)  # GPT-J rotates (B, T, H, D)
    rot = gptj.apply_rotary_pos_emb(x[..., :32], sin, cos)
    theirs = torch.cat([rot, x[..., 32:]], dim=-1).transpose(1, 2)
    torch.testing.assert_close(pe.rotate_one(q, pos), theirs, atol=5e-5, rtol=1e-5)


def test_deepseek_v3_interleaved_pairs_then_deinterleaved_storage() -> None:
    cfg = {
        "model_type": "deepseek_v3",
        **DEEPSEEK_SIZES,
        "max_position_embeddings": 163840,
        "rope_scaling": {
            "type": "yarn",
            "factor": 40.0,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
        },
    }
    pe = posenc.rope_from_hf(cfg)
    assert (pe.layout, pe.head_dim) == ("interleaved", 64)
    rotary, apply = hf_rotary(cfg)
    q, k = _qk(pe, T=4)
    pos = torch.tensor([0, 3, 50, 70])
    hq, hk = hf_rotate(rotary, apply, q, k, pos)
    deinterleave = torch.cat([torch.arange(0, 64, 2), torch.arange(1, 64, 2)])
    oq, ok = pe.rotate(q, k, pos, pos)
    torch.testing.assert_close(oq[..., deinterleave], hq, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ok[..., deinterleave], hk, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "name",
    [
        "linear",
        "llama3.1",
        "yarn40-mscale",
        "yarn32-gptoss",
        "dynamic",
        "phi4-partial-longrope",
        "cohere-interleaved",
    ],
)
def test_rope_to_hf_roundtrips(name: str) -> None:
    pe = posenc.rope_from_hf(CONFIGS[name])
    written = posenc.rope_to_hf(pe)
    again = posenc.rope_from_hf(written)
    assert (again.scaling, again.layout, again.partial, again.base) == (
        pe.scaling,
        pe.layout,
        pe.partial,
        pe.base,
    )
    hf = hf_rotary(_llama(**({"max_position_embeddings": 131072} | written)))[0]
    torch.testing.assert_close(hf.inv_freq, pe.inv_freq, rtol=1.3e-6, atol=0.0)


@pytest.mark.parametrize(("mscale", "mscale_all_dim"), [(1.0, 0), (0, 0), (0.707, 0.0), (0, 1.0)])
def test_yarn_zero_mscale_is_read_as_transformers_reads_it(
    mscale: float, mscale_all_dim: float
) -> None:
    """mscale / mscale_all_dim = 0 (DeepSeek's default mscale_all_dim) is a valid config: like
    a missing key it selects the temperature 0.1·ln(s) + 1, as in transformers."""
    cfg = CONFIGS["yarn40-deepseek"] | {
        "rope_scaling": CONFIGS["yarn40-deepseek"]["rope_scaling"]
        | {"mscale": mscale, "mscale_all_dim": mscale_all_dim}
    }
    rotary, _ = hf_rotary(cfg)
    pe = posenc.rope_from_hf(cfg)
    assert math.isclose(pe.attention_scaling, rotary.attention_scaling, rel_tol=1e-12)
    assert math.isclose(pe.attention_scaling, 0.1 * math.log(40.0) + 1.0, rel_tol=1e-12)
    torch.testing.assert_close(pe.inv_freq, rotary.inv_freq, rtol=1.3e-6, atol=0.0)
    assert posenc.rope_from_hf(posenc.rope_to_hf(pe)).scaling == pe.scaling


def test_static_ntk_is_written_as_a_larger_base() -> None:
    pe = posenc.build("rope", head_dim=64, scaling={"rope_type": "ntk", "factor": 4.0})
    written = posenc.rope_to_hf(pe)
    assert written["rope_parameters"]["rope_type"] == "default"
    torch.testing.assert_close(posenc.rope_from_hf(written).inv_freq64, pe.inv_freq64)


def test_layout_override_and_errors() -> None:
    assert posenc.rope_from_hf(CONFIGS["plain"], layout="interleaved").layout == "interleaved"
    mrope = posenc.rope_from_hf(CONFIGS["plain"] | {"rope_scaling": {"type": "mrope"}})
    assert mrope.name == "mrope"  # M-RoPE (tests/anchors/test_qwen_vl.py)
    # static NTK is posenc's own: a config cannot name it (transformers has no such type)
    with pytest.raises(ValueError, match="rope_type 'ntk' is not supported"):
        posenc.rope_from_hf(CONFIGS["plain"] | {"rope_scaling": {"type": "ntk", "factor": 2.0}})
    proportional = {"type": "proportional", "partial_rotary_factor": 0.5}
    assert posenc.rope_from_hf(CONFIGS["plain"] | {"rope_scaling": proportional}).name == "p_rope"
    with pytest.raises(ValueError, match="'head_dim', or 'hidden_size' and 'num_attention_heads'"):
        posenc.rope_from_hf({"rope_theta": 10000.0})
    with pytest.raises(ValueError, match="needs 'original_max_position_embeddings'"):
        posenc.rope_from_hf({"head_dim": 64, "rope_scaling": {"type": "dynamic", "factor": 2.0}})
    with pytest.raises(TypeError, match="config must be a dict"):
        posenc.rope_from_hf(42)
    with pytest.raises(TypeError, match="needs a RoPE encoding"):
        posenc.rope_to_hf(posenc.build("nope"))


def _phimoe() -> dict[str, Any]:
    scaling = {
        "type": "longrope",
        "short_factor": SHORT48[:16],
        "long_factor": LONG48[:16],
        "short_mscale": 1.243,
        "long_mscale": 1.5,
        "original_max_position_embeddings": 4096,
    }
    return {"model_type": "phimoe", "hidden_size": 64, "num_attention_heads": 2,
            "num_key_value_heads": 1, "intermediate_size": 32, "num_hidden_layers": 1,
            "num_local_experts": 2, "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096, "rope_scaling": scaling}  # fmt: skip


def test_phimoe_short_and_long_mscale() -> None:
    """Phi-3.5-MoE: long_mscale/short_mscale are the attention scaling, chosen by length.
    Short regime equals transformers' PhimoeRotaryEmbedding. In the long regime transformers
    5.23 updates its inv_freq buffer to the long factors (equal to ours) but its forward
    recomputes short-factor frequencies; posenc uses the long ones (as Phi-3 and transformers'
    OpenVINO exporter do), so the outputs differ there."""
    phimoe = pytest.importorskip("transformers.models.phimoe.modeling_phimoe")
    pe = posenc.rope_from_hf(_phimoe())
    assert pe.base == 1e6  # no rope_theta: transformers' PhimoeConfig.default_theta
    rotary = phimoe.PhimoeRotaryEmbedding(hf_config(_phimoe()))
    q, k = _qk(pe, T=3)
    short, long = torch.tensor([0, 5, 4095]), torch.tensor([0, 5, 9000])
    hq, hk = hf_rotate(rotary, phimoe.apply_rotary_pos_emb, q, k, short)
    torch.testing.assert_close(pe.rotate(q, k, short, short), (hq, hk), atol=1e-3, rtol=1e-4)
    inv_short, scale = pe.frequencies(4096)
    assert torch.equal(inv_short, pe.inv_freq64) and scale == pe.attention_scaling == 1.243
    hq, _ = hf_rotate(rotary, phimoe.apply_rotary_pos_emb, q, k, long)
    inv_long, scale = pe.frequencies(9001)
    torch.testing.assert_close(rotary.inv_freq, inv_long.float(), rtol=1.3e-6, atol=0.0)
    truth = torch.from_numpy(rotate64(q, long, inv_long, 1.5, "half"))
    assert scale == 1.5
    torch.testing.assert_close(pe.rotate(q, k, long, long)[0].double(), truth, atol=1e-5, rtol=0)
    assert (hq.double() - truth).abs().max() > 0.1  # transformers 5.23's short-factor forward


@pytest.mark.parametrize(
    "name", ["dynamic", "neox-partial-dynamic", "phi3-longrope", "phi4-partial-longrope"]
)
@pytest.mark.parametrize("seq_len", [100, 2048, 2049, 4096, 4097, 30_000])
def test_dynamic_frequencies_equal_rope_init_functions_below_and_above(
    name: str, seq_len: int
) -> None:
    """transformers' ROPE_INIT_FUNCTIONS at the current length (what its dynamic update calls)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = hf_config(CONFIGS[name])
    pe = posenc.rope_from_hf(CONFIGS[name])
    inv_freq, scale = ROPE_INIT_FUNCTIONS[cfg.rope_parameters["rope_type"]](cfg, seq_len=seq_len)
    ours, our_scale = pe.frequencies(seq_len)
    torch.testing.assert_close(ours.float(), inv_freq, rtol=1.3e-6, atol=0.0)
    assert math.isclose(our_scale, scale, rel_tol=1e-12)


def test_gptj_rotary_dim_is_kept_exactly() -> None:
    """rotary_dim / head_dim must give back rotary_dim under int(head_dim * partial)."""
    for head_dim, rotary_dim in ((1018, 512), (256, 64), (80, 24), (96, 32)):
        pe = posenc.rope_from_hf(
            {"model_type": "gptj", "head_dim": head_dim, "rotary_dim": rotary_dim}
        )
        assert pe.rotary_dim == rotary_dim


def test_per_layer_rope_parameters_by_layer_type() -> None:
    """Gemma 3: linear scaling on full-attention layers, plain RoPE on sliding ones."""
    gemma3 = pytest.importorskip("transformers.models.gemma3.modeling_gemma3")
    from transformers import Gemma3TextConfig

    cfg = Gemma3TextConfig(
        hidden_size=128, num_attention_heads=2, head_dim=64, intermediate_size=32,
        num_hidden_layers=6, rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
    )  # fmt: skip
    rotary = gemma3.Gemma3RotaryEmbedding(cfg)
    q, k = torch.randn(1, 2, 3, 64), torch.randn(1, 1, 3, 64)
    pos = torch.tensor([0, 9, 3000])
    for layer_type in ("full_attention", "sliding_attention"):
        pe = posenc.rope_from_hf(cfg, layer_type=layer_type)
        cos, sin = rotary(q, pos[None], layer_type)
        hq, hk = gemma3.apply_rotary_pos_emb(q, k, cos, sin)
        torch.testing.assert_close(pe.rotate(q, k, pos, pos), (hq, hk), atol=1e-3, rtol=1e-4)
    with pytest.raises(ValueError, match=r"layer_type must name one of .*\['full_attention'"):
        posenc.rope_from_hf(cfg)
