"""The rotary modules as users call them: RoPE and xPos under inference_mode, integer inputs,
xPos's range check for negative and query-less positions (torchtune parity: tests/anchors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
import posenc.functional as PF
from posenc.kernels import rope_cpp
from posenc.kernels.rope import rotate_pair
from tests.reference import families as ref


def test_rope_cos_sin_with_positions_made_in_inference_mode() -> None:
    """Positions created under inference_mode are inference tensors, which have no version
    counter: the memo must not read one (it raised "Inference tensors do not track version
    counter")."""
    rope = posenc.build("rope", head_dim=8)
    inv = PF.rope_inv_freq(8, xp=PF.torch_xp)
    with torch.inference_mode():
        pos = torch.arange(5) + 3
        cos, sin = rope.cos_sin(pos)
        again, _ = rope.cos_sin(pos)
        pos.add_(1)  # in place, untracked: must not be served the old tables
        moved, _ = rope.cos_sin(pos)
    torch.testing.assert_close(cos, PF.rope_cos_sin(torch.arange(5) + 3, inv)[0].float())
    torch.testing.assert_close(sin, PF.rope_cos_sin(torch.arange(5) + 3, inv)[1].float())
    torch.testing.assert_close(again, cos)
    torch.testing.assert_close(moved, PF.rope_cos_sin(torch.arange(5) + 4, inv)[0].float())


def test_rope_tables_from_inference_mode_not_served_to_autograd() -> None:
    """A call under inference_mode memoised its (inference-tensor) tables on ordinary positions;
    the same positions in a training step got those tables back, which autograd cannot use."""
    rope = posenc.build("rope", head_dim=8)
    pos = torch.arange(4)
    with torch.inference_mode():
        inside, _ = rope.cos_sin(pos)
    assert inside.is_inference()
    outside, _ = rope.cos_sin(pos)
    assert not outside.is_inference()
    torch.testing.assert_close(outside, inside.clone())


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_rotate_under_inference_mode(name: str) -> None:
    """Tables made under inference_mode have no version counter: reading it crashed."""
    pe = posenc.build(name, head_dim=8)
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 1, 4, 8)
    want = pe.rotate(q, k, torch.arange(4), torch.arange(4))
    with torch.inference_mode():
        got = pe.rotate(q, k, torch.arange(4), torch.arange(4))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("name", posenc.names(axes=1))
