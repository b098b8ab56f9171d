"""The multi-axis rotary forms of transformers 5.23 that ``patch`` used to refuse, each against
transformers' own modules: NeoMME's two-axis M-RoPE ((2, B, T) ids, row and column pairs
alternating, one spectrum per layer type, no ``mrope_section``), SAM 3's ViT rotary (float
grid positions, float32 embeddings with a leading 1, repeat form) and Gemma 4's vision rotary
((B, N, 2) ids, each axis's half of the head as its own ``rotate_half`` block). Position ids
whose axes differ, so a wrong axis or section shows."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from torch import nn

from posenc.hf import is_patched, patch, unpatch
from posenc.hf.mrope_config import TwoAxisMRoPE
from posenc.hf.rotary import RotaryEmbedding, compact, expand
from tests.hf import _coverage

pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor


def _modeling(name: str) -> Any:
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _neomme_rotary() -> nn.Module:
    from transformers import AutoConfig

    return _modeling("neomme").NeoMMERotaryEmbedding(AutoConfig.for_model("neomme"))


def _two_axis_positions(B: int, T: int) -> torch.Tensor:
    """(2, B, T): rows count tokens, columns walk 0..4 (the axes differ)."""
    t = torch.arange(T)
    return torch.stack([t, t % 5])[:, None].expand(2, B, T)


def test_two_axis_mrope_angles_equal_the_formula_in_float64() -> None:
    """Interleaved: pair p turns by pos[p mod 2]·base^(-2p/D) (row0-col0-row1-col1);
    contiguous: the first s_0 pairs by the row, the rest by the column."""
    D, base = 12, 10000.0
    pos = _two_axis_positions(1, 7)[:, 0].T  # (T, 2)
    p = torch.arange(D // 2, dtype=torch.float64)
    theta = base ** (-2 * p / D)
    rows, cols = pos[:, :1].double(), pos[:, 1:].double()
    interleaved = torch.where(p.long() % 2 == 0, rows, cols) * theta
    contiguous = torch.cat([rows.expand(-1, 3), cols.expand(-1, 3)], dim=-1) * theta
    got_i = TwoAxisMRoPE(head_dim=D, base=base, interleaved=True).angles(pos)
    got_c = TwoAxisMRoPE(head_dim=D, base=base).angles(pos)
    torch.testing.assert_close(got_i, interleaved, atol=0, rtol=1e-15)
    torch.testing.assert_close(got_c, contiguous, atol=0, rtol=1e-15)


def test_two_axis_mrope_sections_are_checked() -> None:
    with pytest.raises(ValueError, match=r"2 sections \(row, column\)"):
        TwoAxisMRoPE(head_dim=12, mrope_section=(2, 2, 2))
    with pytest.raises(ValueError, match="sum to the 6 rotary pairs"):
        TwoAxisMRoPE(head_dim=12, mrope_section=(2, 2))


def test_neomme_rotary_equals_transformers_per_layer_type() -> None:
    """NeoMME's default config (sliding layers: full head at base 1e4; full-attention layers:
    a quarter of the head at base 1e6): patch builds one interleaved TwoAxisMRoPE per layer
    type, whose cos and sin at (2, B, T) ids (and (B, T) ids, the same on both axes) equal the
    module's; unpatch restores it."""
    holder = nn.Module()
    original = _neomme_rotary()
    holder.rotary_emb = original
    patch(holder, kernel=None)
    rotary = holder.rotary_emb
    assert isinstance(rotary, RotaryEmbedding)
    widths = {}
    for layer_type in ("sliding_attention", "full_attention"):
        rope = rotary.ropes[layer_type]
        assert type(rope) is TwoAxisMRoPE and rope.config.interleaved
        widths[layer_type] = rope.config.head_dim
        x = torch.zeros(2, 30, 1)
        for pos in (_two_axis_positions(2, 30), _two_axis_positions(2, 30)[0]):
            ours, theirs = rotary(x, pos, layer_type), original(x, pos, layer_type)
            for a, b in zip(ours, theirs, strict=True):
                torch.testing.assert_close(a, b, atol=2e-5, rtol=0)
    assert widths == {"sliding_attention": 64, "full_attention": 16}
    unpatch(holder)
    assert holder.rotary_emb is original


