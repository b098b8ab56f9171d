"""The rotary forms of transformers 5.23 that ``patch`` used to refuse, each against transformers:
MLA configs whose ``partial_rotary_factor`` is qk_rope_head_dim / head_dim (Mistral 4,
DeepSeek-V4, dots3), JetMoE's ``kv_channels``, MiniMax-M3-VL's unread ``rotary_dim``,
DeepSeek-V4's rotation of the trailing head features of one tensor, NanoChat's rotation by
-pos·θ; GLM-4.5's odd rotated width (refused with a scaling); Moonshine's heads from its
attribute_map. (NeoMME's M-RoPE without sections: test_patch_axis_forms.py.)"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

from posenc.hf.odd_width import OddWidthRoPE
from posenc.hf.rope_config import rope_from_hf
from posenc.hf.rotary import detect_form
from posenc.hf.rotate import verified
from tests.hf import _coverage

pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor


def _modeling(name: str) -> Any:
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _text_config(model_type: str) -> Any:
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    return getattr(config, "text_config", None) or config


@pytest.mark.parametrize(
    ("model_type", "module", "rotary", "layer_type"),
    [
        ("mistral4", "mistral4", "Mistral4RotaryEmbedding", None),
        ("deepseek_v4", "deepseek_v4", "DeepseekV4RotaryEmbedding", "main"),
        ("deepseek_v4", "deepseek_v4", "DeepseekV4RotaryEmbedding", "compress"),
        ("dots3_note_text", "dots3_note", "Dots3NoteTextRotaryEmbedding", "indexed_attention"),
        ("jetmoe", "jetmoe", "JetMoeRotaryEmbedding", None),
        ("minimax_m3_vl", "minimax_m3_vl", "MiniMaxM3VLRotaryEmbedding", None),
    ],
)
def test_rope_from_hf_gives_the_modules_embeddings(
    model_type: str, module: str, rotary: str, layer_type: str | None
) -> None:
    """The default config's rotary module and posenc's RoPE of the same config give the same
    cos and sin at 8 positions (``detect_form`` raises otherwise)."""
    config = _text_config(model_type)
    original = getattr(_modeling(module), rotary)(config)
    rope = rope_from_hf(config, layer_type=layer_type)
    if layer_type is None:
        detect_form(original, {None: rope})
    else:
        detect_form(original, {layer_type: rope})


def test_mla_partial_factor_is_the_rope_share_of_the_head() -> None:
    """qk_rope_head_dim 64 of head_dim 128 at partial_rotary_factor 0.5: 64 features rotated,
    at theta^(-2j/64) (not 32)."""
    rope = rope_from_hf(
        {
            "model_type": "mistral4",
            "head_dim": 128,
            "qk_rope_head_dim": 64,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e4},
            "partial_rotary_factor": 0.5,
        }
    )
    assert rope.rotary_dim == 64


_GLM45 = {
    "model_type": "glm4_moe",
    "hidden_size": 4096,
    "num_attention_heads": 96,
    "partial_rotary_factor": 0.5,
}


def test_odd_rotated_width_is_transformers_series_in_float64() -> None:
    """GLM-4.5's default config: partial 0.5 of head_dim 42 gives the odd width 21;
    transformers rotates 22 features at θ_j = theta^(-2j/21), j < 11 (OddWidthRoPE), and so
    does rope_from_hf, to float64 precision, equal to the module's cos and sin."""
    from transformers import Glm4MoeConfig

    rope = rope_from_hf(_GLM45)
    assert isinstance(rope, OddWidthRoPE) and rope.rotary_dim == 22
    j = torch.arange(11, dtype=torch.float64)
    want = 10000.0 ** (-2 * j / 21)
    torch.testing.assert_close(rope.inv_freq64, want, atol=0, rtol=1e-15)
    cos, sin = rope.cos_sin(torch.arange(9)[None], torch.float64)  # (1, 9, 11)
    angles = torch.arange(9, dtype=torch.float64)[:, None] * want
    torch.testing.assert_close(cos[0], angles.cos(), atol=1e-15, rtol=0)
    torch.testing.assert_close(sin[0], angles.sin(), atol=1e-15, rtol=0)
    config = Glm4MoeConfig()
    detect_form(_modeling("glm4_moe").Glm4MoeRotaryEmbedding(config), {None: rope_from_hf(config)})


