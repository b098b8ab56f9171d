"""Seed 001 ("Positional encodings in transformer LLMs"): sinusoidal and learned tables, Shaw's
relative keys, layers, a translator, a generator, attention pictures and a benchmark. Numbers
from the papers: Vaswani et al. 2017 (sec. 3.5) for tables, Shaw et al. 2018 (eq. 3-5) for
relative keys, softmax(q kᵀ / √d) for the weights; not the seed's 2·i/d exponent."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from tests.reference.absolute import sinusoidal as reference_table
from tests.seeds._docs import Demo, demo, demos, invoke, run


@pytest.mark.parametrize("row", demos("001"), ids=lambda r: r.id)
def test_seed001_demo(row: Demo, tmp_path: Path) -> None:
    run(row, tmp_path)


@demo("001-table")
def _table(row: Demo, tmp_path: Path) -> None:
    table = PF.sinusoidal_table(10, 512)
    assert table.shape == (10, 512)
    np.testing.assert_array_equal(table[0, :10], [0.0, 1.0] * 5)  # sin 0, cos 0 per pair
    np.testing.assert_allclose(table, reference_table(10, 512), rtol=0, atol=1e-14)


@demo("001-absolute")
def _absolute(row: Demo, tmp_path: Path) -> None:
    pe = posenc.build("learned", dim=128, max_len=100)
    x = torch.randn(4, 16, 128)
    out = pe.embed(x, torch.arange(16))
    assert out.shape == (4, 16, 128)
    table = next(pe.parameters()).detach()  # (100, 128)
    torch.testing.assert_close(out, x + table[:16])


@demo("001-relative")
def _relative(row: Demo, tmp_path: Path) -> None:
    """Shaw's key term q_i·a^K_ij / √D, a^K_ij = w[clip(j - i, -K, K) + K], by loops."""
    torch.manual_seed(0)
    pe = posenc.build("shaw", head_dim=64, max_distance=32, init_std=1.0).double()
    q = torch.randn(2, 8, 20, 64, dtype=torch.float64)
    pos = torch.arange(20)
    scores = pe.relative_logits(torch.zeros(2, 8, 20, 20, dtype=torch.float64), q, q, pos, pos)
    assert scores.shape == (2, 8, 20, 20)
    w = pe.key_table.detach()
    assert 0.9 < float(w.std()) < 1.1  # init_std=1.0: the seed's torch.randn table
    want = torch.empty(2, 8, 20, 20, dtype=torch.float64)
    for i in range(20):
        for j in range(20):
            row_ = w[max(-32, min(32, j - i)) + 32]
            want[..., i, j] = q[..., i, :] @ row_ / math.sqrt(64)
    torch.testing.assert_close(scores, want)


