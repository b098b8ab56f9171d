"""Forgetting, stick-breaking, PaTH and sink attention on JAX (the same array-API functions):
under ``jax.jit`` equal to torch, and ``jax.grad`` equal to torch's autograd, in float64."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tests.functional._data_position import FORMS, inputs

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
jnp = pytest.importorskip("jax.numpy")

SHAPE = (1, 4, 2, 9, 4)  # (B, H, Hkv, T, D): grouped heads, T not a multiple of the block


@pytest.mark.parametrize("form", sorted(FORMS))
def test_jit_and_grad_agree_with_torch(form: str) -> None:
    a = inputs(*SHAPE)
    f = FORMS[form]
    ta = {n: torch.from_numpy(x).requires_grad_() for n, x in a.items()}
    want = f(ta, block_size=4)
    (want**2).sum().backward()
    with jax.enable_x64(True):
        ja = {n: jnp.asarray(x) for n, x in a.items()}
        jitted = jax.jit(lambda arrays: f(arrays, block_size=4))
        np.testing.assert_allclose(np.asarray(jitted(ja)), want.detach().numpy(), atol=1e-12)

        def loss(arrays: dict[str, Any]) -> Any:
            return jnp.sum(f(arrays, block_size=4) ** 2)

        grads = jax.jit(jax.grad(loss))(ja)
    for name, g in grads.items():
        expected = ta[name].grad
        expected = np.zeros(a[name].shape) if expected is None else expected.numpy()
        np.testing.assert_allclose(np.asarray(g), expected, atol=1e-11, err_msg=name)
