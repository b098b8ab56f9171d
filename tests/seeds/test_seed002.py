"""Seed 002 (theory notebook): ten checked numeric demos, each shown two or three times under
other titles. Numbers from the formulas: Vaswani et al. 2017 (sec. 3.5), Su et al. 2021
(eq. 13-15, RoPE's neighbouring pairs), Press et al. 2022 (ALiBi), Chen et al. 2023
(position interpolation: position p read as p·L/L')."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from posenc.plots import bias_matrix
from tests.reference.absolute import sinusoidal as reference_table
from tests.reference.rotary import rope_vector
from tests.seeds._docs import Demo, demo, demos, run


@pytest.mark.parametrize("row", demos("002"), ids=lambda r: r.id)
def test_seed002_demo(row: Demo, tmp_path: Path) -> None:
    run(row, tmp_path)


@demo("002-01")
def _table(row: Demo, tmp_path: Path) -> None:
    pe = PF.sinusoidal_table(6, 8)
    assert pe.shape == (6, 8)
    np.testing.assert_array_equal(pe[0], [0.0, 1.0] * 4)
    np.testing.assert_allclose(pe, reference_table(6, 8), rtol=0, atol=1e-15)


@demo("002-02")
def _token_plus_position(row: Demo, tmp_path: Path) -> None:
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]], dtype=torch.float64)
    h = posenc.build("sinusoidal", dim=4).double().embed(x, torch.arange(1))
    assert h.shape == x.shape
    assert h[0, 0].tolist() == [1.0, 3.0, 3.0, 5.0]  # PE[0] = (sin 0, cos 0, sin 0, cos 0)


@demo("002-03")
def _offsets(row: Demo, tmp_path: Path) -> None:
    pos = torch.arange(4)
    R = PF.relative_offsets(pos, pos)
    assert R.tolist() == [[i - j for j in range(4)] for i in range(4)]
    assert R[3, 0] == 3 and R[0, 3] == -3


@demo("002-04")
def _distance_bias(row: Demo, tmp_path: Path) -> None:
    pe = posenc.build("alibi", n_heads=1, slopes=[0.1], bidirectional=True).double()
    bias = bias_matrix(pe, 5)[0]
    np.testing.assert_allclose(bias, [[-0.1 * abs(i - j) for j in range(5)] for i in range(5)])
    assert bias[0, 4] == pytest.approx(-0.4)


def _interleaved_rotation(x: np.ndarray, position: int, base: float = 10000.0) -> np.ndarray:
    """The tutorial's rotation, from Su et al.: (x[k], x[k + 1]) turned by position/base^(k/d),
    k = 0, 2, ... (``tests.reference.rotary.rope_vector`` with neighbouring pairs)."""
    return rope_vector(np.asarray(x, dtype=np.float64), position, base=base, layout="interleaved")


def _rotate(x: list[float], position: int, layout: str = "interleaved") -> np.ndarray:
    pe = posenc.build("rope", head_dim=len(x), layout=layout).double()
    v = torch.tensor(x, dtype=torch.float64).view(1, 1, 1, -1)
    pos = torch.tensor([position])
    q, _ = pe.rotate(v, v, pos, pos)
    return q.view(-1).numpy()


@demo("002-05")
def _rope_norm(row: Demo, tmp_path: Path) -> None:
    x = [1.0, 0.0, 0.5, -0.5]
    y = _rotate(x, 11)
    np.testing.assert_allclose(y, _interleaved_rotation(np.array(x), 11), rtol=0, atol=1e-15)
    assert np.linalg.norm(y) == pytest.approx(np.linalg.norm(x), abs=1e-15)
    half = _rotate(x, 11, layout="half")  # posenc's default pairs (0, 2), (1, 3): other numbers
    assert np.abs(half - y).max() > 0.1
    assert np.linalg.norm(half) == pytest.approx(np.linalg.norm(x), abs=1e-15)


@demo("002-06")
def _rope_relative(row: Demo, tmp_path: Path) -> None:
    """<R_7 q, R_4 k> = <q, R_(4-7) k> for q = (1, 0), k = (0.5, 0.5), through PF.apply_rope."""
    q, k = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0.5, 0.5]).double()
    inv = PF.rope_inv_freq(2, xp=PF.torch_xp)

    def rot(v: torch.Tensor, p: int) -> torch.Tensor:
        cos, sin = PF.rope_cos_sin(torch.tensor([p]), inv)  # (1, 1)
        return PF.apply_rope(v.view(1, 2), cos, sin, layout="interleaved").view(2)

    left = float(rot(q, 7) @ rot(k, 4))
    right = float(q @ rot(k, 4 - 7))
    assert left == pytest.approx(right, abs=1e-15)
    assert left == pytest.approx(0.5 * math.cos(3.0) + 0.5 * math.sin(3.0), abs=1e-15)


@demo("002-07")
def _alibi(row: Demo, tmp_path: Path) -> None:
    pe = posenc.build("alibi", n_heads=1, slopes=[0.25]).double()
    bias = bias_matrix(pe, 5, masked=0.0)[0]
    want = [[-0.25 * max(i - j, 0) for j in range(5)] for i in range(5)]
    np.testing.assert_allclose(bias, want)
    assert bias[4, 0] == -1.0
    formula = bias_matrix(pe, 5)[0]  # posenc's causal form: -m·(i - j) on masked keys too
    assert formula[0, 4] == pytest.approx(1.0) and np.array_equal(np.tril(formula), np.tril(bias))


@demo("002-08")
def _learned_params(row: Demo, tmp_path: Path) -> None:
    pe = posenc.build("learned", dim=4096, max_len=4096)
    assert sum(p.numel() for p in pe.parameters()) == 4096 * 4096 == 16_777_216


@demo("002-09")
def _decode_positions(row: Demo, tmp_path: Path) -> None:
    ids = posenc.decode_positions(12, 5)
    assert ids.tolist() == [12, 13, 14, 15, 16]
    assert ids[0] == 12 and bool((ids.diff() == 1).all())


@demo("002-10")
def _interpolation(row: Demo, tmp_path: Path) -> None:
    """Linear interpolation (factor 8192/2048 = 4): position p rotates as p/4 did; 8191 as
    2047.75, inside the trained range."""
    scale = {"rope_type": "linear", "factor": 4.0}
    scaled = posenc.build("rope", head_dim=8, scaling=scale).double()
    positions = torch.tensor([0, 2048, 4096, 8191])
    assert (positions / 4.0).tolist() == [0.0, 512.0, 1024.0, 2047.75]
    x = torch.randn(1, 1, 4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got, _ = scaled.rotate(x, x, positions, positions)
    for t, p in enumerate(positions.tolist()):
        want = rope_vector(x[0, 0, t].numpy(), p / 4.0, layout="half")  # type: ignore[arg-type]
        np.testing.assert_allclose(got[0, 0, t].numpy(), want, rtol=0, atol=1e-12)
