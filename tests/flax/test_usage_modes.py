"""The Flax twin under the ways JAX users run models: ``nnx.jit`` (one trace per shape),
``jax_enable_x64`` with a preallocated KV cache, NumPy/unsigned positions and randomized
positions (one draw shared by every layer of a forward)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc.flax as pfx  # noqa: E402

V, T = 11, 7


def model(pe: str, **kw: object) -> pfx.TinyTransformer:
    kw = {"d_model": 16, "n_heads": 2, "n_layers": 2, "max_len": 64} | kw
    return pfx.TinyTransformer(vocab_size=V, pe=pe, rngs=nnx.Rngs(0), **kw)  # type: ignore[arg-type]


def tokens(B: int = 2, n: int = T) -> jax.Array:
    return jnp.asarray(np.random.default_rng(0).integers(0, V, (B, n)))


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_preallocated_cache_decodes_under_jit_with_x64(name: str) -> None:
    """With ``jax_enable_x64`` the cache's int32 length met int64 literal indices in
    ``dynamic_update_slice`` (TypeError); decoding must equal the full float64 forward."""
    with jax.enable_x64(True):
        m = model(name)
        pfx.load_torch_state_dict(m, pfx.to_torch_state_dict(m), dtype=jnp.float64)
        idx = tokens()
        want = m(idx)
        cache = m.new_cache(capacity=12)
        step = nnx.jit(lambda m, c, x: m(x, cache=c))
        got = jnp.concatenate([step(m, cache, idx[:, :4]), step(m, cache, idx[:, 4:])], axis=1)
        assert got.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-12)


def test_randomized_training_forward_traces_once_per_shape() -> None:
    """A draw memo left in the model's state after a forward changed the state's structure
    (None -> arrays) and shapes (the previous step's length): nnx.jit traced again, up to
    once per (length, previous length) pair in the lab's variable-length training. The draw
    now lives in the forward's position context, never in the state."""
    m = model("randomized")
    m.train()
    traces = []

    @nnx.jit
    def forward(m: pfx.TinyTransformer, x: jax.Array) -> jax.Array:
        traces.append(x.shape)
        return m(x)

    for n in (5, 5, 5, 6, 5, 6, 6, 5):
        forward(m, tokens(n=n))
    assert traces == [(2, 5), (2, 6)]


def recording_rope(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """Positions the base RoPE sees in ``embed`` and in each layer's ``rotate``."""
    seen: list[np.ndarray] = []
    embed, rotate = pfx.RoPE.embed, pfx.RoPE.rotate

    def record(pos: jax.Array) -> None:
        jax.debug.callback(lambda p: seen.append(np.asarray(p)), pos)

    def embed_rec(self: pfx.RoPE, x: jax.Array, pos: jax.Array, **kw: object) -> jax.Array:
        record(pos)
        return embed(self, x, pos, **kw)  # type: ignore[arg-type]

    def rotate_rec(
        self: pfx.RoPE, q: jax.Array, k: jax.Array, q_pos: jax.Array, k_pos: jax.Array, **kw: object
    ) -> tuple[jax.Array, jax.Array]:
        record(q_pos)
        return rotate(self, q, k, q_pos, k_pos, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(pfx.RoPE, "embed", embed_rec)
    monkeypatch.setattr(pfx.RoPE, "rotate", rotate_rec)
    return seen


@pytest.mark.parametrize(
    "pos",
    [np.arange(T), np.tile(np.arange(T), (2, 1)), jnp.arange(T, dtype=jnp.uint8)],
    ids=["numpy", "numpy-2d", "uint8"],
)
def test_randomized_layers_share_one_draw_for_any_position_array(
    pos: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NumPy or unsigned positions were converted anew by every hook: each layer drew its
    own random positions instead of the one draw per forward the docstring promises."""
    seen = recording_rope(monkeypatch)
    m = model("randomized", n_layers=3)
    m.train()
    m(tokens(), pos)
    jax.effects_barrier()
    assert len(seen) == 4  # embed + 3 layers
    for drawn in seen[1:]:
        np.testing.assert_array_equal(drawn, seen[0])


def remat_loss(m: pfx.TinyTransformer, idx: jax.Array, remat: str) -> jax.Array:
    """A user's forward over ``m.blocks``, each block under ``nnx.remat`` if asked, given the
    forward's position context as an argument ("argument") or closing over it ("closure")."""
    pos = jnp.arange(idx.shape[1])
    ctx = m.pe.prepare(pos)
    x = m.pe.embed(m.tok(idx), pos, ctx=ctx)
    for block in m.blocks:
        if remat == "closure":
            x = nnx.remat(lambda b, x: b(x, ctx, None))(block, x)
        else:
            run = (
                nnx.remat(lambda b, x, c: b(x, c, None))
                if remat
                else (lambda b, x, c: b(x, c, None))
            )
            x = run(block, x, ctx)
    return jnp.mean(m.head(m.norm(x)) ** 2)


def test_randomized_under_remat_shares_the_draw_and_gives_the_same_gradients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nnx.remat hands each block copies of the positions and of the position context (a
    pytree): every block must still rotate at the one draw of the forward (a draw per block
    changed the loss and gradients), whether the context is an argument of the remat'd
    function or closed over (then nothing it computes inside leaks out as a tracer)."""
    seen = recording_rope(monkeypatch)
    grads, draws = {}, {}
    for remat in ("", "argument", "closure"):
        m = model("randomized", n_layers=3)
        m.train()
        step = nnx.jit(nnx.value_and_grad(lambda m, r=remat: remat_loss(m, tokens(), r)))
        grads[remat] = step(m)
        jax.effects_barrier()
        draws[remat], seen[:] = list(seen), []
    for drawn in draws.values():  # embed, each layer (and remat's recomputation)
        assert len(drawn) >= 4
        for other in drawn[1:]:
            np.testing.assert_array_equal(other, drawn[0])
    l0, g0 = grads[""]
    for remat in ("argument", "closure"):
        np.testing.assert_array_equal(draws[remat][0], draws[""][0])  # same seed, same draw
        l1, g1 = grads[remat]
        np.testing.assert_allclose(float(l1), float(l0), rtol=1e-6)
        for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7)
