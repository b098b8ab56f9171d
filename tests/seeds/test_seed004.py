"""Seed 004 ("Attention, transformers and scaling", week 2): permutation equivariance, the
shift map, learned tables, RoPE per pair and as complex numbers, ALiBi's slopes and bias, the
three-panel figure and the exercises. Numbers from Vaswani et al. 2017 (sec. 3.5), Su et al.
2021 (eq. 13-15) and Press et al. 2022 (slopes 2^(-8h/H))."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from tests.reference.absolute import sinusoidal as reference_table
from tests.reference.bias import alibi as reference_alibi
from tests.reference.rotary import rope
from tests.seeds._docs import Demo, demo, demos, invoke, run, sets


@pytest.mark.parametrize("row", demos("004"), ids=lambda r: r.id)
def test_seed004_demo(row: Demo, tmp_path: Path) -> None:
    run(row, tmp_path)


@demo("004-permutation")
def _permutation(row: Demo, tmp_path: Path) -> None:
    (result,) = json.loads(invoke(row, "--json").output)
    assert result["name"] == "permutation_equivariant" and result["passed"]


@demo("004-shift")
def _shift(row: Demo, tmp_path: Path) -> None:
    """Each 2 x 2 block is [[cos ωk, sin ωk], [-sin ωk, cos ωk]] at ω = 10000^(-2i/d)."""
    k, dim = 3, 8
    M = PF.shift_matrix(k, dim)
    for i in range(dim // 2):
        w = 10000.0 ** (-2 * i / dim)
        block = [[math.cos(w * k), math.sin(w * k)], [-math.sin(w * k), math.cos(w * k)]]
        np.testing.assert_allclose(M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2], block, atol=1e-15)
    table = reference_table(20, dim)
    np.testing.assert_allclose(table[:-k] @ M.T, table[k:], atol=1e-14)


@demo("004-learned")
def _learned(row: Demo, tmp_path: Path) -> None:
    pe = posenc.build("learned", dim=64, max_len=32)
    assert sum(p.numel() for p in pe.parameters()) == 32 * 64  # L_max x d_model
    x = torch.zeros(1, 33, 64)
    pe.embed(x[:, :32], torch.arange(32))
    with pytest.raises(ValueError, match="32"):  # no row past L_max: no extrapolation
        pe.embed(x, torch.arange(33))
    assert sum(p.numel() for p in posenc.build("sinusoidal", dim=64).parameters()) == 0


@demo("004-rope")
def _rope(row: Demo, tmp_path: Path) -> None:
    """(q_2i, q_2i+1) turned by m·θ_i; the score of R_m q and R_n k depends on m - n only."""
    pe = posenc.build("rope", head_dim=8, layout="interleaved").double()
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, 8, dtype=torch.float64, generator=gen)
    k = torch.randn(1, 1, 1, 8, dtype=torch.float64, generator=gen)

    def score(m: int, n: int) -> float:
        rq, rk = pe.rotate(q, k, torch.tensor([m]), torch.tensor([n]))
        return float((rq * rk).sum())

    rq, _ = pe.rotate(q, k, torch.tensor([5]), torch.tensor([5]))
    np.testing.assert_allclose(rq.numpy(), rope(q.numpy(), np.array([5]), layout="interleaved"))
    assert score(7, 3) == pytest.approx(score(104, 100), abs=1e-12)
    assert score(7, 3) == pytest.approx(score(4, 0), abs=1e-12)


@demo("004-slopes")
def _slopes(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    slopes = PF.alibi_slopes(8)
    np.testing.assert_allclose(slopes, [2.0 ** -(h + 1) for h in range(8)], rtol=1e-15)
    np.testing.assert_allclose(slopes[1:] / slopes[:-1], 0.5)  # a geometric series


@demo("004-alibi")
def _alibi(row: Demo, tmp_path: Path) -> None:
    """score_ij = q_i·k_j/√D - m_h·abs(i - j) in a bidirectional layer's weights."""
    torch.manual_seed(0)
    pe = posenc.build("alibi", n_heads=8, bidirectional=True).double()
    pos = torch.arange(6)
    np.testing.assert_allclose(
        pe.bias(pos, pos)[0].numpy(),
        reference_alibi(pos.numpy(), pos.numpy(), PF.alibi_slopes(8).tolist(), True)[0],
    )
    layer = posenc.Attention(64, 8, pe=pe, causal=False).double()
    x = torch.randn(1, 6, 64, dtype=torch.float64)
    with torch.no_grad():
        _, weights = layer(x, pos, return_weights=True)
        q, k, _ = layer._project(x)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + pe.bias(pos, pos)
    torch.testing.assert_close(weights, torch.softmax(scores, -1))


