"""Precision of scaled RoPE: cos/sin to 1e-6 of float64 up to position 1,000,000, where a
float32 ``pos * inv_freq`` (transformers' way) is off by ~1e-2; bf16/fp16 q/k round-trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from tests.reference import extension as ref

POS = torch.cat([torch.arange(0, 64), torch.randint(0, 1_000_001, (2048,)), torch.tensor([10**6])])
SCALINGS = {
    "none": (None, lambda: (ref.default(500000.0, 128), 1.0)),
    "yarn": (
        {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096},
        lambda: ref.yarn(500000.0, 128, 40.0, 4096),
    ),
    "llama3": (
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8192},
        lambda: ref.llama3(500000.0, 128, 8.0, 1.0, 4.0, 8192),
    ),
}  # fmt: skip


def _truth(inv_freq: list[float], scale: float) -> tuple[np.ndarray, np.ndarray]:
    ang = POS.numpy().astype(np.float64)[:, None] * np.asarray(inv_freq)  # (T, P) float64
    return scale * np.cos(ang), scale * np.sin(ang)


@pytest.mark.parametrize("name", list(SCALINGS))
def test_cos_sin_within_1e6_of_float64_up_to_a_million(name: str) -> None:
    spec, reference = SCALINGS[name]
    pe = posenc.build("rope", head_dim=128, base=500000.0, scaling=spec)
    inv_freq, scale = reference()
    cos64, sin64 = _truth(inv_freq, scale)
    cos, sin = pe.cos_sin(POS, torch.float32)
    assert cos.dtype == torch.float32
    assert np.abs(cos.double().numpy() - cos64).max() <= 1e-6
    assert np.abs(sin.double().numpy() - sin64).max() <= 1e-6
    # What float32 angles give (transformers computes pos.float() * inv_freq.float()):
    naive = (POS.float()[:, None] * pe.inv_freq[None]).cos() * scale
    assert np.abs(naive.double().numpy() - cos64).max() > 1e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_qk_keep_their_dtype_and_position_independent_error(
    dtype: torch.dtype,
) -> None:
    """bf16/fp16 q/k come back in their dtype with a few output roundings of error at any
    position; float32 angles then low-precision cos/sin (transformers) lose the far positions."""
    spec = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}
    pe = torch.nn.Sequential(posenc.build("rope", head_dim=64, scaling=spec)).to(dtype)[0]
    assert pe.inv_freq64.dtype == torch.float64  # a model cast keeps the float64 frequencies
    assert math.isclose(pe.attention_scaling, 0.1 * math.log(8.0) + 1.0)
    q = torch.randn(1, 2, 5, 64).to(dtype)
    pos = torch.tensor([0, 7, 4096, 300_000, 1_000_000])
    rq, rk = pe.rotate(q, q, pos, pos)
    assert rq.dtype == rk.dtype == dtype
    exact = pe.rotate(q.double(), q.double(), pos, pos)[0]
    err = (rq.double() - exact).abs().amax(dim=(0, 1, 3))  # (T,) per position
    rounding = torch.finfo(dtype).eps * exact.abs().max()
    assert bool((err <= 4 * rounding).all()), (err, rounding)
    ang = pos.float()[:, None] * pe.inv_freq  # transformers: float32 angles
    cos = (torch.cat([ang, ang], -1).cos() * pe.attention_scaling).to(dtype)
    sin = (torch.cat([ang, ang], -1).sin() * pe.attention_scaling).to(dtype)
    theirs = q * cos + torch.cat([-q[..., 32:], q[..., :32]], -1) * sin
    their_err = (theirs.double() - exact).abs().amax(dim=(0, 1, 3))
    assert their_err[-1] > 2 * err[-1], (their_err, err)