def test_neomme_scaling_is_refused_before_touching() -> None:
    holder = nn.Module()
    original = _neomme_rotary()
    holder.rotary_emb = original
    with pytest.raises(ValueError, match=r"two-axis M-RoPE .* no context-extension scaling"):
        patch(holder, scaling={"rope_type": "linear", "factor": 2.0})
    assert holder.rotary_emb is original and not is_patched(holder)


class _ThreeAxisRotaryEmbedding(nn.Module):
    """NeoMME's recomposition over three axes (pair p by axis p mod 3), no mrope_section."""

    def __init__(self) -> None:
        from transformers import LlamaConfig

        super().__init__()
        self.config = LlamaConfig(hidden_size=64, num_attention_heads=4)
        self.inv_freq = nn.Buffer(10000.0 ** (-torch.arange(0, 16, 2).float() / 16))

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> Any:
        freqs = position_ids.expand(3, -1, -1)[..., None].float() * self.inv_freq  # (3, B, T, P)
        axis = torch.arange(freqs.shape[-1]) % 3
        emb = freqs.gather(0, axis.expand(1, *freqs.shape[1:]))[0]
        emb = torch.cat([emb, emb], dim=-1)
        return emb.cos(), emb.sin()


def test_three_axis_ids_without_sections_are_still_refused() -> None:
    """A module that reads (3, B, T) ids but has no mrope_section: which sections it computes
    is unknown, so patch refuses, the module untouched."""
    holder = nn.Module()
    holder.rotary_emb = _ThreeAxisRotaryEmbedding()
    original = holder.rotary_emb
    with pytest.raises(ValueError, match=r"reads 3-axis position ids .* no mrope_section"):
        patch(holder, kernel=None)
    assert holder.rotary_emb is original and not is_patched(holder)


def _with_random_zero_weights(model: nn.Module) -> nn.Module:
    """``model`` with its zero-initialised matrices (NeoMME's o_proj and MLP down_proj) drawn
    at std 0.2, so the attention (and its positions) reaches the output."""
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 2 and not param.any():
                param.copy_(0.2 * torch.randn(param.shape, generator=g))
    return model


