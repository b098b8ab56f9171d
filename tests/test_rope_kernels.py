"""The torch paths behind apply_rope: eager kernel, custom backward, in place, Inductor."""

from __future__ import annotations

import pytest
import torch

from posenc import functional as PF
from tests.reference.rotary import rope as ref_rope

POS = torch.tensor([0, 3, 100, 2000, 8191])


def _tables(rot: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = PF.rope_cos_sin(POS, PF.rope_inv_freq(rot, xp=PF.torch_xp))
    return cos.to(dtype), sin.to(dtype)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rot", [16, 8])
def test_eager_kernel_matches_reference_and_gradcheck(layout: str, rot: int) -> None:
    x = torch.randn(2, 3, 5, 16, dtype=torch.float64, requires_grad=True)
    cos, sin = _tables(rot)
    expected = ref_rope(x.detach().numpy(), POS.numpy(), layout=layout, rotary_dim=rot)
    out = PF.apply_rope(x, cos, sin, layout=layout)
    torch.testing.assert_close(out, torch.from_numpy(expected))
    assert torch.autograd.gradcheck(lambda t: PF.apply_rope(t, cos, sin, layout=layout), (x,))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_backward_is_the_inverse_rotation(layout: str) -> None:
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64, requires_grad=True)
    cos, sin = _tables(8)
    g = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    PF.apply_rope(x, cos, sin, layout=layout).backward(g)
    assert x.grad is not None
    # R(-θ) g: rotate by the negated angle through the public function
    torch.testing.assert_close(x.grad, PF.apply_rope(g, cos, -sin, layout=layout))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_learnable_tables_get_gradients(layout: str) -> None:
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    cos, sin = (t.clone().requires_grad_() for t in _tables(8))
    out = PF.apply_rope(x, cos, sin, layout=layout)
    torch.testing.assert_close(
        out, torch.from_numpy(ref_rope(x.numpy(), POS.numpy(), layout=layout))
    )
    out.sum().backward()
    assert cos.grad is not None and sin.grad is not None and cos.grad.abs().sum() > 0


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_inplace_equals_out_of_place(layout: str, dtype: torch.dtype) -> None:
    x = torch.randn(2, 2, 5, 16).to(dtype)
    cos, sin = _tables(12, torch.float32 if dtype != torch.float64 else dtype)
    expected = PF.apply_rope(x, cos, sin, layout=layout)
    buf = x.clone()
    assert PF.apply_rope(buf, cos, sin, layout=layout, inplace=True) is buf
    tol = {"atol": 0.02, "rtol": 0} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(buf, expected, **tol)


def test_inplace_refuses_autograd_and_numpy() -> None:
    cos, sin = _tables(8)
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="inplace=True is for inference"):
        PF.apply_rope(x, cos, sin, inplace=True)
    with pytest.raises(ValueError, match="inplace=True needs torch tensors, got ndarray"):
        PF.apply_rope(x.detach().numpy(), cos.numpy(), sin.numpy(), inplace=True)


def test_bf16_eager_error_is_rounding_level() -> None:
    x64 = torch.randn(1, 4, 5, 64, dtype=torch.float64)
    cos, sin = _tables(64)
    exact = torch.from_numpy(ref_rope(x64.numpy(), POS.numpy()))
    out = PF.apply_rope(x64.bfloat16(), cos.float(), sin.float())
    rounding = (exact.bfloat16().double() - exact).abs().max()
    assert out.dtype == torch.bfloat16
    assert (out.double() - exact).abs().max() <= 3 * rounding


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_compiled_pair_matches_eager(layout: str) -> None:
    q, k = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16)
    cos, sin = _tables(12, torch.float32)
    expected = PF.apply_rope_pair(q, k, cos, sin, cos, sin, layout=layout)
    PF.enable_compiled_rope(True, backend="inductor")
    try:
        got = PF.apply_rope_pair(q, k, cos, sin, cos, sin, layout=layout)
    finally:
        PF.enable_compiled_rope(False)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


def test_rope_module_inplace_equals_out_of_place() -> None:
    import posenc

    rope = posenc.build("rope", head_dim=16, layout="interleaved", partial=0.5)
    q, k = torch.randn(2, 4, 6, 16), torch.randn(2, 2, 6, 16)
    pos = torch.arange(100, 106)
    eq, ek = rope.rotate(q, k, pos, pos)
    qb, kb = q.clone(), k.clone()
    with torch.no_grad():
        iq, ik = rope.rotate(qb, kb, pos, pos, inplace=True)
    assert iq is qb and ik is kb
    torch.testing.assert_close(iq, eq)
    torch.testing.assert_close(ik, ek)


@pytest.mark.slow
def test_rope_module_compiled_path_matches_eager_with_backward() -> None:
    import posenc

    rope = posenc.build("rope", head_dim=16)
    q = torch.randn(1, 4, 6, 16, requires_grad=True)
    k = torch.randn(1, 2, 6, 16, requires_grad=True)
    pos = torch.arange(6)
    eq, ek = rope.rotate(q, k, pos, pos)
    (eq.sum() + 2 * ek.sum()).backward()
    eager_grads = q.grad.clone(), k.grad.clone()  # type: ignore[union-attr]
    q.grad = k.grad = None
    PF.enable_compiled_rope(True, backend="inductor")
    try:
        cq, ck = rope.rotate(q, k, pos, pos)
        (cq.sum() + 2 * ck.sum()).backward()
    finally:
        PF.enable_compiled_rope(False)
    torch.testing.assert_close(cq, eq)
    torch.testing.assert_close(ck, ek)
    torch.testing.assert_close((q.grad, k.grad), eager_grads)