def test_every_encoding_decodes_under_inference_mode(name: str) -> None:
    """A model under inference_mode (a full forward, then a prefill and cached steps) gives
    no_grad's logits; rope, xpos and randomized used to crash on inference tensors' missing
    version counter."""
    torch.manual_seed(0)
    model = posenc.TinyTransformer(vocab_size=11, pe=name, d_model=16, n_heads=2, n_layers=2)
    model.eval()
    idx = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        want = model(idx)
    with torch.inference_mode():
        torch.testing.assert_close(model(idx), want)
        cache = model.new_cache()
        steps = [model(idx[:, :5], cache=cache)]
        steps += [model(idx[:, t : t + 1], cache=cache) for t in range(5, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", ["eager", "cpp"])
def test_inference_tables_changed_in_place_are_not_served_stale(kernel: str) -> None:
    """Inference tensors keep no version counter, so a table refilled in place (a static
    decode buffer) must not be recognised by identity: every call reads the current values."""
    if kernel == "cpp" and not rope_cpp.KERNEL.available():
        pytest.skip(rope_cpp.KERNEL.error or "no C++ kernel")

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return rotate_pair(x, x, cos, sin, cos, sin, kernel=kernel)[0]

    x = torch.randn(1, 2, 3, 8, dtype=torch.bfloat16)
    inv_freq = PF.rope_inv_freq(8, xp=PF.torch_xp)
    c2, s2 = PF.rope_cos_sin(torch.arange(5, 8), inv_freq)  # float64: converted, memo-able
    with torch.inference_mode():
        cos, sin = PF.rope_cos_sin(torch.arange(3), inv_freq)
        first = rotate(x, cos, sin)
        cos.copy_(c2)
        sin.copy_(s2)
        second = rotate(x, cos, sin)
    want = rotate(x, c2, s2)
    assert not torch.equal(first, second)
    torch.testing.assert_close(second, want)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_apply_rope_refuses_integer_x(dtype: torch.dtype) -> None:
    """Rotated integers cannot be stored back in x's dtype: torch raised an opaque "result type
    Float can't be cast" and NumPy truncated the rotation silently ([0, 1, ..] -> [-5, 7, ..])."""
    cos, sin = PF.rope_cos_sin(np.arange(3), PF.rope_inv_freq(8))
    x = np.arange(24).reshape(3, 8)
    with pytest.raises(TypeError, match="x must have a real floating dtype, got int64"):
        PF.apply_rope(x, cos, sin)
    xt = torch.ones(3, 8, dtype=dtype)
    with pytest.raises(TypeError, match=f"x must have a real floating dtype, got {dtype}"):
        PF.apply_rope(xt, torch.from_numpy(cos), torch.from_numpy(sin))
    for name in ("rope", "xpos"):
        pe = posenc.build(name, head_dim=8)
        with pytest.raises(TypeError, match=f"must have a real floating dtype, got {dtype}"):
            pe.rotate(xt[None, None], xt[None, None], torch.arange(3), torch.arange(3))


def test_xpos_negative_query_positions_raise_instead_of_nan() -> None:
    """A query at n is scaled by ζ^(n/512): at n = -40000 that overflows float32 (as a key at
    +40000 does), and the scores were NaN without a word."""
    pe = posenc.build("xpos", head_dim=64)
    q, k = torch.randn(1, 1, 1, 64), torch.randn(1, 1, 1, 64)
    limit = PF.xpos_max_position(64, torch.finfo(torch.float32).max)
    rq, rk = pe.rotate(q, k, torch.tensor([-limit]), torch.tensor([0]))  # at the limit: finite
    assert torch.isfinite(rq).all() and torch.isfinite(rk).all()
    with pytest.raises(ValueError, match=f"position {-limit - 1} overflows torch.float32"):
        pe.rotate(q, k, torch.tensor([-limit - 1]), torch.tensor([0]))
    with pytest.raises(ValueError, match="position -40000 overflows"):
        pe.rotate(q, k, torch.tensor([-40000]), torch.tensor([0]))


def test_xpos_keys_past_the_range_raise_without_queries() -> None:
    """Keys alone (Tq = 0, e.g. a prefill that only fills a cache) were not checked: inf keys."""
    pe = posenc.build("xpos", head_dim=64)
    q, k = torch.randn(1, 1, 0, 64), torch.randn(1, 1, 1, 64)
    with pytest.raises(ValueError, match="position 40000 overflows"):
        pe.rotate(q, k, torch.arange(0), torch.tensor([40000]))


def test_xpos_per_row_positions_and_gqa_match_reference() -> None:
    """Different positions per row, fewer key heads, q and k at different positions."""
    pe = posenc.build("xpos", head_dim=8, layout="interleaved", partial=0.5, scale_base=32.0)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 2, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 3, 8, generator=g, dtype=torch.float64)
    q_pos, k_pos = torch.tensor([[5, 6], [40, 41]]), torch.tensor([[4, 5, 6], [0, 20, 41]])
    rq, rk = pe.rotate(q, k, q_pos, k_pos)
    kw = {"scale_base": 32.0, "layout": "interleaved"}
    for x, got, pos, sign in ((q, rq, q_pos, 1.0), (k, rk, k_pos, -1.0)):
        for b in range(2):
            for h in range(x.shape[1]):
                for t in range(x.shape[2]):
                    v = x[b, h, t].numpy()
                    want = ref.xpos_vector(v[:4], int(pos[b, t]), sign, **kw)
                    np.testing.assert_allclose(got[b, h, t, :4].numpy(), want, rtol=1e-12)
                    np.testing.assert_array_equal(got[b, h, t, 4:].numpy(), v[4:])
