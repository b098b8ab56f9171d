"""Seed 000 ("How positional embeddings work? Part 2", a JAX/Flax nnx notebook) through posenc:
a relative-offset probe on a sinusoidal table with a custom base of 100.

Two tokens sit at positions i <= j < 10 of a 15-token sequence; each input row is a fixed
random "semantic" vector U(-0.1, 0.1) plus the sinusoidal encoding of its position
(``posenc.flax.Sinusoidal(base=100)``). One attention layer (``posenc.flax.Attention``) and a
linear read-out must tell the offset j - i (10 classes). The notebook uses width 9; posenc's
table interleaves sin/cos pairs, so the width here is 10.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

import posenc.flax as pfx  # noqa: E402

SEQ, WIDTH, BASE, MAX_OFFSET = 15, 10, 100.0, 10


class OffsetProbe(nnx.Module):
    """Embeddings at (i, j) -> attention -> logits over offsets 0..9."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.semantic = jax.random.uniform(rngs.params(), (SEQ, WIDTH), minval=-0.1, maxval=0.1)
        self.pe = pfx.Sinusoidal(dim=WIDTH, base=BASE)
        self.attn = pfx.Attention(WIDTH, 1, pe=pfx.NoPE(), causal=False, bias=True, rngs=rngs)
        self.head = nnx.Linear(2 * WIDTH, MAX_OFFSET, rngs=rngs)

    def __call__(self, pos: jax.Array) -> jax.Array:
        x = self.pe.embed(self.semantic[pos], pos)  # (N, 2, C): token i, token j
        h = x + self.attn(x)  # (N, 2, C)
        return self.head(h.reshape(pos.shape[0], 2 * WIDTH))  # (N, 10)


def pairs() -> tuple[np.ndarray, np.ndarray]:
    """Every (i, j) with 0 <= i <= j < 10 as positions (55, 2) and offsets j - i (55,)."""
    pos = np.array([(i, j) for i in range(MAX_OFFSET) for j in range(i, MAX_OFFSET)])
    return pos, pos[:, 1] - pos[:, 0]


def test_seed000_offset_probe_learns_relative_offsets() -> None:
    pos, offset = (jnp.asarray(a) for a in pairs())
    model = OffsetProbe(nnx.Rngs(42))
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    def loss_fn(m: OffsetProbe) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(m(pos), offset).mean()

    @nnx.jit
    def step(m: OffsetProbe, o: nnx.Optimizer) -> jax.Array:
        loss, grads = nnx.value_and_grad(loss_fn)(m)
        o.update(m, grads)
        return loss

    losses = [float(step(model, opt)) for _ in range(300)]
    accuracy = float(jnp.mean(jnp.argmax(model(pos), axis=-1) == offset))
    assert losses[-1] < 0.1 * losses[0], f"loss {losses[0]:.3f} -> {losses[-1]:.3f}"
    assert accuracy >= 0.95, f"offset accuracy {accuracy:.2f} (chance ~0.18)"