@pytest.mark.slow
def test_compiled_inplace_pair_matches_eager() -> None:
    q, k = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16)
    cos, sin = _tables(16, torch.float32)
    eq, ek = PF.apply_rope_pair(q, k, cos, sin, cos, sin)
    qb, kb = q.clone(), k.clone()
    PF.enable_compiled_rope(True, backend="inductor")
    try:
        with torch.no_grad():
            iq, ik = PF.apply_rope_pair(qb, kb, cos, sin, cos, sin, inplace=True)
    finally:
        PF.enable_compiled_rope(False)
    assert iq.data_ptr() == qb.data_ptr() and ik.data_ptr() == kb.data_ptr()
    torch.testing.assert_close((qb, kb), (eq, ek))


@pytest.mark.parametrize(
    ("x_shape", "cos_shape", "sin_shape", "message"),
    [
        ((2, 5, 8), (5, 4), (1, 4), r"cos and sin must have one shape, got \(5, 4\) and \(1, 4\)"),
        ((2, 5, 8), (5, 4), (5, 3), "cos and sin must have one shape"),
        ((2, 5, 8), (3, 1, 5, 4), (3, 1, 5, 4), r"do not broadcast to x of shape \(2, 5, 8\)"),
        ((1, 5, 8), (3, 5, 4), (3, 5, 4), r"\(3, 5, 4\) do not broadcast"),
        ((2, 5, 8), (3, 4), (3, 4), r"\(3, 4\) do not broadcast"),  # T = 3 against 5
        ((2, 5, 8), (), (), r"\(\) do not broadcast"),
    ],
)
def test_tables_not_fitting_x_are_value_errors(
    x_shape: tuple[int, ...], cos_shape: tuple[int, ...], sin_shape: tuple[int, ...], message: str
) -> None:
    """Never a torch broadcast error, a result larger than x, or a silently broadcast sin."""
    x = torch.randn(x_shape)
    for inplace in (False, True):
        with pytest.raises(ValueError, match=message):
            PF.apply_rope(x, torch.ones(cos_shape), torch.zeros(sin_shape), inplace=inplace)


def test_tables_first_used_in_inference_mode_then_with_autograd() -> None:
    """The memoised full-width tables of an inference_mode call are inference tensors, which
    autograd cannot save: a later training call with the same cos/sin rebuilds them."""
    cos, sin = _tables(8, torch.float32)
    x = torch.randn(1, 2, 5, 8)
    with torch.inference_mode():
        PF.apply_rope(x, cos, sin)
    xg = x.clone().requires_grad_()
    PF.apply_rope(xg, cos, sin).backward(torch.ones(1, 2, 5, 8))
    expected = ref_rope(torch.ones(1, 2, 5, 8, dtype=torch.float64).numpy(), -POS.numpy())
    torch.testing.assert_close(xg.grad, torch.from_numpy(expected).float())


def test_inplace_under_no_grad_with_learnable_tables() -> None:
    """No graph is recorded under no_grad: tables that require grad do not refuse in place."""
    cos, sin = (t.clone().requires_grad_() for t in _tables(8))
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    buf = x.clone()
    with torch.no_grad():
        assert PF.apply_rope(buf, cos, sin, inplace=True) is buf
    torch.testing.assert_close(buf, torch.from_numpy(ref_rope(x.numpy(), POS.numpy())))


@pytest.mark.slow
def test_compiled_pair_k_with_its_own_sin_and_float64_gradcheck() -> None:
    """Inductor: k at mirrored positions shares q's cos but not its sin; float64 inputs are
    rotated in float64 (gradcheck), not float32."""
    q, k = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16)
    cos, sin = _tables(16, torch.float32)
    PF.enable_compiled_rope(True, backend="inductor")
    try:
        _, ok = PF.apply_rope_pair(q, k, cos, sin, cos, -sin)
        q64 = torch.randn(1, 2, 5, 8, dtype=torch.float64, requires_grad=True)
        k64 = torch.randn(1, 1, 5, 8, dtype=torch.float64, requires_grad=True)
        c64, s64 = _tables(6)
        got = PF.apply_rope_pair(q64, k64, c64, s64, c64, s64)
        ok_grad = torch.autograd.gradcheck(
            lambda a, b: PF.apply_rope_pair(a, b, c64, s64, c64, s64), (q64, k64)
        )
    finally:
        PF.enable_compiled_rope(False)
    expected = ref_rope(k.double().numpy(), -POS.numpy())  # sin(-θ) = -sin θ
    torch.testing.assert_close(ok, torch.from_numpy(expected).float())
    exact = ref_rope(q64.detach().numpy(), POS.numpy(), rotary_dim=6)
    torch.testing.assert_close(got[0], torch.from_numpy(exact), rtol=0, atol=1e-12)
    assert ok_grad


@pytest.mark.slow
def test_compiled_past_its_recompile_limit_takes_the_eager_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import warnings

    from posenc.functional import _rope_compiled

    monkeypatch.setattr(_rope_compiled, "RECOMPILE_LIMIT", 1)
    monkeypatch.setitem(_rope_compiled._state, "warned_limit", False)
    got, want = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for T in (2, 3, 4):  # at least two new shapes: the second passes the limit
            q, k = torch.randn(1, 2, T, 16), torch.randn(1, 2, T, 16)
            cos, sin = (t[:T].float() for t in _tables(16))
            PF.enable_compiled_rope(True, backend="inductor")
            try:
                got.append(PF.apply_rope_pair(q, k, cos, sin, cos, sin))
            finally:
                PF.enable_compiled_rope(False)
            want.append(PF.apply_rope_pair(q, k, cos, sin, cos, sin))
    torch.testing.assert_close(got, want)
    limit = [w for w in caught if "new ones take the eager path" in str(w.message)]
    assert len(limit) == 1 and limit[0].category is RuntimeWarning
