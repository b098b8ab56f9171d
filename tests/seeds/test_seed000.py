"""Seed 000 ("How positional embeddings work, part 2"; JAX, Flax nnx): a width-9 sinusoidal
table of base 100, its checks and plots, and one Flax attention block over it. Numbers from
Vaswani et al. 2017, sec. 3.5: PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(...)
(``tests.reference.absolute.sinusoidal``, explicit loops), not the notebook's c/d exponent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from posenc import functional as PF
from tests.reference.absolute import sinusoidal as reference_table
from tests.seeds._docs import Demo, demo, demos, invoke, run

N, WIDTH, BASE = 15, 9, 100.0


@pytest.mark.parametrize("row", demos("000"), ids=lambda r: r.id)
def test_seed000_demo(row: Demo, tmp_path: Path) -> None:
    run(row, tmp_path)


@demo("000-table")
def _table(row: Demo, tmp_path: Path) -> None:
    table = PF.sinusoidal_table(N, WIDTH, base=BASE)
    assert table.shape == (15, 9) and table.dtype == np.float64
    np.testing.assert_allclose(table, reference_table(N, WIDTH, BASE), rtol=0, atol=1e-14)
    # the last column is the sine of pair 4 (θ = 100^(-8/9)); no cosine partner
    np.testing.assert_allclose(table[:, 8], np.sin(np.arange(N) * BASE ** (-8 / 9)), atol=1e-15)


@demo("000-heatmap")
def _heatmap(row: Demo, tmp_path: Path) -> None:
    invoke(row, "--out", str(tmp_path))
    assert (tmp_path / "heatmap-sinusoidal.png").read_bytes()[:4] == b"\x89PNG"
    from posenc.analysis import subject
    from posenc.plots import encoding_heatmap

    fig = encoding_heatmap(subject("sinusoidal", dim=WIDTH, base=BASE), n_positions=N)
    shown = np.asarray(fig.axes[0].images[0].get_array())
    np.testing.assert_allclose(shown, reference_table(N, WIDTH, BASE), atol=1e-14)


@demo("000-check")
def _check(row: Demo, tmp_path: Path) -> None:
    rows = {r["name"]: r for r in json.loads(invoke(row, "--json").output)}
    assert {"table_bounded", "table_unique_rows", "table_shift_is_rotation"} <= set(rows)
    assert all(r["passed"] for r in rows.values()), rows
    assert "column 8 is a sine alone" in rows["table_shift_is_rotation"]["detail"]


@demo("000-embed")
def _embed(row: Demo, tmp_path: Path) -> None:
    jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
    import posenc.flax as pfx

    semantic = np.asarray(
        jax.random.uniform(jax.random.PRNGKey(42), (N, WIDTH), minval=-0.1, maxval=0.1)
    )
    pos = np.arange(N)
    x = pfx.Sinusoidal(dim=WIDTH, base=BASE).embed(semantic[None], pos)  # (1, N, 9)
    np.testing.assert_allclose(
        np.asarray(x)[0], semantic + reference_table(N, WIDTH, BASE), rtol=0, atol=1e-6
    )


@demo("000-attention")
def _attention(row: Demo, tmp_path: Path) -> None:
    """softmax(q kᵀ / √d) v (the notebook's ``q @ k`` lacks the transpose) over the first three
    rows of the table, one head of width 9, written out from the layer's own weights."""
    pytest.importorskip("jax", reason="the [jax] extra is not installed")
    from flax import nnx

    import posenc.flax as pfx

    attn = pfx.Attention(WIDTH, 1, pe=pfx.NoPE(), causal=False, bias=True, rngs=nnx.Rngs(42))
    x = reference_table(3, WIDTH, BASE)[None].astype(np.float32)  # (1, 3, 9)
    y, weights = attn(x, return_weights=True)
    W, b = np.asarray(attn.qkv.kernel[...]), np.asarray(attn.qkv.bias[...])
    q, k, v = np.split(x[0] @ W + b, 3, axis=-1)  # (3, 9) each
    scores = q @ k.T / np.sqrt(WIDTH)
    want = np.exp(scores - scores.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(weights)[0, 0], want, rtol=1e-5, atol=1e-6)
    out = (want @ v) @ np.asarray(attn.proj.kernel[...]) + np.asarray(attn.proj.bias[...])
    np.testing.assert_allclose(np.asarray(y)[0], out, rtol=1e-4, atol=1e-5)


@demo("000-offsets")
def _offsets(row: Demo, tmp_path: Path) -> None:
    """Every pair 0 <= i <= j < 10 and its offset j - i (the probe's 10 classes); the probe
    itself trains in tests/flax/test_flax_seed000.py."""
    import torch

    pairs = [(i, j) for i in range(10) for j in range(i, 10)]
    pos_i = torch.tensor([i for i, _ in pairs])
    pos_j = torch.tensor([j for _, j in pairs])
    offsets = PF.relative_offsets(pos_j, pos_i)  # (55, 55): [a, b] = j_a - i_b
    diagonal = torch.diagonal(offsets)
    assert len(pairs) == 55
    assert diagonal.tolist() == [j - i for i, j in pairs]
    assert sorted(set(diagonal.tolist())) == list(range(10))
