"""``patch`` on the rotary embeddings of more than one position axis, against transformers
5.23's own modules: M-RoPE text models (3-D position ids; contiguous sections in Qwen2-VL and
GLM-4V, interleaved in Qwen3-VL and Cosmos3-Edge, h/w alternating in ERNIE 4.5 VL; cat or
repeat form) and the axial 2-D RoPE of
vision towers (``rope_type: "axial"``, (N, 2) grid positions). Position ids whose axes differ,
so a wrong section or axis shows."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from posenc.hf import is_patched, patch, unpatch
from posenc.hf.axial_config import ColumnsFirstRoPE2D, PixtralRoPE2D
from posenc.hf.mrope_config import ErnieMRoPE
from posenc.hf.rotary import RotaryEmbedding
from tests.hf._tiny import SMALL

pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor


def _modeling(name: str) -> Any:
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _mrope_positions(B: int, T: int) -> torch.Tensor:
    """(3, B, T): t counts tokens, h and w walk a small grid (they differ from t and each other)."""
    t = torch.arange(T)
    return torch.stack([t, t // 2 % 3, t % 4])[:, None].expand(3, B, T)


#: GLM-4V's default config rotates all 64 pairs but its built-in sections give 32 (its own
#: rotary fails on it); its checkpoints rotate half the head (partial_rotary_factor 0.5).
GLM4V_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}


@pytest.mark.parametrize(
    ("module", "cls", "config", "kwargs"),
    [
        ("qwen2_vl", "Qwen2VLRotaryEmbedding", "Qwen2VLTextConfig", {}),
        ("qwen3_vl", "Qwen3VLTextRotaryEmbedding", "Qwen3VLTextConfig", {}),
        ("glm4v", "Glm4vTextRotaryEmbedding", "Glm4vTextConfig", {"rope_parameters": GLM4V_ROPE}),
        ("qwen3_5", "Qwen3_5TextRotaryEmbedding", "Qwen3_5TextConfig", {}),
    ],
)
def test_mrope_rotaries_with_built_in_sections_equal_transformers(
    module: str, cls: str, config: str, kwargs: dict[str, Any]
) -> None:
    """Default configs (sections from the module's built-in default where the config has
    none): the replaced module's cos and sin at 3-D positions equal the original's."""
    cfg = getattr(importlib.import_module("transformers"), config)(**kwargs)
    holder = nn.Module()
    original = getattr(_modeling(module), cls)(cfg)
    holder.rotary_emb = original
    patch(holder)
    assert isinstance(holder.rotary_emb, RotaryEmbedding)
    x, pos = torch.zeros(2, 40, 1), _mrope_positions(2, 40)
    for ours, theirs in zip(holder.rotary_emb(x, pos), original(x, pos), strict=True):
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=0)
    unpatch(holder)
    assert holder.rotary_emb is original


@pytest.mark.parametrize(
    ("model_type", "sections"),
    [
        ("qwen2_vl_text", [2, 3, 3]),  # contiguous, cat form
        ("qwen3_vl_text", [4, 2, 2]),  # interleaved
        ("glm4v_text", [2, 3, 3]),  # contiguous, repeat form (interleaved pairs)
        ("cosmos3_edge_text", [4, 2, 2]),
        ("glm_ocr_text", [2, 3, 3]),
    ],
)
def test_patched_mrope_models_equal_unpatched_at_3d_positions(
    model_type: str, sections: list[int]
) -> None:
    from transformers import CONFIG_MAPPING, AutoModel

    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": sections}
    torch.manual_seed(0)
    model = AutoModel.from_config(CONFIG_MAPPING[model_type](**SMALL, rope_parameters=rope))
    model.eval()
    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    pos = _mrope_positions(2, 12)
    with torch.no_grad():
        before = model(input_ids=ids, position_ids=pos).last_hidden_state
        one_d = model(input_ids=ids).last_hidden_state
        patch(model)
        patched = model(input_ids=ids, position_ids=pos).last_hidden_state
        unpatch(model)
        after = model(input_ids=ids, position_ids=pos).last_hidden_state
    assert (before - one_d).abs().max() > 0.1  # the 3-D positions move the outputs
    torch.testing.assert_close(patched, before, atol=1e-4, rtol=0)
    assert torch.equal(after, before)


def _ernie_rotary(**rope: Any) -> nn.Module:
    """ERNIE 4.5 VL's text rotary, head_dim 2·Σ sections (128 for its built-in ones)."""
    from transformers import Ernie4_5_VLMoeTextConfig

    params = {"rope_type": "default", "rope_theta": 500000.0, **rope}
    cfg = Ernie4_5_VLMoeTextConfig(rope_parameters=params)
    cfg.head_dim = 2 * sum(rope.get("mrope_section", (22, 22, 20)))
    return _modeling("ernie4_5_vl_moe").Ernie4_5_VLMoeTextRotaryEmbedding(cfg)


