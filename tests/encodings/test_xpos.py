"""xPos (Sun et al. 2022): reference, torchscale-style anchors, shift invariance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from tests.encodings._helpers import qkv
from tests.reference import families as ref


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scale_base", [512.0, 8.0])
def test_rotate_equals_reference(layout: str, scale_base: float) -> None:
    pe = posenc.build("xpos", head_dim=8, layout=layout, scale_base=scale_base)
    q, k, _ = qkv(B=2, H=2, Tq=5, Tk=5)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 20, 33, 100, 900]])
    got_q, got_k = pe.rotate(q, k, pos, pos)
    for b in range(2):
        for h in range(2):
            for t in range(5):
                n = int(pos[b, t])
                kw = {"scale_base": scale_base, "layout": layout}
                want_q = ref.xpos_vector(q[b, h, t].numpy(), n, 1.0, **kw)
                want_k = ref.xpos_vector(k[b, h, t].numpy(), n, -1.0, **kw)
                np.testing.assert_allclose(got_q[b, h, t].numpy(), want_q, rtol=1e-12, atol=1e-14)
                np.testing.assert_allclose(got_k[b, h, t].numpy(), want_k, rtol=1e-12, atol=1e-14)


def test_logits_depend_only_on_distance_and_decay() -> None:
    pe = posenc.build("xpos", head_dim=16, scale_base=64.0)
    q, k, _ = qkv(B=1, H=1, Tq=6, Tk=6, D=16)
    pos = torch.arange(6)
    logits = [
        (lambda a, b: a @ b.transpose(-2, -1))(*pe.rotate(q, k, pos + s, pos + s)) for s in (0, 300)
    ]
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-9, atol=1e-12)
    rope = posenc.build("rope", head_dim=16)
    rq, rk = rope.rotate(q, k, pos, pos)
    xq, xk = pe.rotate(q, k, pos, pos)
    assert not torch.allclose(xq @ xk.transpose(-2, -1), rq @ rk.transpose(-2, -1))
    # with gamma -> huge, ζ -> 1: no decay, xPos is RoPE
    flat = posenc.build("xpos", head_dim=16, gamma=1e12)
    fq, fk = flat.rotate(q, k, pos, pos)
    torch.testing.assert_close(fq @ fk.transpose(-2, -1), rq @ rk.transpose(-2, -1))


def test_partial_rotation_leaves_the_rest_unscaled() -> None:
    pe = posenc.build("xpos", head_dim=8, partial=0.5)
    q, k, _ = qkv(D=8)
    rq, rk = pe.rotate(q, k, torch.arange(5) + 50, torch.arange(5) + 50)
    torch.testing.assert_close(rq[..., 4:], q[..., 4:])
    torch.testing.assert_close(rk[..., 4:], k[..., 4:])


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"head_dim": 7}, ValueError, "head_dim must be a positive even integer, got 7"),
        ({"scale_base": 0.0}, ValueError, "scale_base must be a finite number > 0, got 0.0"),
        ({"gamma": -0.4}, ValueError, "gamma must be a finite number > 0, got -0.4"),
        ({"layout": "complex"}, ValueError, "layout must be one of"),
        ({"partial": 1.5}, ValueError, "partial .* must be in"),
    ],
)
def test_bad_config_raises(config: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        posenc.build("xpos", **({"head_dim": 8} | config))


def test_wrong_head_dim_raises() -> None:
    pe = posenc.build("xpos", head_dim=8)
    q, k, _ = qkv(D=6)
    with pytest.raises(ValueError, match="head_dim=8 features, got 6"):
        pe.rotate(q, k, torch.arange(5), torch.arange(5))


@pytest.mark.parametrize(("dtype", "safe"), [(torch.float32, 34378), (torch.float16, 2650)])
def test_positions_past_the_dtype_range_raise_instead_of_nan(dtype: torch.dtype, safe: int) -> None:
    pe = posenc.build("xpos", head_dim=64)
    q, k = (torch.randn(1, 2, 3, 64, dtype=dtype) for _ in range(2))
    at_limit = torch.arange(3) + safe - 2  # last position = the largest safe one
    rq, rk = pe.rotate(q, k, at_limit, at_limit)
    assert torch.isfinite(rq.double() @ rk.double().transpose(-1, -2)).all()
    past = at_limit + 1
    with pytest.raises(ValueError, match=f"position {safe + 1} overflows {dtype}"):
        pe.rotate(q, k, past, past)
    with pytest.raises(ValueError, match="largest safe position"):  # keys alone past it
        pe.rotate(q, k, at_limit - safe, past)
