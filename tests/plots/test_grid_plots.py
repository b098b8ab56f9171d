"""Grid pictures draw the right numbers: one patch's similarity to the grid (closed forms from
tests/reference/grid.py) and the axis and wavelength of each rotary pair."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.collections import PathCollection

import posenc
from posenc.plots import PLOTS, grid_similarity, pair_sections, patch_similarity
from tests.reference import grid as ref


def test_rope_2d_patch_similarity_is_the_mean_cosine_of_angle_differences() -> None:
    pe = posenc.build("rope_2d", head_dim=16)
    got = patch_similarity(pe, grid=(5, 7), patch=(1, 2))
    cells = np.stack(np.meshgrid(np.arange(5), np.arange(7), indexing="ij"), -1).reshape(-1, 2)
    ang = ref.axial_angles(cells, (4, 4), 100.0)  # (N, P)
    want = np.cos(ang - ang[1 * 7 + 2]).mean(-1).reshape(5, 7)
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_sincos_2d_patch_similarity_is_the_cosine_of_mae_rows() -> None:
    got = patch_similarity(posenc.build("sincos_2d", dim=16), grid=(6, 6))
    table = ref.mae_sincos_2d(16, 6)
    unit = table / np.linalg.norm(table, axis=-1, keepdims=True)
    np.testing.assert_allclose(got, (unit @ unit[3 * 6 + 3]).reshape(6, 6), atol=1e-12)


def test_grid_similarity_draws_a_panel_per_encoding() -> None:
    fig = grid_similarity(["rope_2d", "rope_mixed", "sincos_2d"], grid=(5, 5))
    images = [im for ax in fig.axes for im in ax.images]
    assert len(images) == 3
    np.testing.assert_allclose(images[0].get_array(), patch_similarity("rope_2d", grid=(5, 5)))
    assert all(ax.get_xlabel() == "column x" for ax in fig.axes if ax.images)


def test_sections_show_each_pairs_axis_and_wavelength() -> None:
    pe = posenc.build("mrope", head_dim=128, interleaved=True)
    fig = pair_sections(pe)
    scatters = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]
    counts = {c.get_label().split(" (")[0]: len(c.get_offsets()) for c in scatters}
    assert counts == {"t": 24, "h": 20, "w": 20}
    wave = np.concatenate([c.get_offsets() for c in scatters])
    order = np.argsort(wave[:, 0])
    np.testing.assert_allclose(
        wave[order, 1], 2 * math.pi * 10000.0 ** (np.arange(64) / 64), rtol=1e-12
    )


def test_grid_plots_refuse_sequences() -> None:
    with pytest.raises(ValueError, match="reads no grid positions"):
        patch_similarity("rope")
    with pytest.raises(ValueError, match="does not apply"):
        PLOTS["sections"](["rope"])
    with pytest.raises(ValueError, match="patch must lie on the 3x3 grid"):
        patch_similarity("rope_2d", grid=(3, 3), patch=(3, 0))