def test_odd_rotated_width_with_scaling_is_refused_naming_the_form() -> None:
    with pytest.raises(ValueError, match=r"odd rotated width 21: transformers rotates 22"):
        rope_from_hf(_GLM45, scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match=r"odd width 21 takes no context-extension"):
        OddWidthRoPE(
            head_dim=42, partial=22 / 42, width=21, scaling={"rope_type": "linear", "factor": 2.0}
        )


def test_patched_odd_width_model_equals_unpatched() -> None:
    """A two-layer GLM-4.5 (MoE) with head_dim 14 and partial 0.5 (width 7, 8 rotated):
    patched (posenc's kernel) outputs equal the unpatched ones, unpatch exact."""
    from transformers import Glm4MoeConfig, Glm4MoeModel

    from posenc.hf import patch, unpatch

    config = Glm4MoeConfig(
        hidden_size=56,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=14,
        intermediate_size=64,
        moe_intermediate_size=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        num_hidden_layers=2,
        vocab_size=97,
        initializer_range=0.2,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
        },
    )
    torch.manual_seed(0)
    model = Glm4MoeModel(config).eval()
    ids = torch.randint(3, 97, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(input_ids=ids).last_hidden_state
        patch(model)
        assert isinstance(model.rotary_emb.ropes["rope"], OddWidthRoPE)
        patched = model(input_ids=ids).last_hidden_state
        unpatch(model)
        after = model(input_ids=ids).last_hidden_state
    torch.testing.assert_close(patched, before, atol=1e-4 * before.abs().max().item(), rtol=0)
    assert torch.equal(after, before)


def _embeddings(P: int, T: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.randn(1, T, P, generator=torch.Generator().manual_seed(0))
    return angles.cos(), angles.sin()


def test_deepseek_v4_rotation_of_the_trailing_features() -> None:
    """DeepSeek-V4 rotates the last 2P features of each head, one tensor at a time, pairs
    interleaved, with compact (B, T, P) cos and sin; it also un-rotates its attention output
    with -sin."""
    original = _modeling("deepseek_v4").apply_rotary_pos_emb
    cos, sin = _embeddings(4)
    ours = verified("apply_rotary_pos_emb", original, (cos, sin), "compact", "interleaved", "eager")
    x = torch.randn(1, 3, 5, 16, generator=torch.Generator().manual_seed(1))  # 8 kept, 8 rotated
    for s in (sin, -sin):
        torch.testing.assert_close(ours(x, cos, s), original(x, cos, s), rtol=0, atol=1e-6)


def test_nanochat_rotation_by_minus_the_angle() -> None:
    """NanoChat's ``rotate_half`` returns (x2, -x1): each pair turned by -pos·θ."""
    original = _modeling("nanochat").apply_rotary_pos_emb
    cos, sin = (torch.cat([t, t], dim=-1) for t in _embeddings(4))
    ours = verified("apply_rotary_pos_emb", original, (cos, sin), "cat", "half", "eager")
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 5, 8, generator=g), torch.randn(1, 1, 5, 8, generator=g)
    for a, b in zip(ours(q.clone(), k.clone(), cos, sin), original(q, k, cos, sin), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_muse_glimmer_assistant_rotates_a_shorter_q_at_the_last_positions() -> None:
    """Muse Glimmer's draft model rotates its k (context + block) at every position of cos
    and sin, its shorter q (the block) at the last ones: the q_last variant, equal to it there
    and on q and k of one length; Llama's rotation, which refuses a shorter q, keeps ours."""
    original = _modeling("muse_glimmer_assistant").apply_rotary_pos_emb
    cos, sin = (torch.cat([t, t], dim=-1) for t in _embeddings(4, T=7))
    ours = verified("apply_rotary_pos_emb", original, (cos, sin), "cat", "half", "eager")
    g = torch.Generator().manual_seed(1)
    k = torch.randn(1, 1, 7, 8, generator=g)
    for T in (3, 7):
        q = torch.randn(1, 2, T, 8, generator=g)
        got = ours(q.clone(), k.clone(), cos, sin)
        for a, b in zip(got, original(q, k, cos, sin), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    llama = verified(
        "apply_rotary_pos_emb",
        _modeling("llama").apply_rotary_pos_emb,
        (cos, sin),
        "cat",
        "half",
        "eager",
    )
    with pytest.raises(ValueError, match="do not broadcast"):
        llama(torch.randn(1, 2, 3, 8), k.clone(), cos, sin)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model_type",
    [
        "mistral4",
        "deepseek_v4",
        "jetmoe",
        "minimax_m3_vl_text",
        "dots3_note_text",
        "nanochat",
        "glm4_moe",
        "moonshine",
    ],
)
def test_coverage_models_match(model_type: str) -> None:
    """The coverage page's model (default config shrunk, weights at range 0.2): patched logits
    within 1e-4·max(1, max |logit|) of the unpatched ones, unpatch exact."""
    got = _coverage.status(model_type)
    assert got.status == "match", got


def test_moonshine_heads_come_from_its_attribute_map() -> None:
    """Moonshine's config stores decoder_num_attention_heads and answers num_attention_heads
    through its attribute_map (what its rotary reads): rope_from_hf sizes RoPE the same way,
    head_dim 288 / 8 = 36, 32 of them rotated (partial 0.9), equal to the module's cos and
    sin."""
    from transformers import MoonshineConfig

    config = MoonshineConfig()
    assert "num_attention_heads" not in config.to_dict()
    rope = rope_from_hf(config)
    assert (rope.config.head_dim, rope.rotary_dim) == (36, 32)
    detect_form(_modeling("moonshine").MoonshineRotaryEmbedding(config), {None: rope})


def test_patched_moonshine_equals_unpatched() -> None:
    """A two-layer Moonshine (encoder and decoder rotaries) on an audio signal and 12 decoder
    ids: patched outputs equal the unpatched ones, unpatch exact."""
    from transformers import MoonshineConfig

    from posenc.hf import patch, unpatch

    config = MoonshineConfig(
        encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2,
        intermediate_size=64,
        vocab_size=97,
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    model = _modeling("moonshine").MoonshineModel(config).eval()
    g = torch.Generator().manual_seed(1)
    audio, ids = torch.randn(1, 3840, generator=g), torch.randint(3, 97, (1, 12), generator=g)
    with torch.no_grad():
        before = model(input_values=audio, decoder_input_ids=ids).last_hidden_state
        patch(model)
        patched = model(input_values=audio, decoder_input_ids=ids).last_hidden_state
        unpatch(model)
        after = model(input_values=audio, decoder_input_ids=ids).last_hidden_state
        for module in model.modules():  # without rotation the output moves: positions matter
            if type(module).__name__ == "MoonshineRotaryEmbedding":
                module.inv_freq.zero_()
        unrotated = model(input_values=audio, decoder_input_ids=ids).last_hidden_state
    assert (before - unrotated).abs().max() > 1e-2
    torch.testing.assert_close(patched, before, atol=1e-4 * before.abs().max().item(), rtol=0)
    assert torch.equal(after, before)


def test_mrope_sections_per_layer_type() -> None:
    """Cohere Compass's text rotary holds M-RoPE sections, rope_parameters and inv_freq per
    layer type (``{type}_inv_freq``), sections interleaved: patch gives each type its MRoPE,
    equal to the module's cos and sin at 3-D positions whose axes differ, and refuses a
    context-extension scaling of it."""
    from torch import nn

    from posenc.hf import patch, unpatch
    from posenc.hf.rotary import RotaryEmbedding

    config = _text_config("cohere_compass_text")
    config.rope_parameters = {"full_attention": {"rope_type": "default", "rope_theta": 5e4}}
    holder = nn.Module()
    holder.rotary_emb = _modeling("cohere_compass").CohereCompassRotaryEmbedding(config)
    original = holder.rotary_emb
    t = torch.arange(12)
    pos = torch.stack([t, (2 * t) % 5, (3 * t + 1) % 7])[:, None]  # (3, 1, T)
    x = torch.zeros(1, 12, 1)
    theirs = original(x, pos, "full_attention")
    patch(holder, kernel=None)
    assert isinstance(holder.rotary_emb, RotaryEmbedding)
    for a, b in zip(holder.rotary_emb(x, pos, "full_attention"), theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    unpatch(holder)
    assert holder.rotary_emb is original
    with pytest.raises(ValueError, match="no context-extension scaling"):
        patch(holder, scaling={"rope_type": "linear", "factor": 2.0}, kernel=None)
    assert holder.rotary_emb is original
