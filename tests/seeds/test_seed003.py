"""Seed 003 ("Understanding positional encodings, part 1"): permutation equivariance, the
sinusoidal table and its pictures, a layer's attention weights, embedding contamination, the
table's properties and the shift map M_k. Numbers from Vaswani et al. 2017, sec. 3.5."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from posenc.analysis import subject
from tests.reference.absolute import sinusoidal as reference_table
from tests.seeds._docs import Demo, demo, demos, invoke, run


@pytest.mark.parametrize("row", demos("003"), ids=lambda r: r.id)
def test_seed003_demo(row: Demo, tmp_path: Path) -> None:
    run(row, tmp_path)


def check_rows(row: Demo) -> dict[str, dict[str, object]]:
    """The ``--json`` results of ``row``'s ``posenc check`` command, by check name."""
    return {r["name"]: r for r in json.loads(invoke(row, "--json").output)}


@demo("003-permutation")
def _permutation(row: Demo, tmp_path: Path) -> None:
    (result,) = check_rows(row).values()
    assert result["passed"] and float(result["error"]) < 1e-10  # type: ignore[arg-type]
    torch.manual_seed(0)  # the seed's own experiment: 6 tokens, width 32, 4 heads
    layer = posenc.Attention(32, 4, pe=posenc.build("nope"), causal=False).double()
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    perm = torch.tensor([2, 0, 4, 1, 5, 3])
    with torch.no_grad():
        torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm], rtol=0, atol=1e-14)


@demo("003-table")
def _table(row: Demo, tmp_path: Path) -> None:
    table = PF.sinusoidal_table(100, 64)
    np.testing.assert_allclose(table, reference_table(100, 64), rtol=0, atol=1e-13)
    assert table.min() >= -1.0 and table.max() <= 1.0
    assert table.min() == pytest.approx(-1.0, abs=1e-3) and table.max() == 1.0


