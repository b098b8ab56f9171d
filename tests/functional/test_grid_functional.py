"""Grid formulas (axial/M-RoPE/mixed angles, MAE's 2-D table, table resampling) against the
float64 references of tests/reference/grid.py, on torch and NumPy arrays (JAX: tests/flax)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc.functional as PF
from tests.reference import grid as ref

GRID = np.stack(np.meshgrid(np.arange(5), np.arange(7), indexing="ij"), -1).reshape(-1, 2)


def test_pair_axes_contiguous_and_interleaved() -> None:
    assert PF.pair_axes((2, 3)) == (0, 0, 1, 1, 1)
    assert PF.pair_axes((1, 2, 1)) == (0, 1, 1, 2)
    # Qwen3-VL (24, 20, 20) of 64 pairs: h at 1, 4, .., 58; w at 2, 5, .., 59; t elsewhere
    axes = PF.pair_axes((24, 20, 20), interleaved=True)
    assert [axes.count(a) for a in range(3)] == [24, 20, 20]
    assert axes[:7] == (0, 1, 2, 0, 1, 2, 0) and axes[58:] == (1, 2, 0, 0, 0, 0)


def test_axial_angles_equal_the_reference() -> None:
    sections = (3, 5)
    inv_freq = PF.axial_inv_freq(sections, base=100.0, xp=PF.torch_xp)
    pos = torch.from_numpy(GRID)
    got = PF.axis_angles(pos, inv_freq, torch.tensor(PF.pair_axes(sections)))
    np.testing.assert_allclose(got.numpy(), ref.axial_angles(GRID, sections, 100.0), rtol=1e-15)
    assert got.dtype == torch.float64


@pytest.mark.parametrize("interleaved", [False, True])
def test_mrope_angles_equal_the_reference(interleaved: bool) -> None:
    section = (24, 20, 20) if interleaved else (16, 24, 24)
    pos = np.random.default_rng(0).integers(0, 5000, (11, 3))
    inv_freq = PF.rope_inv_freq(128, base=1e6)
    got = PF.axis_angles(pos, inv_freq, np.asarray(PF.pair_axes(section, interleaved=interleaved)))
    want = ref.mrope_angles(pos, section, 1e6, interleaved=interleaved)
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_mixed_frequencies_and_angles_equal_heo_et_al() -> None:
    phases = np.array([0.3, 2.0, 4.5])
    F = PF.mixed_inv_freq(16, torch.from_numpy(phases), base=10.0)  # (H, 2, P): (y, x)
    want = ref.heo_mixed_freqs(phases, 16, theta=10.0)  # (2, H, P): (x, y)
    np.testing.assert_allclose(F[:, 1].numpy(), want[0], rtol=1e-14)
    np.testing.assert_allclose(F[:, 0].numpy(), want[1], rtol=1e-14, atol=1e-17)
    ang = PF.mixed_angles(torch.from_numpy(GRID), F)  # (H, T, P)
    t_y, t_x = GRID[:, 0], GRID[:, 1]
    manual = t_x[None, :, None] * want[0][:, None] + t_y[None, :, None] * want[1][:, None]
    np.testing.assert_allclose(ang.numpy(), manual, rtol=1e-13, atol=1e-14)


def test_sincos_2d_equals_mae() -> None:
    pos = np.stack(np.meshgrid(np.arange(6), np.arange(6), indexing="ij"), -1).reshape(-1, 2)
    got = PF.sincos_2d_table(torch.from_numpy(pos), 16)
    np.testing.assert_allclose(got.numpy(), ref.mae_sincos_2d(16, 6), atol=1e-15)


def test_grid_formulas_run_on_numpy() -> None:
    pos = GRID[:9]
    want = PF.sincos_2d_table(torch.from_numpy(pos), 8).numpy()
    np.testing.assert_allclose(PF.sincos_2d_table(pos, 8), want, rtol=1e-15)


def test_resample_table_keeps_constants_and_identity() -> None:
    table = torch.full((4 * 6, 3), 0.25, dtype=torch.float64)
    for mode, aa in (("bicubic", True), ("bilinear", True), ("nearest", False)):
        out = PF.resample_table(table, (4, 6), (9, 3), mode=mode, antialias=aa)
        assert out.shape == (27, 3) and out.dtype == torch.float64
        torch.testing.assert_close(out, torch.full_like(out, 0.25))
    rand = torch.randn(2, 4 * 6, 5)  # leading dims are kept
    torch.testing.assert_close(PF.resample_table(rand, (4, 6), (4, 6)), rand)
    as_numpy = PF.resample_table(rand[0].numpy(), (4, 6), (8, 8))
    assert isinstance(as_numpy, np.ndarray)
    np.testing.assert_allclose(as_numpy, PF.resample_table(rand[0].double(), (4, 6), (8, 8)))


def test_resample_table_upsamples_a_ramp_exactly_inside() -> None:
    """Bilinear interpolation of a table linear in the column reproduces the line at the new
    cells' centres (align_corners=False): value(x') = (x' + 0.5)·w/w' - 0.5, inside the grid."""
    w, nw = 4, 8
    table = torch.arange(w, dtype=torch.float64).repeat(2, 1).reshape(2 * w, 1)  # value = x
    out = PF.resample_table(table, (2, w), (2, nw), mode="bilinear").reshape(2, nw)
    x = (torch.arange(nw, dtype=torch.float64) + 0.5) * w / nw - 0.5
    inside = (x >= 0) & (x <= w - 1)
    torch.testing.assert_close(out[0][inside], x[inside])


def test_grid_formulas_reject_bad_inputs() -> None:
    with pytest.raises(ValueError, match="sections must sum to the 4 rotary pairs"):
        PF.check_sections((1, 2), 4)
    with pytest.raises(ValueError, match="at least 2 axes"):
        PF.pair_axes((4,))
    with pytest.raises(ValueError, match="do not fit"):
        PF.pair_axes((1, 1, 3), interleaved=True)
    with pytest.raises(ValueError, match="divisible by 4"):
        PF.sincos_2d_table(torch.zeros(3, 2, dtype=torch.long), 6)
    with pytest.raises(ValueError, match="divisible by 4"):
        PF.mixed_inv_freq(6, torch.zeros(2))
    table = torch.zeros(12, 4)
    with pytest.raises(ValueError, match=r"\(\.\.\., 16, C\) for old_grid \(4, 4\)"):
        PF.resample_table(table, (4, 4), (2, 2))
    with pytest.raises(ValueError, match="mode must be one of"):
        PF.resample_table(table, (3, 4), (2, 2), mode="cubic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pass antialias=False"):
        PF.resample_table(table, (3, 4), (2, 2), mode="nearest")
    with pytest.raises(ValueError, match=r"new_grid must be \(rows, columns\)"):
        PF.resample_table(table, (3, 4), (2,))
    with pytest.raises(TypeError, match="real floating"):
        PF.resample_table(table.long(), (3, 4), (2, 2))