@demo("001-waves")
def _waves(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    from posenc.analysis import subject
    from posenc.plots import dimension_waveforms

    fig = dimension_waveforms(subject("sinusoidal", dim=64), dims=(0, 1, 2, 3), n_positions=100)
    table = reference_table(100, 64)
    lines = fig.axes[0].lines
    assert len(lines) == 4
    for d, line in enumerate(lines):
        np.testing.assert_allclose(line.get_ydata(), table[:, d], atol=1e-13)


def _layer_with_table() -> tuple[posenc.Attention, posenc.PositionalEncoding]:
    torch.manual_seed(0)
    pe = posenc.build("learned", dim=256, max_len=512)
    return posenc.Attention(256, 8, pe=pe, causal=False, embedded=True), pe


@demo("001-layer")
def _layer(row: Demo, tmp_path: Path) -> None:
    layer, pe = _layer_with_table()
    x, pos = torch.randn(8, 32, 256), torch.arange(32)
    with torch.no_grad():
        out = layer(pe.embed(x, pos), pos)
    assert out.shape == (8, 32, 256)
    with pytest.raises(ValueError, match=r"call pe\.embed"):  # not silently NoPE
        posenc.Attention(256, 8, pe=pe, causal=False)


@demo("001-learned")
def _learned(row: Demo, tmp_path: Path) -> None:
    torch.manual_seed(0)
    pe = posenc.build("learned", dim=256, max_len=50)
    table = next(pe.parameters())
    before = table.detach().clone()
    opt = torch.optim.Adam(pe.parameters(), lr=1e-2)
    x, target = torch.randn(16, 40, 256), torch.randn(16, 40, 256)
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.mse_loss(pe.embed(x, torch.arange(40)), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]
    assert (table.detach()[:40] - before[:40]).abs().min() > 0  # every used row moved
    torch.testing.assert_close(table.detach()[40:], before[40:])  # rows past T did not


@demo("001-heatmap")
def _heatmap(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    assert (tmp_path / "heatmap-sinusoidal.png").is_file()


@demo("001-compare")
def _compare(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["compare-heatmap.png"]
    from posenc.analysis import subject
    from posenc.plots import compare

    pes = [subject(n, dim=128) for n in ("sinusoidal", "learned")]
    fig = compare(pes, n_positions=20, n_dims=20)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    np.testing.assert_allclose(np.asarray(images[0].get_array()), reference_table(20, 128)[:, :20])
    assert images[0].get_clim() == images[1].get_clim()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    ticks = [t for ax in fig.axes if ax.images for t in ax.get_yticks()]
    assert ticks and all(float(t).is_integer() for t in ticks)


@demo("001-translator")
def _translator(row: Demo, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = posenc.EncoderDecoder(src_vocab_size=50, tgt_vocab_size=60, pe="sinusoidal").eval()
    src, tgt = torch.randint(0, 50, (8, 32)), torch.randint(0, 60, (8, 32))
    with torch.no_grad():
        logits = model(src, tgt)
        states = model.encode(torch.full((1, 32), 7))  # (1, S, C): one token at every position
    assert logits.shape == (8, 32, 60)
    assert states.std(dim=1).mean() > 0.1  # the table tells the positions apart (NoPE: 0)


@demo("001-heads")
def _heads(row: Demo, tmp_path: Path) -> None:
    """Each panel is softmax(q kᵀ / √d) of one head, q and k from the layer's weights."""
    from posenc.plots import attention_weights

    torch.manual_seed(0)
    layer = posenc.Attention(512, 8, pe=posenc.build("nope"), causal=False).double()
    x = torch.randn(1, 20, 512, dtype=torch.float64)
    fig = attention_weights(layer, x, labels=[f"Token_{i}" for i in range(20)])
    images = [ax.images[0] for ax in fig.axes if ax.images]
    q, k, _ = (t.view(1, 20, 8, 64).transpose(1, 2) for t in layer.qkv(x).detach().split(512, -1))
    want = torch.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1)  # √64 = 8
    assert len(images) == 4
    for h, image in enumerate(images):
        np.testing.assert_allclose(np.asarray(image.get_array()), want[0, h].numpy(), atol=1e-12)


@demo("001-generate")
def _generate(row: Demo, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = posenc.TinyTransformer(vocab_size=100, pe="learned").eval()
    prompt = torch.tensor([[1, 45, 67]])
    out = model.generate(prompt, 50)
    assert out.shape == (1, 50)
    seq = prompt
    for _ in range(5):  # greedy without the cache: the same first tokens
        with torch.no_grad():
            nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    assert seq[0, 3:].tolist() == out[0, :5].tolist()


@demo("001-bench")
def _bench(row: Demo, tmp_path: Path) -> None:
    """``--quick`` covers the seed's sinusoidal, learned and relative encodings (one of each
    family) with peak memory; one small case is run here (the command takes a minute:
    tests/bench/test_bench.py runs it)."""
    from posenc.bench import attention as bench

    assert row.call == "posenc bench attention --quick"
    families = {posenc.info(n).family: n for n in bench.QUICK.values()}
    assert {"additive", "rotary", "bias", "relative"} <= set(families)
    assert {"sinusoidal", "learned", "shaw"} <= set(bench.QUICK.values())
    case = bench.run_case("shaw", (1, 32, 32, 4), False, 1)
    assert case["peak_MiB"]["posenc"] >= 4 * 32 * 32 * 4 / 2**20  # the (B, H, T, T) scores
    assert case["x_nope"]["nope"] == 1.0


@demo("001-window")
def _window(row: Demo, tmp_path: Path) -> None:
    """Relative keys clipped at 15 (window 16), the layer's weights (4, 8, 32, 32), and mean
    attention by distance: NoPE's causal weights on one repeated token are uniform, so the mean
    weight d keys back is mean_(i >= d) 1/(i + 1)."""
    from posenc.plots import attention_by_distance

    torch.manual_seed(0)
    pe = posenc.build("shaw", head_dim=32, max_distance=15, init_std=1.0)
    layer = posenc.Attention(256, 8, pe=pe, causal=False)
    with torch.no_grad():
        _, weights = layer(torch.randn(4, 32, 256), return_weights=True)
    assert weights.shape == (4, 8, 32, 32)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 8, 32))
    T = 16
    want = [np.mean([1 / (i + 1) for i in range(d, T)]) for d in range(T)]
    np.testing.assert_allclose(attention_by_distance("nope", n_positions=T), want, atol=1e-12)
    shaw = attention_by_distance(posenc.build("shaw", head_dim=8, init_std=1.0), n_positions=T)
    assert np.abs(shaw - want).max() > 1e-3  # init_std=1.0: a position effect untrained
