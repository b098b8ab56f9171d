"""RoPE module: reference, properties, Hugging Face parity, precision under low-precision dtypes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
import posenc.functional as PF
from tests.reference.rotary import rope as ref_rope


def _qk(B: int = 2, H: int = 4, Hkv: int = 2, T: int = 9, D: int = 16, dtype=torch.float64):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(7)
    return (
        torch.randn(B, H, T, D, generator=g, dtype=dtype),
        torch.randn(B, Hkv, T, D, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("partial", [1.0, 0.5])
def test_rope_matches_float64_reference(layout: str, partial: float) -> None:
    rope = posenc.build("rope", head_dim=16, base=500.0, layout=layout, partial=partial)
    q, k = _qk()
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [3, 9, 27, 81, 243, 729, 2187, 6561, 19683]])
    rq, rk = rope.rotate(q, k, pos, pos)
    kw = {"base": 500.0, "layout": layout, "rotary_dim": int(16 * partial)}
    torch.testing.assert_close(rq, torch.from_numpy(ref_rope(q.numpy(), pos.numpy(), **kw)))
    torch.testing.assert_close(rk, torch.from_numpy(ref_rope(k.numpy(), pos.numpy(), **kw)))
    rq32, _ = rope.rotate(q.float(), k.float(), pos, pos)
    torch.testing.assert_close(rq32, rq.float(), atol=2e-5, rtol=1e-5)


def test_rope_preserves_norm_and_relative_identity() -> None:
    rope = posenc.build("rope", head_dim=32)
    q, k = _qk(B=1, H=1, Hkv=1, T=1, D=32)
    torch.testing.assert_close(
        rope.rotate(q, k, torch.tensor([123]), torch.tensor([77]))[0].norm(), q.norm()
    )
    for m, n in [(0, 5), (10, 15), (1000, 1005), (50_000, 50_005)]:
        rq, rk = rope.rotate(q, k, torch.tensor([m]), torch.tensor([n]))
        _, k_rel = rope.rotate(q, k, torch.tensor([0]), torch.tensor([n - m]))
        torch.testing.assert_close((rq * rk).sum(), (q * k_rel).sum(), atol=1e-10, rtol=1e-10)


def test_layouts_agree_after_permuting_features() -> None:
    """Interleaved pairs (2i, 2i+1) are half pairs (i, i+P) after a fixed feature permutation."""
    D = 16
    perm = torch.tensor([j for i in range(D // 2) for j in (i, i + D // 2)])  # half -> interleaved
    q, k = _qk(D=D)
    pos = torch.arange(q.shape[2])
    hq, hk = posenc.build("rope", head_dim=D, layout="half").rotate(q, k, pos, pos)
    iq, ik = posenc.build("rope", head_dim=D, layout="interleaved").rotate(
        q[..., perm], k[..., perm], pos, pos
    )
    torch.testing.assert_close(iq, hq[..., perm])
    torch.testing.assert_close(ik, hk[..., perm])


def _rotation_error(rope: posenc.PositionalEncoding, dtype: torch.dtype) -> tuple[float, float]:
    """Max error of rotating a low-precision q at positions up to 8192, and of rounding alone."""
    T, D = 8192, 64
    q = torch.randn(1, 1, T, D, dtype=torch.float64)
    pos = torch.arange(T)
    exact = torch.from_numpy(ref_rope_fast(q.numpy(), pos.numpy()))
    low = q.to(dtype)
    out, _ = rope.rotate(low, low, pos, pos)
    assert out.dtype == dtype
    rounding = (exact.to(dtype).double() - exact).abs().max().item()
    return (out.double() - exact).abs().max().item(), rounding


def ref_rope_fast(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Vectorised float64 half-layout RoPE, checked against the loop reference in a test below."""
    D = x.shape[-1]
    theta = pos[:, None] * 10000.0 ** (-np.arange(0, D, 2) / D)
    a, b = x[..., : D // 2], x[..., D // 2 :]
    return np.concatenate(
        [a * np.cos(theta) - b * np.sin(theta), a * np.sin(theta) + b * np.cos(theta)], -1
    )


def test_fast_reference_equals_loop_reference() -> None:
    x = np.random.default_rng(3).standard_normal((1, 1, 5, 8))
    pos = np.array([0, 7, 100, 5000, 8191])
    np.testing.assert_allclose(ref_rope_fast(x, pos), ref_rope(x, pos), atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_rotation_error_is_rounding_only_up_to_8192(dtype: torch.dtype) -> None:
    """bf16/fp16 q and a model cast with .to(dtype): error stays at the output dtype's rounding
    (anchors get 2-7 here: frequencies or positions in bf16)."""
    rope = posenc.build("rope", head_dim=64)
    model = torch.nn.Sequential(rope).to(dtype)  # must not cast inv_freq
    assert rope.inv_freq64.dtype == torch.float64
    err, rounding = _rotation_error(model[0], dtype)
    # input rounding + output rounding: at most ~2 ulps of the values (|x| < ~6)
    assert err <= 3 * rounding, (err, rounding)


def test_half_and_bfloat16_methods_keep_frequencies() -> None:
    for cast in ("half", "bfloat16"):
        model = posenc.TinyTransformer(vocab_size=10, pe="rope", d_model=32)
        getattr(model, cast)()
        assert model.pe.inv_freq64.dtype == torch.float64
        assert model.tok.weight.dtype != torch.float32


def test_autocast_bf16_forward_is_close_to_float32() -> None:
    model = posenc.TinyTransformer(vocab_size=50, pe="rope", d_model=64, max_len=4096)
    idx = torch.randint(0, 50, (1, 64))
    pos = torch.arange(4000, 4064)
    ref = model(idx, pos)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(idx, pos)
    assert (low.float() - ref).abs().max() < 0.05 * ref.abs().max()


def test_cos_sin_built_once_per_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model prepares one position context per forward: a 3-layer forward builds the
    tables once (queries and new keys share them); the next forward builds them anew, also
    for equal positions changed in place since (no memo to go stale)."""
    torch.manual_seed(0)
    model = posenc.TinyTransformer(vocab_size=20, pe="rope", d_model=32, n_heads=2, n_layers=3)
    calls = []
    real = PF.rope_cos_sin
    monkeypatch.setattr(PF, "rope_cos_sin", lambda pos, f: calls.append(pos.shape) or real(pos, f))
    idx, pos = torch.randint(0, 20, (2, 10)), torch.arange(10)
    first = model(idx, pos)
    assert len(calls) == 1
    pos.mul_(2)  # changed in place: the next forward sees the new values
    second = model(idx, pos)
    assert len(calls) == 2
    torch.testing.assert_close(second, model(idx, torch.arange(0, 20, 2)))
    assert not torch.allclose(first, second)  # other distances: other outputs
    rope = model.pe
    q, k = torch.randn(2, 2, 10, 16), torch.randn(2, 2, 10, 16)
    ctx = rope.prepare(pos)
    for _ in range(3):  # three layers' calls with one state: one build
        rope.rotate(q, k, pos, pos, ctx=ctx.new_keys())
    assert len(calls) == 3 + 1  # (3: the three forwards above)
    rope.rotate(q, k, pos, pos, ctx=rope.prepare(pos))  # another forward's state: built again
    assert len(calls) == 3 + 1 + 1


def test_rerotate_decoding_builds_tables_once_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The "rerotate" KV policy rotates the new queries and all cached keys in every layer: two
    position tensors per step (the context's q_pos and k_pos). The tables are built twice per
    step (queries, keys), not per layer, and decoding still equals a fresh forward."""
    torch.manual_seed(0)
    model = posenc.TinyTransformer(
        vocab_size=20, pe="rope", d_model=32, n_heads=2, n_layers=3,
        pe_config={"kv_policy": "rerotate"},
    ).double()  # fmt: skip
    idx = torch.randint(0, 20, (1, 8))
    calls = []
    real = PF.rope_cos_sin
    monkeypatch.setattr(PF, "rope_cos_sin", lambda pos, f: calls.append(pos.shape) or real(pos, f))
    cache = model.new_cache()
    steps = [model(idx[:, :4], cache=cache)]
    first = len(calls)
    for t in range(4, 8):
        steps.append(model(idx[:, t : t + 1], cache=cache))
    assert first <= 2 and len(calls) - first == 2 * 4  # (1,) queries and (1, L) keys per step
    torch.testing.assert_close(torch.cat(steps, 1), model(idx), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        ({"head_dim": 63}, ValueError, "head_dim must be a positive even integer, got 63"),
        ({"head_dim": 64, "partial": 0.0}, ValueError, r"partial .* must be in \(0, 1\], got 0.0"),
        ({"head_dim": 64, "partial": 1.2}, ValueError, r"must be in \(0, 1\], got 1.2"),
        ({"head_dim": 64, "partial": 0.3}, ValueError, "rotates 19 of head_dim=64"),
        ({"head_dim": 64, "layout": "complex"}, ValueError, "layout must be one of"),
        ({"head_dim": 64, "base": -1.0}, ValueError, "base must be a finite number > 0"),
        ({"head_dim": 64.0}, TypeError, "head_dim must be an int, got float"),
    ],
)
def test_rope_bad_config(config: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        posenc.build("rope", **config)


def test_rope_bad_inputs() -> None:
    rope = posenc.build("rope", head_dim=16)
    q, k = _qk(D=16)
    pos = torch.arange(9)
    with pytest.raises(ValueError, match="head_dim=16"):
        rope.rotate(q[..., :8], k[..., :8], pos, pos)
    with pytest.raises(ValueError, match="agree on B and D"):
        rope.rotate(q, k[:1], pos, pos)
    with pytest.raises(ValueError, match=r"q must have shape \(B, H, Tq, D\)"):
        rope.rotate(q[0], k, pos, pos)
    with pytest.raises(TypeError, match="integer tensor"):
        rope.rotate(q, k, pos.float(), pos)
    with pytest.raises(ValueError, match=r"k_pos must have shape \(9,\) or \(2, 9\)"):
        rope.rotate(q, k, pos, torch.arange(5))


@pytest.mark.parametrize(
    ("dtype", "T", "D", "halves"),
    [
        (torch.float32, 4, 64, False),
        (torch.float32, 64, 64, True),
        (torch.float32, 2100, 64, True),
        (torch.bfloat16, 8, 128, False),
        (torch.bfloat16, 4200, 64, True),
        (torch.bfloat16, 64, 128, True),
        (torch.bfloat16, 1100, 128, False),
    ],
)
def test_eager_kernel_both_forms_forward_and_backward(
    dtype: torch.dtype, T: int, D: int, halves: bool
) -> None:
    """The eager half-layout kernel writes x by half-width products or (x up to
    ``SMALL_MAX_BYTES``, 2-byte x with wide half-rows above ``WIDE_HALVES_MAX_BYTES``) by a swap
    copy; both equal the float64 formula in value and in the inverse-rotation gradient."""
    from posenc import functional as PF
    from posenc.kernels import rope_eager

    pos = torch.arange(T) + 5000
    cos, sin = PF.rope_cos_sin(pos, PF.rope_inv_freq(D, xp=PF.torch_xp))  # float64
    x = torch.randn(2, 8, T, D).to(dtype).requires_grad_()
    assert rope_eager.halves_pay(x, D // 2) == halves
    out = rope_eager.apply_rope(x, cos.float(), sin.float())
    g = torch.randn_like(out)
    out.backward(g)
    # the array-API formula on numpy (not the torch kernel under test), float64
    c64, s64 = cos.numpy(), sin.numpy()
    exact = torch.from_numpy(PF.apply_rope(x.detach().double().numpy(), c64, s64))
    exact_grad = torch.from_numpy(PF.apply_rope(g.double().numpy(), c64, -s64))
    unit = 2.0**-24 if dtype == torch.float32 else 2.0**-8
    for got, want, v in ((out, exact, x), (x.grad, exact_grad, g)):
        assert got is not None
        a, b = v.detach().double().chunk(2, dim=-1)
        size = torch.hypot(a, b).repeat(1, 1, 1, 2)  # each pair's length (kept by the rotation)
        err = (got.double() - want).abs()
        assert bool((err <= 4 * unit * size + 1e-6).all()), float((err / (unit * size)).max())
