"""The Flax RoPE and xPos modules against their torch twins
(``tests/encodings/test_rope_modules.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc  # noqa: E402
import posenc.flax as pfx  # noqa: E402
import posenc.functional as PF  # noqa: E402

F32_MAX = float(np.finfo(np.float32).max)


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_integer_q_is_refused_not_truncated(name: str) -> None:
    """Integer q were rotated and cast back to int32: truncated garbage, no error."""
    pe = pfx.build(name, head_dim=8)
    q = jnp.ones((1, 2, 3, 8), jnp.int32)
    with pytest.raises(TypeError, match="must have a real floating dtype, got int32"):
        pe.rotate(q, q, jnp.arange(3), jnp.arange(3))


def test_xpos_negative_query_positions_raise_as_torch() -> None:
    """ζ^(n/512) at n = -40000 overflows float32: the query was NaN without a word."""
    pe = pfx.XPos(head_dim=64)
    q = jnp.ones((1, 1, 1, 64), jnp.float32)
    limit = PF.xpos_max_position(64, F32_MAX)
    rq, rk = pe.rotate(q, q, jnp.array([-limit]), jnp.array([0]))
    assert bool(jnp.isfinite(rq).all() & jnp.isfinite(rk).all())
    with pytest.raises(ValueError, match=f"position {-limit - 1} overflows float32"):
        pe.rotate(q, q, jnp.array([-limit - 1]), jnp.array([0]))


def test_xpos_keys_past_the_range_raise_without_queries() -> None:
    pe = pfx.XPos(head_dim=64)
    q, k = jnp.ones((1, 1, 0, 64), jnp.float32), jnp.ones((1, 1, 1, 64), jnp.float32)
    with pytest.raises(ValueError, match="position 40000 overflows float32"):
        pe.rotate(q, k, jnp.zeros((0,), jnp.int32), jnp.array([40000]))


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_twins_agree_per_row_positions_gqa_partial(name: str) -> None:
    """Different positions per row and for q and k, fewer key heads, partial interleaved."""
    cfg = {"head_dim": 8, "layout": "interleaved", "partial": 0.5}
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 3, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    q_pos, k_pos = np.array([[5, 6, 7], [100, 200, 300]]), np.arange(5) + 290
    want = posenc.build(name, **cfg).rotate(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(q_pos), torch.from_numpy(k_pos)
    )
    got = pfx.build(name, **cfg).rotate(
        jnp.asarray(q), jnp.asarray(k), jnp.asarray(q_pos), jnp.asarray(k_pos)
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-5)
