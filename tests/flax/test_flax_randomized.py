"""Flax randomized positions: the jit-friendly sampler equals the torch module's draw for the
same noise, draws are uniform sorted subsets shared by one forward's hooks, evaluation is the
base encoding."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc.flax as pfx  # noqa: E402
from posenc.flax.randomized import sorted_subset_at  # noqa: E402


def test_sampler_equals_sorted_argsort_subset() -> None:
    rng = np.random.default_rng(0)
    noise = rng.uniform(size=(3, 20))
    rows = np.array([[0, 1, 2, 3, 4], [0, 0, 1, 6, 7], [2, 3, 3, 5, 9]])
    want = np.stack(
        [np.sort(np.argsort(z)[: r.max() + 1])[r] for z, r in zip(noise, rows, strict=True)]
    )
    got = jax.jit(sorted_subset_at)(jnp.asarray(noise), jnp.asarray(rows))
    np.testing.assert_array_equal(np.asarray(got), want)


def test_draws_are_uniform_sorted_subsets() -> None:
    L, n, B = 10, 3, 4000
    pe = pfx.Randomized(max_len=L, base_encoding="rope", head_dim=4, seed=1)
    drawn = np.asarray(pe.transform(jnp.arange(n), B))  # (B, n)
    assert np.all(np.diff(drawn, axis=1) > 0) and drawn.min() >= 0 and drawn.max() < L
    counts = np.bincount(drawn.ravel(), minlength=L)  # each index in the subset w.p. n/L
    expected, std = B * n / L, np.sqrt(B * n / L * (1 - n / L))
    assert np.all(np.abs(counts - expected) < 5 * std), counts


def test_one_draw_per_forward_shared_by_rotate_and_fresh_each_call() -> None:
    pe = pfx.Randomized(max_len=64, base_encoding="rope", head_dim=4, seed=2)
    pos = jnp.arange(6)
    ctx = pe.prepare(pos, batch=2)  # one draw per forward, held by its state
    first = ctx.q_draw
    assert first.shape == (2, 6) and ctx.k_draw is first  # keys at the queries' positions
    q = jnp.asarray(np.random.default_rng(0).normal(size=(2, 1, 6, 4)), jnp.float32)
    want = pe.base.rotate(q, q, first, first)
    for got, w in zip(pe.rotate(q, q, pos, pos, ctx=ctx), want, strict=True):  # rotate's too
        np.testing.assert_array_equal(got, w)
    assert not np.array_equal(pe.transform(pos, 2), first)  # no context: a fresh draw
    assert not np.array_equal(pe.prepare(pos, batch=2).q_draw, first)  # a new forward
    model = pfx.TinyTransformer(
        vocab_size=7,
        pe="randomized",
        d_model=8,
        n_heads=2,
        max_len=64,
        pe_config={"base_encoding": "rope"},
        rngs=nnx.Rngs(0),
    )
    forward = nnx.jit(lambda m, x: m(x))
    idx = jnp.asarray(np.random.default_rng(0).integers(0, 7, (2, 5)))  # distinct values
    assert not np.allclose(forward(model, idx), forward(model, idx))  # a new draw each call
    model.eval()
    base = pfx.TinyTransformer(vocab_size=7, pe="rope", d_model=8, n_heads=2)
    pfx.load_torch_state_dict(base, pfx.to_torch_state_dict(model))  # same weights
    np.testing.assert_allclose(forward(model, idx), forward(base, idx), atol=1e-6)


def test_randomized_errors() -> None:
    with pytest.raises(ValueError, match="base_encoding must be one of"):
        pfx.Randomized(max_len=8, base_encoding="alibi")
    pe = pfx.Randomized(max_len=4, base_encoding="rope", head_dim=4)
    with pytest.raises(ValueError, match="need max_len >= sequence length, got max_len=4 for 6"):
        pe.transform(jnp.arange(6), 1)
