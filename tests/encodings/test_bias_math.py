"""Review probes of the score-bias math: devices, position dtypes, torch/Flax twins."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF


def test_fire_mlp_pieces_stay_on_the_parameters_device() -> None:
    """The piece index must live on w1's device: a CPU ``arange`` against CUDA (here: meta)
    parameters raised "Tensor on device cpu is not on the expected device"."""
    w1, b1 = torch.randn(4, device="meta"), torch.randn(4, device="meta")
    w2, b2 = torch.randn(3, 4, device="meta"), torch.randn(3, device="meta")
    kinks, slopes, intercepts = PF.fire_mlp_pieces(w1, b1, w2, b2)
    assert slopes.shape == intercepts.shape == (3, 5) and kinks.device.type == "meta"
    pe = posenc.build("fire", n_heads=3, hidden=4).to("meta")
    pos = torch.arange(6, device="meta")
    assert pe.bias(pos, pos).shape == (1, 3, 6, 6)


@pytest.mark.parametrize(
    ("dtype", "init_threshold"), [(torch.float16, 1e5), (torch.bfloat16, 1001.0)]
)
def test_fire_threshold_is_computed_in_float32_under_half_precision(
    dtype: torch.dtype, init_threshold: float
) -> None:
    """L = |s·init_threshold| belongs to the float32 arithmetic like the rest of the bias: in
    float16, s·1e5 overflowed to inf (every x = 0, the bias constant: 0.16 off); in bfloat16,
    1001 rounded to 1000."""
    torch.manual_seed(0)
    pe = posenc.build("fire", n_heads=2, init_threshold=init_threshold)
    pos = torch.arange(0, 200_000, 20_000)
    expected = pe.bias(pos, pos)
    pe = pe.to(dtype)
    assert pe.threshold.item() == init_threshold
    torch.testing.assert_close(pe.bias(pos, pos), expected, atol=2e-2, rtol=2e-2)


jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
import posenc.flax as pfx  # noqa: E402


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple", "fire"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_flax_bias_of_unsigned_positions_equals_signed(name: str, dtype: type) -> None:
    """Unsigned positions are integers like any other: i - j must not wrap around (uint8:
    0 - 1 = 255, so a one-head ALiBi gave -0.996 instead of +1/256 there, uint32 -2^24)."""
    config = {"t5": {"bidirectional": True}}.get(name, {})
    pe = pfx.build(name, n_heads=3, **config)
    q_pos, k_pos = np.array([[0, 3, 4], [2, 5, 9]]), np.array([[0, 1, 2, 3, 4], [9, 8, 7, 6, 5]])
    expected = np.asarray(pe.bias(q_pos, k_pos))
    got = np.asarray(pe.bias(q_pos.astype(dtype), k_pos.astype(dtype)))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_flax_fire_threshold_is_computed_in_float32_under_float16() -> None:
    """As in torch: float16 parameters must not overflow L = |s·1e5| to inf."""
    import jax.numpy as jnp

    pe = pfx.build("fire", n_heads=2, init_threshold=1e5)
    pos = np.arange(0, 200_000, 20_000)
    expected = np.asarray(pe.bias(pos, pos))
    pe.threshold_scale.set_value(pe.threshold_scale[...].astype(jnp.float16))
    assert float(pe.threshold) == 1e5
    np.testing.assert_allclose(np.asarray(pe.bias(pos, pos)), expected, rtol=1e-6, atol=1e-6)


def test_fire_bias_under_bf16_autocast_is_the_float32_bias() -> None:
    """Autocast ran the MLP's products in bf16: the bias came out about 0.04 off at values
    near 13, where the docstring promises float32 arithmetic."""
    torch.manual_seed(0)
    fire = posenc.build("fire", n_heads=4)
    with torch.no_grad():
        for p in fire.parameters():
            p.normal_(0.0, 3.0)
        pos = torch.arange(300)
        want = fire.bias(pos, pos)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = fire.bias(pos, pos)
            _, slopes, _ = fire.mlp_pieces()
    assert got.dtype == torch.float32 and slopes.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
