"""Flax Shaw and Transformer-XL equal their torch twins through the attention layer: per-row
positions in any order, GQA, bidirectional, KV-cache decoding (Tq != Tk), bfloat16 hooks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc import Attention
from posenc.models.kv_cache import KVCache

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc.flax as pfx  # noqa: E402
from posenc.flax.attention import Attention as FlaxAttention  # noqa: E402
from posenc.flax.kv_cache import KVCache as FlaxKVCache  # noqa: E402

C, H, D, T = 24, 4, 6, 7
CONFIGS = {
    "shaw": ("shaw", {"head_dim": D, "max_distance": 2}),
    "shaw_keys": ("shaw", {"head_dim": D, "max_distance": 3, "values": False}),
    "transformer_xl": ("transformer_xl", {"dim": C, "n_heads": H}),
}
POSITIONS = np.array([[0, 2, 4, 9, 11, 12, 30], [105, 103, 101, 100, 107, 107, 102]])


def _twins(key: str, causal: bool, n_kv: int | None) -> tuple[Attention, FlaxAttention]:
    name, config = CONFIGS[key]
    torch.manual_seed(0)
    tpe = posenc.build(name, **config)
    with torch.no_grad():
        for p in tpe.parameters():
            p.normal_(std=0.5)
    tattn = Attention(C, H, pe=tpe, causal=causal, n_kv_heads=n_kv).eval()
    fpe = pfx.build(name, **config)
    for pname, p in tpe.named_parameters():
        getattr(fpe, pname)[...] = jnp.asarray(p.detach().numpy())
    fattn = FlaxAttention(C, H, pe=fpe, causal=causal, n_kv_heads=n_kv, rngs=nnx.Rngs(0))
    fattn.qkv.kernel[...] = jnp.asarray(tattn.qkv.weight.detach().numpy().T)
    fattn.proj.kernel[...] = jnp.asarray(tattn.proj.weight.detach().numpy().T)
    return tattn, fattn


@pytest.mark.parametrize("key", list(CONFIGS))
@pytest.mark.parametrize(("causal", "n_kv"), [(True, 2), (False, None)])
@pytest.mark.parametrize("prefill", [None, 3])
def test_flax_layer_equals_torch(
    key: str, causal: bool, n_kv: int | None, prefill: int | None
) -> None:
    tattn, fattn = _twins(key, causal, n_kv)
    x = np.random.default_rng(1).standard_normal((2, T, C)).astype(np.float32)
    if prefill is None:
        with torch.no_grad():
            want = tattn(torch.tensor(x), torch.tensor(POSITIONS)).numpy()
        got = np.asarray(fattn(jnp.asarray(x), jnp.asarray(POSITIONS)))
    else:
        tcache, fcache = KVCache(), FlaxKVCache()
        cuts = [(0, prefill)] + [(t, t + 1) for t in range(prefill, T)]  # then T = 1 steps
        with torch.no_grad():
            want = np.concatenate(
                [
                    tattn(torch.tensor(x[:, s:e]), torch.tensor(POSITIONS[:, s:e]), cache=tcache)
                    for s, e in cuts
                ],
                axis=1,
            )
        got = np.concatenate(
            [
                np.asarray(
                    fattn(jnp.asarray(x[:, s:e]), jnp.asarray(POSITIONS[:, s:e]), cache=fcache)
                )
                for s, e in cuts
            ],
            axis=1,
        )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("key", ["shaw", "transformer_xl"])
def test_flax_hooks_equal_torch_in_bfloat16(key: str) -> None:
    """bfloat16 logits and values agree with torch's to bfloat16 rounding (Tq != Tk)."""
    tattn, fattn = _twins(key, True, None)
    tpe, fpe = tattn.pe.to(torch.bfloat16), fattn.pe
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, H, 4, D)).astype(np.float32)
    k = rng.standard_normal((2, H, T, D)).astype(np.float32)
    q_pos, k_pos = POSITIONS[:, 3:], POSITIONS
    tq, tk = torch.tensor(q).bfloat16(), torch.tensor(k).bfloat16()
    jq, jk = jnp.asarray(q).astype(jnp.bfloat16), jnp.asarray(k).astype(jnp.bfloat16)
    zeros_t, zeros_j = (
        torch.zeros(2, H, 4, T, dtype=torch.bfloat16),
        jnp.zeros((2, H, 4, T), jnp.bfloat16),
    )
    with torch.no_grad():
        want = tpe.relative_logits(zeros_t, tq, tk, torch.tensor(q_pos), torch.tensor(k_pos))
    got = fpe.relative_logits(zeros_j, jq, jk, jnp.asarray(q_pos), jnp.asarray(k_pos))
    assert got.dtype == jnp.bfloat16 and want.dtype == torch.bfloat16
    scale = float(want.float().abs().max())
    np.testing.assert_allclose(
        np.asarray(got.astype(jnp.float32)), want.float().detach().numpy(), atol=2e-2 * scale
    )
    probs = torch.softmax(want.float(), dim=-1)
    with torch.no_grad():
        want_v = tpe.relative_values(probs.bfloat16(), torch.tensor(q_pos), torch.tensor(k_pos))
    got_v = fpe.relative_values(
        jnp.asarray(probs.numpy()).astype(jnp.bfloat16), jnp.asarray(q_pos), jnp.asarray(k_pos)
    )
    if want_v is None:
        assert got_v is None
    else:
        np.testing.assert_allclose(
            np.asarray(got_v.astype(jnp.float32)), want_v.float().detach().numpy(), atol=2e-2
        )


@pytest.mark.parametrize("name", ["shaw", "transformer_xl"])
def test_flax_relative_logits_refuse_scores_of_another_shape(name: str) -> None:
    """Scores (H, T, T) or (1, H, T, T) were broadcast to (B, H, T, T) silently, as in torch
    before its check."""
    pe = pfx.build(name, **({"head_dim": 8} if name == "shaw" else {"dim": 16, "n_heads": 2}))
    q = k = jnp.zeros((2, 2, 3, 8))
    pos = jnp.arange(3)
    for bad in (jnp.zeros((2, 3, 3)), jnp.zeros((1, 2, 3, 3))):
        with pytest.raises(ValueError, match=r"scores must have shape \(B, H, Tq, Tk\)"):
            pe.relative_logits(bad, q, k, pos, pos)
