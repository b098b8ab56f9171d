"""The Flax grid encodings equal torch's: a TinyTransformer at (B, T, A) positions under nnx.jit,
cached decoding, learned_2d's resampling; the grid formulas on JAX arrays."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import posenc
import posenc.functional as PF

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc.flax as pfx  # noqa: E402

V = 13
GRIDS = [
    ("rope_2d", {}),
    ("rope_3d", {"layout": "interleaved"}),
    ("mrope", {"interleaved": True}),
    ("rope_mixed", {}),
    ("sincos_2d", {}),
    ("sincos_2d", {"scale": 0.02}),
    ("learned_2d", {"grid": (4, 4)}),
]
forward = nnx.jit(lambda m, idx, pos, **kw: m(idx, pos, **kw))


def twins(name: str, config: dict[str, Any]) -> tuple[posenc.TinyTransformer, Any]:
    torch.manual_seed(0)
    kw = {"vocab_size": V, "pe": name, "d_model": 16, "n_heads": 2, "pe_config": config}
    tm = posenc.TinyTransformer(**kw).eval()
    fm = pfx.TinyTransformer(**kw, rngs=nnx.Rngs(0))
    fm.eval()
    pfx.load_torch_state_dict(fm, tm.state_dict())
    return tm, fm


#: One jitted model in the default suite (each compiles for seconds); the others with -m slow.
MODELS = [
    pytest.param(n, c, id=n, marks=[] if n == "mrope" else [pytest.mark.slow]) for n, c in GRIDS
]


@pytest.mark.parametrize(("name", "config"), GRIDS, ids=[g[0] for g in GRIDS])
def test_grid_hooks_equal_torch(name: str, config: dict) -> None:
    """Each encoding's own hook (rotate or embed) on the same inputs and parameters."""
    size = {"head_dim": 8, "n_heads": 2} if name not in ("sincos_2d", "learned_2d") else {"dim": 16}
    if name != "rope_mixed":
        size.pop("n_heads", None)
    torch.manual_seed(0)
    tpe, fpe = posenc.build(name, **size, **config), pfx.build(name, **size, **config)
    for key, value in tpe.named_parameters():  # rope_mixed's freqs, learned_2d's weight
        getattr(fpe, key).set_value(jnp.asarray(value.detach().numpy()))
    A = tpe.capabilities.axes
    pos = posenc.grid_positions(*([2] * (A - 2)), 3, 3)  # (T, A)
    T = len(pos)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        if tpe.capabilities.rotates:
            q, k = torch.randn(2, 2, T, 8, generator=gen), torch.randn(2, 2, T, 8, generator=gen)
            want = tpe.rotate(q, k, pos, pos)
            got = fpe.rotate(jnp.asarray(q), jnp.asarray(k), jnp.asarray(pos), jnp.asarray(pos))
        else:
            x = torch.randn(2, T, 16, generator=gen)
            want, got = (tpe.embed(x, pos),), (fpe.embed(jnp.asarray(x), jnp.asarray(pos)),)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("name", "config"), MODELS)
def test_grid_logits_and_cached_decoding_equal_torch(name: str, config: dict) -> None:
    tm, fm = twins(name, config)
    A = tm.pe.capabilities.axes
    pos = posenc.grid_positions(*([1] * (A - 2)), 3, 3).numpy()  # (T, A)
    pos = np.stack([pos, pos[::-1]])  # (B, T, A)
    idx = np.random.default_rng(0).integers(0, V, (2, 9))
    t_cache, f_cache = tm.new_cache(), fm.new_cache()
    with torch.no_grad():
        want = tm(
            torch.from_numpy(idx[:, :-1]), torch.from_numpy(pos[:, :-1].copy()), cache=t_cache
        )
        last = tm(
            torch.from_numpy(idx[:, -1:]), torch.from_numpy(pos[:, -1:].copy()), cache=t_cache
        )
    got = forward(fm, jnp.asarray(idx[:, :-1]), jnp.asarray(pos[:, :-1]), cache=f_cache)
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-4, atol=3e-5)
    got = forward(fm, jnp.asarray(idx[:, -1:]), jnp.asarray(pos[:, -1:]), cache=f_cache)
    np.testing.assert_allclose(np.asarray(got), last.numpy(), rtol=1e-4, atol=3e-5)