@demo("003-heatmap")
def _heatmap(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    assert (tmp_path / "heatmap-sinusoidal.png").is_file()


@demo("003-annotated")
def _annotated(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    from posenc.plots import encoding_heatmap

    fig = encoding_heatmap(subject("sinusoidal", dim=64), n_positions=11, n_dims=11, annotate=True)
    values = [float(t.get_text()) for t in fig.axes[0].texts]
    np.testing.assert_allclose(values, np.round(reference_table(11, 64)[:, :11], 2).ravel())
    (top,) = fig.axes[0].child_axes  # sin/cos above each column
    roles = [t.get_text() for t in top.get_xticklabels()]
    assert roles == ["sin", "cos"] * 5 + ["sin"]


@demo("003-waves")
def _waves(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    from posenc.plots import dimension_waveforms

    dims = (0, 1, 2, 3, 10, 11, 30, 31, 62, 63)
    fig = dimension_waveforms(subject("sinusoidal", dim=64), dims=dims, n_positions=100, split=True)
    sines, cosines = fig.axes[0].lines, fig.axes[1].lines
    assert [ln.get_label() for ln in sines] == [f"dim {d}" for d in dims if d % 2 == 0]
    assert [ln.get_label() for ln in cosines] == [f"dim {d}" for d in dims if d % 2 == 1]
    table = reference_table(100, 64)
    for ln in [*sines, *cosines]:
        np.testing.assert_allclose(ln.get_ydata(), table[:, int(ln.get_label().split()[1])])


@demo("003-wavelengths")
def _wavelengths(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    from posenc.plots import wavelengths

    (line,) = wavelengths([subject("sinusoidal", dim=64)], train_len=None).axes[0].lines
    lam = line.get_ydata()
    want = [2 * math.pi * 10000 ** (2 * i / 64) for i in range(32)]
    np.testing.assert_allclose(lam, want, rtol=1e-13)
    assert [round(float(lam[i]), 2) for i in (0, 5, 15)] == [6.28, 26.50, 471.17]
    assert f"{lam[31]:.2e}" == "4.71e+04"


@demo("003-module")
def _module(row: Demo, tmp_path: Path) -> None:
    pe = posenc.build("sinusoidal", dim=64).double()
    x = torch.randn(2, 10, 64, dtype=torch.float64)
    out = pe.embed(x, torch.arange(10))
    assert out.shape == (2, 10, 64)
    np.testing.assert_allclose(
        (out - x).numpy(), np.broadcast_to(reference_table(10, 64), (2, 10, 64)), atol=1e-14
    )


def _layer() -> tuple[posenc.Attention, torch.Tensor]:
    torch.manual_seed(0)
    pe = posenc.build("sinusoidal", dim=64).double()
    layer = posenc.Attention(64, 8, pe=pe, causal=False, embedded=True).double()
    x = pe.embed(torch.randn(2, 20, 64, dtype=torch.float64), torch.arange(20))
    return layer, x


@demo("003-layer")
def _layer_weights(row: Demo, tmp_path: Path) -> None:
    layer, x = _layer()
    with torch.no_grad():
        y, weights = layer(x, return_weights=True)
        fast = layer(x)
    assert y.shape == (2, 20, 64) and weights.shape == (2, 8, 20, 20)
    averaged = weights.mean(1)  # nn.MultiheadAttention's (B, T, T): the mean over heads
    assert averaged.shape == (2, 20, 20)
    torch.testing.assert_close(averaged.sum(-1), torch.ones(2, 20, dtype=torch.float64))
    torch.testing.assert_close(y, fast)


@demo("003-attention")
def _attention_figure(row: Demo, tmp_path: Path) -> None:
    from posenc.plots import attention_weights

    layer, x = _layer()
    with torch.no_grad():
        _, weights = layer(x, return_weights=True)
    (image,) = [ax.images[0] for ax in attention_weights(layer, x, average=True).axes if ax.images]
    np.testing.assert_allclose(np.asarray(image.get_array()), weights[0].mean(0).numpy())


@demo("003-contamination")
def _contamination(row: Demo, tmp_path: Path) -> None:
    """|PE[0]| = sqrt(64 · (sin² 0 + cos² 0)) = 8 at width 128; for e ~ N(0, 0.25 I), e + PE[0]
    turns e by about arctan(8 / (0.5·sqrt(128))) = 54.7° (the seed's one draw: 52.12°)."""
    invoke(row, "--out", str(tmp_path))
    from posenc.plots import contamination_stats

    pe = subject("sinusoidal", dim=128)
    stats = contamination_stats(pe, 1, seed=0, token_scale=0.5)
    assert stats["position"][0] == pytest.approx(8.0, abs=1e-12)
    angles = [contamination_stats(pe, 1, seed=s, token_scale=0.5)["angle"][0] for s in range(64)]
    assert np.mean(angles) == pytest.approx(math.degrees(math.atan(8 / (0.5 * 128**0.5))), abs=1.0)


@demo("003-properties")
def _properties(row: Demo, tmp_path: Path) -> None:
    """The checks pass; the dot products the seed plots are Σ_i cos(d·θ_i) (PE[0]·PE[d])."""
    results = check_rows(row)
    assert set(results) == {"table_bounded", "table_unique_rows", "table_dot_decays"}
    assert all(r["passed"] for r in results.values()), results
    table = PF.sinusoidal_table(51, 64)
    inv = PF.rope_inv_freq(64)
    for d in (1, 2, 5, 10, 20, 50):
        assert table[0] @ table[d] == pytest.approx(float(np.cos(d * inv).sum()), abs=1e-12)
    assert len(np.unique(PF.sinusoidal_table(1000, 64), axis=0)) == 1000
    assert np.abs(PF.sinusoidal_table(10000, 512)).max() <= 1.0


@demo("003-shift")
def _shift(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    table = reference_table(100, 64)
    M = PF.shift_matrix(5, 64)
    assert np.linalg.norm(M @ table[5] - table[10]) < 1e-14  # the seed: 5.14e-16
    blocks = np.kron(np.eye(32), np.ones((2, 2))) == 1
    assert np.all(M[~blocks] == 0)
