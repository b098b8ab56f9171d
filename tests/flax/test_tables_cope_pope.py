"""The Flax additive tables, CoPE, PoPE and registry against their torch twins
(``tests/encodings/test_tables_cope_pope.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc  # noqa: E402
import posenc.flax as pfx  # noqa: E402


@pytest.mark.parametrize(
    ("pos", "message"),
    [([2, 3, 4], "position 4 is past"), ([-1, 0, 1], "position -1 is before")],
    ids=["past_end", "negative"],
)
def test_learned_under_jit_refuses_positions_outside_the_table(
    pos: list[int], message: str
) -> None:
    """Under jax.jit the values are unknown while tracing: a host check raises when a position
    is outside the table (plain indexing clamped 4 to row 3 and wrapped -1 to row 3, silently),
    and the rows it would have read are NaN, never another row."""
    pe = pfx.Learned(dim=4, max_len=4)
    embed = nnx.jit(lambda m, x, p: m.embed(x, p))
    with pytest.raises(Exception, match=message + r" the learned table \(max_len=4"):
        jax.block_until_ready(embed(pe, jnp.zeros((2, 3, 4)), jnp.asarray(pos)))
    index = jnp.where(jnp.asarray(pos) < 0, 4, jnp.asarray(pos))  # the fill the module uses
    rows = np.asarray(jnp.take(pe.weight[...], index, axis=0, mode="fill", fill_value=jnp.nan))
    bad = [i for i, p in enumerate(pos) if not 0 <= p < 4]
    assert np.isnan(rows[bad]).all() and not np.isnan(np.delete(rows, bad, axis=0)).any()


def test_learned_under_jit_inside_the_table_runs() -> None:
    pe = pfx.Learned(dim=4, max_len=4)
    embed = nnx.jit(lambda m, x, p: m.embed(x, p))
    out = np.asarray(embed(pe, jnp.zeros((2, 3, 4)), jnp.asarray([1, 3, 0])))
    np.testing.assert_array_equal(out[0], np.asarray(pe.weight[...])[[1, 3, 0]])


def test_learned_under_jit_keeps_gradients_of_valid_rows() -> None:
    pe = pfx.Learned(dim=4, max_len=4)
    loss = nnx.jit(lambda m: m.embed(jnp.zeros((1, 3, 4)), jnp.array([0, 2, 2])).sum())
    grad = nnx.grad(loss)(pe)
    np.testing.assert_array_equal(np.asarray(grad.weight[...])[:, 0], [1.0, 0.0, 2.0, 0.0])


def test_learned_equals_torch_with_per_row_positions() -> None:
    flax_pe, torch_pe = pfx.Learned(dim=6, max_len=16), posenc.build("learned", dim=6, max_len=16)
    with torch.no_grad():
        torch_pe.weight.copy_(torch.from_numpy(np.array(flax_pe.weight[...])))
    x = np.random.default_rng(0).normal(size=(2, 3, 6)).astype(np.float32)
    pos = np.array([[0, 1, 2], [13, 14, 15]])
    got = np.asarray(flax_pe.embed(jnp.asarray(x), jnp.asarray(pos)))
    want = torch_pe.embed(torch.from_numpy(x), torch.from_numpy(pos)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)


SCORES_ERROR = r"scores must have shape \(B, H, Tq, Tk\) = \(2, 3, 5, 5\)"


@pytest.mark.parametrize("scores_shape", [(2, 3, 3, 5), (1, 3, 5, 5), (2, 3, 5, 4)], ids=str)
def test_cope_rejects_scores_that_do_not_match_q_and_k(scores_shape: tuple[int, ...]) -> None:
    pe = pfx.CoPE(head_dim=8, n_positions=4)
    q, k = jnp.ones((2, 3, 5, 8)), jnp.ones((2, 3, 5, 8))
    with pytest.raises(ValueError, match=SCORES_ERROR):
        pe.relative_logits(jnp.zeros(scores_shape), q, k, jnp.arange(5), jnp.arange(5))


def test_pope_equals_torch_odd_head_dim_per_row_positions() -> None:
    """D = 5 frequencies, 3 heads, GQA keys, per-row query positions and a clamped phase bias."""
    rng = np.random.default_rng(1)
    flax_pe = pfx.PoPE(head_dim=5, n_heads=3)
    torch_pe = posenc.build("pope", head_dim=5, n_heads=3)
    delta = rng.uniform(-8.0, 1.0, size=(3, 5)).astype(np.float32)
    flax_pe.delta[...] = jnp.asarray(delta)
    with torch.no_grad():
        torch_pe.delta.copy_(torch.from_numpy(delta))
    q = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    k = rng.normal(size=(2, 1, 6, 5)).astype(np.float32)
    q_pos, k_pos = np.array([[2, 3, 4, 5], [7, 8, 9, 10]]), np.arange(5, 11)
    fq, fk = flax_pe.rotate(*(jnp.asarray(a) for a in (q, k, q_pos, k_pos)))
    tq, tk = torch_pe.rotate(*(torch.from_numpy(a) for a in (q, k, q_pos, k_pos)))
    np.testing.assert_allclose(np.asarray(fq), tq.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fk), tk.detach().numpy(), rtol=1e-5, atol=1e-5)
    # the paper's score: Σ_c softplus(q_c) softplus(k_c) cos((s - t) θ_c + δ_c)
    theta = 10000.0 ** (-np.arange(5) / 5)
    d = np.clip(delta, -2 * math.pi, 0.0)
    sp = np.logaddexp(0.0, q[1, 2, 3]) * np.logaddexp(0.0, k[1, 0, 4])
    want = float(np.sum(sp * np.cos((k_pos[4] - q_pos[1, 3]) * theta + d[2])))
    got = float(np.asarray(fq[1, 2, 3] @ fk[1, 0, 4]))
    assert got == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_pope_model_forward_makes_tables_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-layer Flax forward makes cos/sin of pos·θ once (its ``PoPEState``); the hooks given
    no state, each computing their own, give the same features
    (``tests/encodings/test_pope.py``)."""
    model = pfx.TinyTransformer(vocab_size=11, pe="pope", d_model=16, n_heads=2)
    model.pe.delta[...] = jnp.linspace(-7.0, 0.5, 16).reshape(2, 8)
    idx = jnp.asarray(np.random.default_rng(0).integers(0, 11, (2, 6)))
    calls, rope_cos_sin = [0], posenc.functional.rope_cos_sin

    def counted(*args):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return rope_cos_sin(*args)

    monkeypatch.setattr(posenc.functional, "rope_cos_sin", counted)
    model(idx)
    assert calls[0] == 1
    pos = jnp.arange(6)
    q = jnp.asarray(np.random.default_rng(1).normal(size=(2, 2, 6, 8)), jnp.float32)
    ctx = model.pe.prepare(pos)
    shared = model.pe.rotate(q, q, pos, pos, ctx=ctx)
    own = model.pe.rotate(q, q, pos, pos)
    assert calls[0] == 2 + 2  # prepare once, then the stateless call's queries and keys
    for a, b in zip(shared, own, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    ("geometry", "match"),
    [
        ({"dim": 64, "n_heads": 0}, "n_heads must be an integer >= 1, got 0"),
        ({"dim": 60, "n_heads": 7}, "dim must be divisible by n_heads, got 60 and 7"),
    ],
)
def test_build_for_model_rejects_bad_head_split(geometry: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pfx.build_for_model("rope", max_len=16, **geometry)


@pytest.mark.parametrize("name", ["alibi", "t5", "fire"])
def test_flax_encoder_by_name_gets_the_encoder_form_as_torch(name: str) -> None:
    def bidirectional(causal: bool, **config: bool) -> bool:
        model = pfx.TinyTransformer(
            vocab_size=8, pe=name, d_model=16, n_heads=2, causal=causal, pe_config=config or None
        )
        return bool(model.pe.bidirectional)

    assert bidirectional(causal=False) and not bidirectional(causal=True)
    assert not bidirectional(causal=False, bidirectional=False)


def test_odd_width_sinusoidal_equals_torch() -> None:
    """dim = 9: the last column a sine (``PF.sinusoidal_table``), in Flax as in torch."""
    pos = np.array([[0, 1, 2], [5, 7, 11]])
    x = np.zeros((2, 3, 9), dtype=np.float32)
    want = posenc.build("sinusoidal", dim=9).embed(torch.from_numpy(x), torch.from_numpy(pos))
    got = pfx.Sinusoidal(dim=9).embed(jnp.asarray(x), jnp.asarray(pos))
    np.testing.assert_allclose(np.asarray(got), want.numpy(), atol=1e-6)
