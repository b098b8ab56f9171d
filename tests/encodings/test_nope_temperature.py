"""``nope_temperature``: Llama 4's NoPE-layer query temperature against a float64 reference of
its formula and against transformers' ``Llama4TextAttention`` (a NoPE layer with
``attn_temperature_tuning``), in one forward and through the KV cache; the Flax twin equals
torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from posenc.attention import Attention
from posenc.models.kv_cache import KVCache


def reference(p: int, floor_scale: int, attn_scale: float) -> float:
    """τ(p) = log(⌊(p + 1) / floor_scale⌋ + 1) · attn_scale + 1, in float64."""
    return math.log(math.floor((p + 1) / floor_scale) + 1) * attn_scale + 1


@pytest.mark.parametrize(("floor_scale", "attn_scale"), [(8192, 0.1), (3, 0.1), (1, 0.5)])
def test_temperature_equals_its_formula(floor_scale: int, attn_scale: float) -> None:
    pos = np.array([0, 1, 2, 3, 7, 8190, 8191, 8192, 100_000, 2**20])
    want = [reference(int(p), floor_scale, attn_scale) for p in pos]
    got = PF.query_temperature(
        torch.from_numpy(pos), floor_scale=floor_scale, attn_scale=attn_scale, dtype=torch.float64
    )
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-15)
    np.testing.assert_allclose(
        PF.query_temperature(pos, floor_scale=floor_scale, attn_scale=attn_scale),
        np.asarray(want, dtype=np.float32),
        rtol=1e-6,
    )
    assert float(PF.query_temperature(torch.tensor(8190))) == 1.0  # NoPE below floor_scale - 1


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="floor_scale"):
        posenc.build("nope_temperature", floor_scale=0)
    with pytest.raises(ValueError, match="attn_scale"):
        posenc.build("nope_temperature", attn_scale=-1.0)


@pytest.mark.anchor
def test_attention_equals_transformers_llama4_nope_layer() -> None:
    tf = pytest.importorskip("transformers")
    from transformers.cache_utils import DynamicCache
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    C, H, Hkv, D = 32, 4, 2, 8
    config = tf.Llama4TextConfig(
        hidden_size=C,
        num_attention_heads=H,
        num_key_value_heads=Hkv,
        head_dim=D,
        num_hidden_layers=4,
        intermediate_size=64,
        intermediate_size_mlp=64,
        vocab_size=50,
        floor_scale=3,  # the temperature moves within a few tokens
        attn_scale=0.3,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    theirs = Llama4TextAttention(config, layer_idx=3).double().eval()  # layer 3: NoPE
    assert not theirs.use_rope and theirs.attn_temperature_tuning
    pe = posenc.build("nope_temperature", floor_scale=3, attn_scale=0.3)
    ours = Attention(C, H, pe=pe, causal=True, n_kv_heads=Hkv).double().eval()
    with torch.no_grad():
        ours.qkv.weight.copy_(
            torch.cat([theirs.q_proj.weight, theirs.k_proj.weight, theirs.v_proj.weight])
        )
        ours.proj.weight.copy_(theirs.o_proj.weight)
    T = 11
    x = torch.randn(2, T, C, dtype=torch.float64)
    mask = torch.full((T, T), -math.inf, dtype=torch.float64).triu(1)[None, None]
    # transformers computes τ in float32 (positions.float()); posenc in q's float64: the
    # outputs agree to float32's rounding of τ
    tol = {"rtol": 1e-6, "atol": 1e-7}
    with torch.no_grad():
        want, _ = theirs(x, None, mask)
        got = ours(x)
        torch.testing.assert_close(got, want, **tol)
        # decoding through each cache: transformers reads the cache length as the position
        past, cache, outs = DynamicCache(), KVCache(), []
        for a, b in ((0, 5), (5, 6), (6, 11)):
            m = torch.zeros(1, 1, b - a, b, dtype=torch.float64)
            m[..., :, :] = mask[..., a:b, :b]
            step, _ = theirs(x[:, a:b], None, m, past_key_values=past)
            outs.append(ours(x[:, a:b], cache=cache))
            torch.testing.assert_close(outs[-1], step, **tol)
    torch.testing.assert_close(torch.cat(outs, 1), got, rtol=1e-12, atol=1e-12)


def test_flax_twin_equals_torch() -> None:
    jnp = pytest.importorskip("jax.numpy")
    pfx = pytest.importorskip("posenc.flax")
    torch_pe = posenc.build("nope_temperature", floor_scale=2, attn_scale=0.2)
    flax_pe = pfx.build("nope_temperature", floor_scale=2, attn_scale=0.2)
    q = np.random.default_rng(0).normal(size=(2, 3, 7, 4)).astype(np.float32)
    pos = np.arange(7)[None].repeat(2, 0) + np.array([[0], [5]])
    want = torch_pe.rotate(torch.from_numpy(q), torch.from_numpy(q), torch.from_numpy(pos), None)
    got = flax_pe.rotate(jnp.asarray(q), jnp.asarray(q), jnp.asarray(pos), None)
    np.testing.assert_allclose(np.asarray(got[0]), want[0].numpy(), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(got[1]), q)  # keys unchanged