@demo("004-module")
def _module(row: Demo, tmp_path: Path) -> None:
    """The seed precomputes 5000 rows; posenc computes the rows asked for, at any position."""
    pe = posenc.build("sinusoidal", dim=128).double()
    x = torch.zeros(3, 50, 128, dtype=torch.float64)
    out = pe.embed(x, torch.arange(50))
    np.testing.assert_allclose(out[1].numpy(), reference_table(50, 128), atol=1e-13)
    far = pe.embed(x[:, :1], torch.tensor([4999]))[0, 0].numpy()
    theta = 10000.0 ** (-np.arange(0, 128, 2) / 128)
    np.testing.assert_allclose(far[0::2], np.sin(4999 * theta), atol=1e-11)


@demo("004-complex")
def _complex(row: Demo, tmp_path: Path) -> None:
    """(x_2i + i·x_2i+1)·e^(i·m·θ_i), θ_i = 10000^(-2i/d), for consecutive pairs."""
    pe = posenc.build("rope", head_dim=16, layout="interleaved").double()
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 10, 16, dtype=torch.float64, generator=gen)
    pos = torch.arange(10)
    got, _ = pe.rotate(q, q, pos, pos)
    theta = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    turn = torch.polar(torch.ones(10, 8, dtype=torch.float64), pos[:, None] * theta)
    want = torch.view_as_real(torch.view_as_complex(q.reshape(2, 4, 10, 8, 2)) * turn)
    torch.testing.assert_close(got, want.flatten(-2), rtol=0, atol=1e-13)


@demo("004-figure")
def _figure(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    assert (tmp_path / "compare-heatmap-similarity-waveforms.png").is_file()
    from posenc.analysis import subject
    from posenc.plots import compare

    fig = compare(
        [subject("sinusoidal", dim=128)],
        ["heatmap", "similarity", "waveforms"],
        n_positions=50,
        dims=(0, 1, 10, 20, 50),
    )
    heat, sim = (ax.images[0] for ax in fig.axes if ax.images)
    table = reference_table(50, 128)
    np.testing.assert_allclose(np.asarray(heat.get_array()), table, atol=1e-13)
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(sim.get_array()), unit @ unit.T, atol=1e-12)
    waves = next(ax for ax in fig.axes if ax.lines)
    assert [ln.get_label() for ln in waves.lines] == [f"dim {d}" for d in (0, 1, 10, 20, 50)]


@demo("004-by-hand")
def _by_hand(row: Demo, tmp_path: Path) -> None:
    """d = 4: PE(p) = (sin p, cos p, sin(p/100), cos(p/100)); PE(p)·PE(p + 1) = cos 1 + cos 0.01
    for every p (the same distance), PE(0)·PE(5) = cos 5 + cos 0.05."""
    pe = PF.sinusoidal_table(7, 4)
    for p in (0, 1, 5, 6):
        want = [math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)]
        np.testing.assert_allclose(pe[p], want, atol=1e-15)
    assert pe[0] @ pe[1] == pytest.approx(math.cos(1) + math.cos(0.01), abs=1e-15)
    assert pe[5] @ pe[6] == pytest.approx(pe[0] @ pe[1], abs=1e-15)
    assert pe[0] @ pe[5] == pytest.approx(math.cos(5) + math.cos(0.05), abs=1e-15)


@demo("004-ordering")
def _ordering(row: Demo, tmp_path: Path) -> None:
    """The command's sweep: the three encodings on the ascending-order task, evaluated past
    the training length (the extrapolation test); parsed and expanded here (training it is
    the lab's quick preset's work: minutes)."""
    from posenc.lab.config import apply_overrides, expand, parse_sweep
    from posenc.lab.presets import preset_data

    assert row.call.startswith("posenc lab --set")
    runs = expand(parse_sweep(apply_overrides(preset_data("quick"), sets(row))))
    assert {r.encoding for r in runs} == {"sinusoidal", "learned", "rope"}
    task = runs[0].task.build()
    assert {r.task.name for r in runs} == {"ascending"}
    assert max(task.eval_lens) > task.train_len[1]


@demo("004-bias")
def _bias(row: Demo, tmp_path: Path) -> None:
    pos = torch.arange(6)
    slopes = PF.alibi_slopes(8, xp=PF.torch_xp)
    bias = PF.alibi_bias(pos, pos, slopes)
    assert bias.shape == (8, 6, 6)
    np.testing.assert_allclose(
        bias.numpy(), reference_alibi(pos.numpy(), pos.numpy(), slopes.tolist(), False)[0]
    )
    np.testing.assert_allclose((slopes[1:] / slopes[:-1]).numpy(), 0.5)
