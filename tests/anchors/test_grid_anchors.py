"""Grid encodings against the implementations people use: rotary-embedding-torch's axial
frequencies, timm's RoPE-Mixed and ``resample_abs_pos_embed`` (1.0.31), transformers' 2-D
sin-cos table of ViTMAE (5.23)."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch

import posenc
import posenc.functional as PF
from tests.anchors._timm import timm_layer

pytestmark = pytest.mark.anchor


def test_rope_2d_equals_rotary_embedding_torch_axial_frequencies() -> None:
    """lucidrains' ``get_axial_freqs(H, W)`` with 'lang' frequencies: each axis its own RoPE
    series over its features, rows first, pairs interleaved; with ``offsets`` the grid moves.
    (Its 'pixel' frequencies read coordinates in [-1, 1], not integer positions: not compared.)
    Built with ``cache_if_possible=False``: rotary-embedding-torch 0.9.1 otherwise returns the
    unshifted frequencies for ``offsets`` once its cache holds the axis length."""
    ret = pytest.importorskip("rotary_embedding_torch")
    axis_dim, theta = 8, 100.0  # 4 pairs per axis, head_dim 16
    rotary = ret.RotaryEmbedding(dim=axis_dim, theta=theta, cache_if_possible=False)
    pe = posenc.build("rope_2d", head_dim=16, base=theta, layout="interleaved")
    x = torch.randn(1, 2, 5 * 6, 16, dtype=torch.float64)
    for offset in (0, 7):
        freqs = rotary.get_axial_freqs(5, 6, offsets=(offset, offset)).reshape(30, 16)
        theirs = ret.apply_rotary_emb(freqs.double(), x)
        ours, _ = pe.rotate(
            x,
            x,
            posenc.grid_positions(5, 6, offset=offset),
            posenc.grid_positions(5, 6, offset=offset),
        )
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)  # their float32 frequencies


def test_rope_mixed_equals_timm_rotary_embedding_mixed() -> None:
    sincos = timm_layer("pos_embed_sincos")
    D, H = 16, 3
    torch.manual_seed(0)
    freqs = sincos.init_random_2d_freqs(D, 1, H, temperature=10.0).double()[:, 0]  # (2, H, P): x, y
    zero = sincos.init_random_2d_freqs(D, 1, H, temperature=10.0, rotate=False)[:, 0]
    torch.testing.assert_close(
        PF.mixed_inv_freq(D, torch.zeros(H), base=10.0).flip(1).transpose(0, 1).float(), zero
    )
    pe = posenc.build("rope_mixed", head_dim=D, n_heads=H, layout="interleaved").double()
    with torch.no_grad():
        pe.freqs.copy_(freqs.flip(0).transpose(0, 1))  # ours (H, 2, P): (y, x)
    pos = posenc.grid_positions(4, 5)  # (row y, column x)
    emb = sincos.get_mixed_freqs(freqs, pos[:, 1].double(), pos[:, 0].double(), dtype=torch.float64)
    x = torch.randn(2, H, 20, D, dtype=torch.float64)
    theirs = sincos.apply_rot_embed_cat(x, emb)  # emb (H, N, 2D): angles in float32
    ours, _ = pe.rotate(x, x, pos, pos)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("old", "new"), [((8, 8), (12, 12)), ((8, 8), (16, 16)), ((14, 14), (7, 9)), ((6, 4), (3, 5))]
)
@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_resample_table_equals_timm(old: tuple[int, int], new: tuple[int, int], mode: str) -> None:
    pos_embed = timm_layer("pos_embed")
    assert importlib.metadata.version("timm") == "1.0.31"
    table = torch.randn(old[0] * old[1], 12)
    theirs = pos_embed.resample_abs_pos_embed(
        table[None], list(new), list(old), num_prefix_tokens=0, interpolation=mode, antialias=True
    )[0]
    torch.testing.assert_close(
        PF.resample_table(table, old, new, mode=mode), theirs, rtol=0, atol=0
    )
    ours64 = PF.resample_table(table.double(), old, new, mode=mode)  # float64 arithmetic
    torch.testing.assert_close(ours64.float(), theirs, rtol=1e-5, atol=1e-5)


def test_sincos_2d_equals_vitmae_with_rows_and_columns_swapped() -> None:
    """transformers 5.23's ``build_2d_sinusoidal_position_embedding`` lays out
    [sin h, cos h, sin w, cos w] (the row first); MAE's released code, which sincos_2d follows
    (tests/reference/grid.py), puts the column first (its meshgrid "w goes first"). They agree
    with the axes swapped."""
    vitmae = pytest.importorskip("transformers.models.vit_mae.modeling_vit_mae")
    theirs = vitmae.build_2d_sinusoidal_position_embedding(5, 7, embed_dim=16, dtype=torch.float64)
    pos = posenc.grid_positions(5, 7)
    ours = PF.sincos_2d_table(pos.flip(-1), 16)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