def test_learned_2d_resamples_as_torch() -> None:
    tm, fm = twins("learned_2d", {"grid": (4, 4)})
    tm.pe.resample_((6, 5))
    fm.pe.resample_((6, 5))
    np.testing.assert_allclose(
        np.asarray(fm.pe.weight[...]), tm.pe.weight.detach().numpy(), rtol=1e-6, atol=1e-7
    )
    with pytest.raises(ValueError, match=r"must lie in 0..5 x 0..4 \(grid=\(6, 5\)\)"):
        fm.pe.embed(jnp.zeros((1, 1, 16)), jnp.asarray([[6, 0]]))


def test_flax_grid_encodings_refuse_other_positions() -> None:
    pe = pfx.build("rope_2d", head_dim=8)
    q = jnp.zeros((1, 2, 3, 8))
    with pytest.raises(ValueError, match=r"q_pos must have shape \(T, 2\) or \(B, T, 2\)"):
        pe.rotate(q, q, jnp.arange(3), jnp.arange(3))
    attn = pfx.Attention(16, 2, pe=pe, rngs=nnx.Rngs(0), causal=True)
    with pytest.raises(ValueError, match=r"reads 2 position axes: pass pos of shape \(T, 2\)"):
        attn(jnp.zeros((1, 3, 16)))
    rope = pfx.build("rope", head_dim=8)
    with pytest.raises(ValueError, match=r"need an encoding that takes A axes"):
        rope.rotate(q, q, jnp.zeros((1, 3, 2), dtype=int), jnp.zeros((1, 3, 2), dtype=int))


def test_grid_formulas_run_on_jax() -> None:
    pos = np.stack(np.meshgrid(np.arange(3), np.arange(3), indexing="ij"), -1).reshape(-1, 2)
    want = PF.sincos_2d_table(pos, 8)
    np.testing.assert_allclose(np.asarray(PF.sincos_2d_table(jnp.asarray(pos), 8)), want, atol=2e-6)
    inv = PF.axial_inv_freq((2, 2), base=100.0)
    axes = np.asarray(PF.pair_axes((2, 2)))
    got = PF.axis_angles(jnp.asarray(pos), jnp.asarray(inv), jnp.asarray(axes))
    np.testing.assert_allclose(np.asarray(got), PF.axis_angles(pos, inv, axes), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "config"), GRIDS, ids=[g[0] for g in GRIDS])
def test_packed_and_padded_grids_equal_torch(name: str, config: dict) -> None:
    """Row 0: left padding before a 3x3 image; row 1: two images packed (segments)."""
    tm, fm = twins(name, config)
    A = tm.pe.capabilities.axes
    lead = [1] * (A - 2)
    image = posenc.grid_positions(*lead, 3, 3).numpy()  # (9, A)
    pair = np.concatenate([posenc.grid_positions(*lead, 2, 2), posenc.grid_positions(*lead, 1, 3)])
    pos = np.stack([np.concatenate([np.zeros((2, A), dtype=np.int64), image[:5]]), pair])
    mask = np.ones((2, 7), dtype=bool)
    mask[0, :2] = False
    segments = np.array([[0] * 7, [0] * 4 + [1] * 3])
    idx = np.random.default_rng(1).integers(0, V, (2, 7))
    with torch.no_grad():
        want = tm(
            torch.from_numpy(idx),
            torch.from_numpy(pos),
            padding_mask=torch.from_numpy(mask),
            segment_ids=torch.from_numpy(segments),
        )
    got = forward(
        fm,
        jnp.asarray(idx),
        jnp.asarray(pos),
        padding_mask=jnp.asarray(mask),
        segment_ids=jnp.asarray(segments),
    )
    np.testing.assert_allclose(np.asarray(got)[mask], want.numpy()[mask], rtol=1e-4, atol=3e-5)