def test_patched_neomme_equals_unpatched_at_two_axis_positions() -> None:
    """The coverage page's NeoMME (two layers: one sliding, one full attention), its
    zero-initialised projections drawn at random: patched (posenc's kernel) outputs at
    (2, B, T) ids whose columns differ from the rows equal the unpatched ones; unpatch exact."""
    model = _with_random_zero_weights(_coverage._build("neomme"))
    ids = torch.randint(3, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    pos = _two_axis_positions(2, 12)

    def run(**kw: Any) -> torch.Tensor:
        return model(input_ids=ids, use_cache=False, **kw).last_hidden_state

    with torch.no_grad():
        before, one_d = run(position_ids=pos), run()
        patch(model)
        patched = run(position_ids=pos)
        unpatch(model)
        after = run(position_ids=pos)
    assert (before - one_d).abs().max() > 1e-2  # the columns move the outputs
    torch.testing.assert_close(patched, before, atol=1e-4 * before.abs().max().item(), rtol=0)
    assert torch.equal(after, before)


def _sam3_vit_config() -> Any:
    from transformers import Sam3ViTConfig

    return Sam3ViTConfig(
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=56,
        patch_size=14,
        window_size=2,
        global_attn_indexes=[1],
        pretrain_image_size=56,
        initializer_range=0.2,
    )


def test_sam3_rotary_equals_transformers_at_its_float_positions() -> None:
    """SAM 3's ViT rotary, in a windowed layer (integer (w, h) ids) and a global one (ids scaled
    by window / grid: 0.5 steps): patch builds rows-first RoPE2D in the repeat form with a
    leading 1, (N, 2) -> (1, N, D), equal to the module's; unpatch restores it."""
    layers = _modeling("sam3").Sam3ViTModel(_sam3_vit_config()).layers
    for layer in layers:
        original = layer.rotary_emb
        pos = layer.position_ids
        assert pos.is_floating_point()
        patch(layer, kernel=None)
        rotary = layer.rotary_emb
        assert rotary.form == "repeat" and rotary.lead and rotary.float32
        assert rotary.ropes["rope"].name == "rope_2d"
        x = torch.zeros(1, pos.shape[0], 1)
        for ours, theirs in zip(rotary(x, pos), original(x, pos), strict=True):
            assert ours.shape == theirs.shape == (1, pos.shape[0], 16)
            torch.testing.assert_close(ours, theirs, atol=2e-6, rtol=0)
        half = x.bfloat16()
        for ours, theirs in zip(rotary(half, pos), original(half, pos), strict=True):
            assert ours.dtype == theirs.dtype == torch.float32  # whatever x's dtype
        unpatch(layer)
        assert layer.rotary_emb is original
    assert layers[1].position_ids.frac().ne(0).any()  # the global layer's half-steps


def test_patched_sam3_vit_equals_unpatched() -> None:
    """A two-layer SAM 3 ViT (one windowed layer, one global) on a 4 x 4 patch image."""
    torch.manual_seed(0)
    model = _modeling("sam3").Sam3ViTModel(_sam3_vit_config()).eval()
    pixels = torch.randn(1, 3, 56, 56, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(pixels).last_hidden_state
        patch(model)
        patched = model(pixels).last_hidden_state
        unpatch(model)
        after = model(pixels).last_hidden_state
        for layer in model.layers:  # without rotation the output moves: positions matter
            layer.rotary_emb.inv_freq.zero_()
        unrotated = model(pixels).last_hidden_state
    assert (before - unrotated).abs().max() > 1e-2
    torch.testing.assert_close(patched, before, atol=1e-4 * before.abs().max().item(), rtol=0)
    assert torch.equal(after, before)


def _gemma4_vision_config() -> Any:
    from transformers import Gemma4VisionConfig

    return Gemma4VisionConfig(
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        patch_size=4,
        pooling_kernel_size=2,
        position_embedding_size=16,
        initializer_range=0.2,
    )


def _gemma4_positions(side: int, padding: int = 0) -> torch.Tensor:
    """(1, N, 2) (x, y) ids of a side x side grid, then ``padding`` patches at (-1, -1)."""
    y, x = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    pos = torch.stack([x.flatten(), y.flatten()], dim=-1)
    return torch.cat([pos, torch.full((padding, 2), -1)])[None]


def test_gemma4_vision_rotary_equals_transformers() -> None:
    """Gemma 4's vision rotary, (B, N, 2) ids with (-1, -1) padding: patch builds rows-first
    RoPE2D in the axis_cat form, cat(c_x, c_x, c_y, c_y), equal to the module's; compact
    inverts expand."""
    holder = nn.Module()
    original = _modeling("gemma4").Gemma4VisionRotaryEmbedding(_gemma4_vision_config())
    holder.rotary_emb = original
    patch(holder)
    rotary = holder.rotary_emb
    assert rotary.form == "axis_cat" and not rotary.lead and not rotary.float32
    pos = _gemma4_positions(5, padding=3).expand(2, -1, -1)
    x = torch.zeros(2, pos.shape[1], 1)
    ours, theirs = rotary(x, pos), original(x, pos)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape == (2, 28, 16)
        torch.testing.assert_close(a, b, atol=2e-6, rtol=0)
    cos, sin = rotary.ropes["rope"].cos_sin(pos)
    for a, b in zip(compact(expand(cos, sin, "axis_cat"), "axis_cat"), (cos, sin), strict=True):
        assert torch.equal(a, b)
    unpatch(holder)
    assert holder.rotary_emb is original


def test_patched_gemma4_vision_tower_equals_unpatched() -> None:
    """A two-layer Gemma 4 vision tower on a 4 x 4 patch grid (2 x 2 pooling)."""
    torch.manual_seed(0)
    tower = _modeling("gemma4").Gemma4VisionModel(_gemma4_vision_config()).eval()
    pos = _gemma4_positions(4)
    pixels = torch.rand(1, 16, 3 * 4 * 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = tower(pixels, pos).last_hidden_state
        patch(tower)
        patched = tower(pixels, pos).last_hidden_state
        unpatch(tower)
        after = tower(pixels, pos).last_hidden_state
        tower.encoder.rotary_emb.inv_freq.zero_()  # without rotation the output moves
        unrotated = tower(pixels, pos).last_hidden_state
    assert (before - unrotated).abs().max() > 1e-2
    torch.testing.assert_close(patched, before, atol=1e-4 * before.abs().max().item(), rtol=0)
    assert torch.equal(after, before)