@pytest.mark.parametrize("sections", [None, [6, 6, 4]])
def test_ernie_mrope_rotary_equals_transformers(sections: list[int] | None) -> None:
    """ERNIE 4.5 VL interleaves (h, w) pairs and puts t last (its built-in (22, 22, 20) and
    given sections): patch builds ErnieMRoPE, whose cos and sin at 3-D positions whose axes
    differ equal the module's; unpatch restores it."""
    rope = {} if sections is None else {"mrope_section": sections}
    holder = nn.Module()
    original = _ernie_rotary(**rope)
    holder.rotary_emb = original
    patch(holder)
    mrope = holder.rotary_emb.ropes["rope"]
    assert isinstance(mrope, ErnieMRoPE)
    h, w, t = sections or (22, 22, 20)
    assert tuple(mrope.config.mrope_section) == (t, h, w)
    x, pos = torch.zeros(2, 40, 1), _mrope_positions(2, 40)
    for ours, theirs in zip(holder.rotary_emb(x, pos), original(x, pos), strict=True):
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=0)
    unpatch(holder)
    assert holder.rotary_emb is original


def test_ernie_mrope_angles_equal_its_formula_in_float64() -> None:
    """angle_p = pos[a(p)]·base^(-2p/D), a(p) = h, w alternating for p < 2 s_h, then t
    (written from the formula, not from ``ernie_pair_axes``)."""
    D, base, (t, h, w) = 32, 500000.0, (4, 6, 6)
    mrope = ErnieMRoPE(head_dim=D, base=base, mrope_section=(t, h, w))
    pos = _mrope_positions(1, 9)[:, 0].T  # (T, 3) (t, h, w)
    want = torch.empty(9, D // 2, dtype=torch.float64)
    for p in range(D // 2):
        axis = (1 if p % 2 == 0 else 2) if p < h + w else 0
        want[:, p] = pos[:, axis].double() * base ** (-2 * p / D)
    torch.testing.assert_close(mrope.angles(pos), want, atol=0, rtol=1e-15)


def test_rope_from_hf_reads_ernie_mrope_as_transformers() -> None:
    """``rope_from_hf`` of an ERNIE 4.5 VL text config: ErnieMRoPE with its sections reordered
    to (t, h, w), interleaved pairs (ERNIE's ``rotate_half_text``), the module's cos."""
    from transformers import Ernie4_5_VLMoeTextConfig

    from posenc.hf.rope_config import rope_from_hf

    cfg = Ernie4_5_VLMoeTextConfig()
    rope = rope_from_hf(cfg)
    assert isinstance(rope, ErnieMRoPE) and rope.layout == "interleaved"
    pos = _mrope_positions(1, 20)
    cos, _ = _ernie_rotary()(torch.zeros(1, 20, 1), pos)
    ours, _ = rope.cos_sin(pos.movedim(0, -1))
    torch.testing.assert_close(ours.repeat_interleave(2, -1), cos, atol=2e-5, rtol=0)


def test_ernie_mrope_sections_must_alternate() -> None:
    with pytest.raises(ValueError, match="alternates h and w: their sections must be equal"):
        ErnieMRoPE(head_dim=32, mrope_section=(4, 7, 5))


class _SwappedRotaryEmbedding(nn.Module):
    """A rotary module that hands the sections to (w, h, t): none of posenc's arrangements."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(rope_parameters={"rope_theta": 10000.0})
        self.mrope_section = [2, 3, 3]
        self.register_buffer("inv_freq", 10000.0 ** (-torch.arange(0, 16, 2) / 16))

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> Any:
        pos = position_ids.expand(3, -1, -1)[[2, 1, 0]]  # (3, B, T): w, h, t
        freqs = pos[..., None].double() * self.inv_freq  # (3, B, T, P)
        chosen = torch.cat([m[i] for i, m in enumerate(freqs.split(self.mrope_section, -1))], -1)
        emb = torch.cat([chosen, chosen], dim=-1).float()
        return emb.cos(), emb.sin()


def test_other_mrope_recompositions_are_refused_before_touching() -> None:
    """Sections handed to the axes in another order: refused, naming the arrangements tried,
    the module kept."""
    holder = nn.Module()
    rotary = _SwappedRotaryEmbedding()
    holder.rotary_emb = rotary
    with pytest.raises(ValueError, match=r"recombines M-RoPE's axes \(mrope_section \[2, 3, 3"):
        patch(holder)
    assert holder.rotary_emb is rotary and not is_patched(holder)


def test_scaling_is_refused_for_mrope_before_touching() -> None:
    from transformers import Qwen2VLTextConfig

    holder = nn.Module()
    rotary = _modeling("qwen2_vl").Qwen2VLRotaryEmbedding(Qwen2VLTextConfig())
    holder.rotary_emb = rotary
    with pytest.raises(ValueError, match="no context-extension scaling"):
        patch(holder, scaling={"rope_type": "linear", "factor": 2.0})
    assert holder.rotary_emb is rotary and not is_patched(holder)


def test_axial_vision_rope_equals_transformers_in_the_vision_tower() -> None:
    """Qwen3-VL's vision tower (``rope_type: "axial"``): the patched tower's output equals the
    unpatched one on a 4 x 6 patch grid, and its rotary is posenc's RoPE2D."""
    from transformers import Qwen3VLVisionConfig

    cfg = Qwen3VLVisionConfig(
        depth=2,
        hidden_size=64,
        num_heads=4,
        intermediate_size=64,
        out_hidden_size=64,
        patch_size=2,
        temporal_patch_size=2,
        spatial_merge_size=2,
        num_position_embeddings=16,
        deepstack_visual_indexes=[1],
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    tower = _modeling("qwen3_vl").Qwen3VLVisionModel._from_config(cfg).eval()
    grid = torch.tensor([[1, 4, 6]])  # (t, h, w) patches
    pixels = torch.randn(24, 3 * 2 * 2 * 2, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = tower(pixels, grid_thw=grid).last_hidden_state
        patch(tower)
        rope = tower.rotary_pos_emb.ropes["rope"]
        patched = tower(pixels, grid_thw=grid).last_hidden_state
        unpatch(tower)
        after = tower(pixels, grid_thw=grid).last_hidden_state
    assert rope.name == "rope_2d" and tuple(rope.config.sections) == (4, 4)
    torch.testing.assert_close(patched, before, atol=1e-4, rtol=0)
    assert torch.equal(after, before)


def test_axial_rotary_at_grid_positions_equals_transformers() -> None:
    """The replaced module's cos and sin at (N, 2) (row, column) positions, default config."""
    from transformers import Qwen3VLVisionConfig

    holder = nn.Module()
    original = _modeling("qwen3_vl").Qwen3VLVisionRotaryEmbedding(Qwen3VLVisionConfig())
    holder.rotary_emb = original
    patch(holder)
    rows, cols = torch.meshgrid(torch.arange(5), torch.arange(7), indexing="ij")
    pos = torch.stack([rows.flatten(), cols.flatten()], dim=-1)  # (N, 2)
    x = torch.zeros(1, pos.shape[0], 1)
    for ours, theirs in zip(holder.rotary_emb(x, pos), original(x, pos), strict=True):
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=0)
    with pytest.raises(ValueError, match=r"axial RoPE position ids must be \(N, 2\)"):
        holder.rotary_emb(x, pos.T)


def _grid(rows: int, cols: int) -> torch.Tensor:
    """(N, 2) (row, column) positions of a rows x cols grid, row-major."""
    r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    return torch.stack([r.flatten(), c.flatten()], dim=-1)


@pytest.mark.parametrize(
    ("module", "cls", "config", "want"),
    [
        ("step3p7", "Step3p7VisionRotaryEmbedding", "Step3p7VisionConfig", ColumnsFirstRoPE2D),
        ("pixtral", "PixtralVisionRotaryEmbedding", "PixtralVisionConfig", PixtralRoPE2D),
    ],
)
def test_other_axial_arrangements_equal_transformers(
    module: str, cls: str, config: str, want: type
) -> None:
    """Step3p7's tower (the column's block first) and Pixtral's (even frequencies for rows,
    odd for columns): patch builds the matching arrangement, equal to the module at grid
    positions whose rows and columns differ; unpatch restores it."""
    cfg = getattr(importlib.import_module("transformers"), config)()
    holder = nn.Module()
    original = getattr(_modeling(module), cls)(cfg)
    holder.rotary_emb = original
    patch(holder)
    assert type(holder.rotary_emb.ropes["rope"]) is want
    pos = _grid(5, 7)
    x = torch.zeros(1, pos.shape[0], 1)
    for ours, theirs in zip(holder.rotary_emb(x, pos), original(x, pos), strict=True):
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=0)
    unpatch(holder)
    assert holder.rotary_emb is original


def test_axial_arrangements_equal_their_formulas_in_float64() -> None:
    """Columns first: pair j < Q by x·base^(-4j/D), Q + j by y·base^(-4j/D); Pixtral: pair
    j < Q by y·base^(-4j/D), Q + j by x·base^(-(4j+2)/D) (written from the formulas)."""
    D, base, Q = 16, 10000.0, 4
    pos = _grid(3, 5)
    y, x = pos[:, :1].double(), pos[:, 1:].double()
    j = torch.arange(Q, dtype=torch.float64)
    columns_first = torch.cat([x * base ** (-4 * j / D), y * base ** (-4 * j / D)], dim=-1)
    pixtral = torch.cat([y * base ** (-4 * j / D), x * base ** (-(4 * j + 2) / D)], dim=-1)
    got_columns = ColumnsFirstRoPE2D(head_dim=D, base=base).angles(pos)
    got_pixtral = PixtralRoPE2D(head_dim=D, base=base).angles(pos)
    torch.testing.assert_close(got_columns, columns_first, atol=0, rtol=1e-15)
    torch.testing.assert_close(got_pixtral, pixtral, atol=0, rtol=1e-15)


def test_pixtral_tower_patched_equals_unpatched() -> None:
    """Pixtral's vision tower (its ``apply_rotary_pos_emb`` unsqueezes (N, D) embeddings at
    0): patched outputs equal the unpatched ones on a 3 x 4 patch grid."""
    from transformers import PixtralVisionConfig

    cfg = PixtralVisionConfig(
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    tower = _modeling("pixtral").PixtralVisionModel(cfg).eval()
    pixels = torch.randn(1, 3, 24, 32, generator=torch.Generator().manual_seed(1))
    sizes = torch.tensor([[24, 32]])
    with torch.no_grad():
        before = tower(pixels, image_sizes=sizes).last_hidden_state
        patch(tower)
        assert isinstance(tower.patch_positional_embedding.ropes["rope"], PixtralRoPE2D)
        patched = tower(pixels, image_sizes=sizes).last_hidden_state
        unpatch(tower)
        after = tower(pixels, image_sizes=sizes).last_hidden_state
    torch.testing.assert_close(patched, before, atol=1e-4, rtol=0)
    assert torch.equal(after, before)
