"""RoPE kernels against the formula (``posenc.functional.apply_rope``): the eager kernel (custom
backward, in place), Inductor, and how ``rotate_pair`` and ``RoPE(kernel=...)`` choose one."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from posenc.kernels import rope, rope_cpp, rope_eager, rope_inductor
from posenc.kernels.rope import rotate_pair
from tests.reference.rotary import rope as ref_rope

POS = torch.tensor([0, 3, 100, 2000, 8191])
EAGER = rope_eager.apply_rope
#: The formula and the eager kernel: the same arguments, checks and errors.
APPLY: dict[str, Callable[..., Any]] = {"formula": PF.apply_rope, "eager": EAGER}


def _tables(rot: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = PF.rope_cos_sin(POS, PF.rope_inv_freq(rot, xp=PF.torch_xp))
    return cos.to(dtype), sin.to(dtype)


def _cpp_builds() -> bool:
    return rope_cpp.KERNEL.available()


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rot", [16, 8])
def test_eager_kernel_matches_reference_and_gradcheck(layout: str, rot: int) -> None:
    x = torch.randn(2, 3, 5, 16, dtype=torch.float64, requires_grad=True)
    cos, sin = _tables(rot)
    expected = ref_rope(x.detach().numpy(), POS.numpy(), layout=layout, rotary_dim=rot)
    out = EAGER(x, cos, sin, layout=layout)
    torch.testing.assert_close(out, torch.from_numpy(expected))
    assert torch.autograd.gradcheck(lambda t: EAGER(t, cos, sin, layout=layout), (x,))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_backward_is_the_inverse_rotation(layout: str) -> None:
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64, requires_grad=True)
    cos, sin = _tables(8)
    g = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    EAGER(x, cos, sin, layout=layout).backward(g)
    assert x.grad is not None
    # R(-θ) g: the formula rotating by the negated angle
    torch.testing.assert_close(x.grad, PF.apply_rope(g, cos, -sin, layout=layout))


@pytest.mark.parametrize("how", sorted(APPLY))
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_learnable_tables_get_gradients(how: str, layout: str) -> None:
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    cos, sin = (t.clone().requires_grad_() for t in _tables(8))
    out = APPLY[how](x, cos, sin, layout=layout)
    torch.testing.assert_close(
        out, torch.from_numpy(ref_rope(x.numpy(), POS.numpy(), layout=layout))
    )
    out.sum().backward()
    assert cos.grad is not None and sin.grad is not None and cos.grad.abs().sum() > 0


@pytest.mark.parametrize("how", sorted(APPLY))
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_inplace_equals_out_of_place(how: str, layout: str, dtype: torch.dtype) -> None:
    x = torch.randn(2, 2, 5, 16).to(dtype)
    cos, sin = _tables(12, torch.float32 if dtype != torch.float64 else dtype)
    expected = APPLY[how](x, cos, sin, layout=layout)
    buf = x.clone()
    assert APPLY[how](buf, cos, sin, layout=layout, inplace=True) is buf
    tol = {"atol": 0.02, "rtol": 0} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(buf, expected, **tol)


@pytest.mark.parametrize("how", sorted(APPLY))
def test_inplace_refuses_autograd_numpy_and_shared_rows(how: str) -> None:
    cos, sin = _tables(8)
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="inplace=True is for inference: x requires grad"):
        APPLY[how](x, cos, sin, inplace=True)
    with pytest.raises(ValueError, match="inplace=True needs cos/sin without gradients"):
        APPLY[how](x.detach(), cos.clone().requires_grad_(), sin, inplace=True)
    with pytest.raises(ValueError, match="inplace=True needs x without shared elements"):
        APPLY[how](x.detach().expand(3, 1, 5, 8), cos, sin, inplace=True)
    with pytest.raises(ValueError, match="inplace=True needs torch tensors, got ndarray"):
        PF.apply_rope(x.detach().numpy(), cos.numpy(), sin.numpy(), inplace=True)


def test_bf16_eager_error_is_rounding_level() -> None:
    """The eager kernel rotates bfloat16 in bfloat16 (tables rounded to it, as Hugging Face):
    within 3 roundings of the exact result; the formula computes in float32, then rounds once."""
    x64 = torch.randn(1, 4, 5, 64, dtype=torch.float64)
    cos, sin = _tables(64)
    exact = torch.from_numpy(ref_rope(x64.numpy(), POS.numpy()))
    rounding = (exact.bfloat16().double() - exact).abs().max()
    out = EAGER(x64.bfloat16(), cos.float(), sin.float())
    assert out.dtype == torch.bfloat16
    assert (out.double() - exact).abs().max() <= 3 * rounding
    x16 = x64.bfloat16()
    exact16 = torch.from_numpy(ref_rope(x16.double().numpy(), POS.numpy()))  # of x as given
    out = PF.apply_rope(x16, cos.float(), sin.float())
    assert out.dtype == torch.bfloat16
    unit = 2.0**-8 * exact16.abs()  # one bfloat16 rounding at each value (half an ulp or less)
    assert bool(((out.double() - exact16).abs() <= unit + 1e-6).all())


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inductor_pair_matches_formula(layout: str) -> None:
    q, k = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16)
    cos, sin = _tables(12, torch.float32)
    expected = PF.apply_rope_pair(q, k, cos, sin, cos, sin, layout=layout)
    got = rotate_pair(q, k, cos, sin, cos, sin, layout=layout, kernel="inductor")
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


def test_rope_module_inplace_equals_out_of_place() -> None:
    pe = posenc.build("rope", head_dim=16, layout="interleaved", partial=0.5)
    q, k = torch.randn(2, 4, 6, 16), torch.randn(2, 2, 6, 16)
    pos = torch.arange(100, 106)
    eq, ek = pe.rotate(q, k, pos, pos)
    qb, kb = q.clone(), k.clone()
    with torch.no_grad():
        iq, ik = pe.rotate(qb, kb, pos, pos, inplace=True)
    assert iq is qb and ik is kb
    torch.testing.assert_close(iq, eq)
    torch.testing.assert_close(ik, ek)


@pytest.mark.slow
def test_rope_module_inductor_kernel_matches_eager_with_backward() -> None:
    eager, compiled = (posenc.build("rope", head_dim=16, kernel=n) for n in ("eager", "inductor"))
    q = torch.randn(1, 4, 6, 16, requires_grad=True)
    k = torch.randn(1, 2, 6, 16, requires_grad=True)
    pos = torch.arange(6)
    eq, ek = eager.rotate(q, k, pos, pos)
    (eq.sum() + 2 * ek.sum()).backward()
    eager_grads = q.grad.clone(), k.grad.clone()  # type: ignore[union-attr]
    q.grad = k.grad = None
    cq, ck = compiled.rotate(q, k, pos, pos)
    (cq.sum() + 2 * ck.sum()).backward()
    torch.testing.assert_close(cq, eq)
    torch.testing.assert_close(ck, ek)
    torch.testing.assert_close((q.grad, k.grad), eager_grads)


@pytest.mark.slow
def test_inductor_inplace_pair_matches_eager() -> None:
    q, k = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16)
    cos, sin = _tables(16, torch.float32)
    eq, ek = rotate_pair(q, k, cos, sin, cos, sin)
    qb, kb = q.clone(), k.clone()
    with torch.no_grad():
        iq, ik = rotate_pair(qb, kb, cos, sin, cos, sin, inplace=True, kernel="inductor")
    assert iq.data_ptr() == qb.data_ptr() and ik.data_ptr() == kb.data_ptr()
    torch.testing.assert_close((qb, kb), (eq, ek))


@pytest.mark.parametrize("how", sorted(APPLY))
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
    how: str,
    x_shape: tuple[int, ...],
    cos_shape: tuple[int, ...],
    sin_shape: tuple[int, ...],
    message: str,
) -> None:
    """Never a torch broadcast error, a result larger than x, or a silently broadcast sin."""
    x = torch.randn(x_shape)
    for inplace in (False, True):
        with pytest.raises(ValueError, match=message):
            APPLY[how](x, torch.ones(cos_shape), torch.zeros(sin_shape), inplace=inplace)


def test_tables_first_used_in_inference_mode_then_with_autograd() -> None:
    """The memoised full-width tables of an inference_mode call are inference tensors, which
    autograd cannot save: a later training call with the same cos/sin rebuilds them."""
    cos, sin = _tables(8, torch.float32)
    x = torch.randn(1, 2, 5, 8)
    with torch.inference_mode():
        EAGER(x, cos, sin)
    xg = x.clone().requires_grad_()
    EAGER(xg, cos, sin).backward(torch.ones(1, 2, 5, 8))
    expected = ref_rope(torch.ones(1, 2, 5, 8, dtype=torch.float64).numpy(), -POS.numpy())
    torch.testing.assert_close(xg.grad, torch.from_numpy(expected).float())


@pytest.mark.parametrize("how", sorted(APPLY))
def test_inplace_under_no_grad_with_learnable_tables(how: str) -> None:
    """No graph is recorded under no_grad: tables that require grad do not refuse in place."""
    cos, sin = (t.clone().requires_grad_() for t in _tables(8))
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    buf = x.clone()
    with torch.no_grad():
        assert APPLY[how](buf, cos, sin, inplace=True) is buf
    torch.testing.assert_close(buf, torch.from_numpy(ref_rope(x.numpy(), POS.numpy())))


@pytest.mark.slow
def test_inductor_pair_k_with_its_own_sin_and_float64_gradcheck() -> None:
    """Inductor: k at mirrored positions shares q's cos but not its sin; float64 inputs are
    rotated in float64 (gradcheck), not float32."""
    q, k = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16)
    cos, sin = _tables(16, torch.float32)
    _, ok = rotate_pair(q, k, cos, sin, cos, -sin, kernel="inductor")
    q64 = torch.randn(1, 2, 5, 8, dtype=torch.float64, requires_grad=True)
    k64 = torch.randn(1, 1, 5, 8, dtype=torch.float64, requires_grad=True)
    c64, s64 = _tables(6)
    got = rotate_pair(q64, k64, c64, s64, c64, s64, kernel="inductor")
    ok_grad = torch.autograd.gradcheck(
        lambda a, b: rotate_pair(a, b, c64, s64, c64, s64, kernel="inductor"), (q64, k64)
    )
    expected = ref_rope(k.double().numpy(), -POS.numpy())  # sin(-θ) = -sin θ
    torch.testing.assert_close(ok, torch.from_numpy(expected).float())
    exact = ref_rope(q64.detach().numpy(), POS.numpy(), rotary_dim=6)
    torch.testing.assert_close(got[0], torch.from_numpy(exact), rtol=0, atol=1e-12)
    assert ok_grad


@pytest.mark.slow
def test_inductor_past_its_recompile_limit_takes_the_eager_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rope_inductor, "RECOMPILE_LIMIT", 1)
    monkeypatch.setattr(rope_inductor, "_warned", set())
    got, want = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for T in (2, 3, 4):  # at least two new shapes: the second passes the limit
            q, k = torch.randn(1, 2, T, 16), torch.randn(1, 2, T, 16)
            cos, sin = (t[:T].float() for t in _tables(16))
            got.append(rotate_pair(q, k, cos, sin, cos, sin, kernel="inductor"))
            want.append(rotate_pair(q, k, cos, sin, cos, sin))
    torch.testing.assert_close(got, want)
    limit = [w for w in caught if "new ones take the eager path" in str(w.message)]
    assert len(limit) == 1 and limit[0].category is RuntimeWarning


def test_unknown_kernel_and_triton_without_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    q, (cos, sin) = torch.randn(1, 1, 5, 8), _tables(8, torch.float32)
    with pytest.raises(ValueError, match="kernel must be one of"):
        rotate_pair(q, q, cos, sin, cos, sin, kernel="tvm")
    with pytest.raises(ValueError, match="kernel must be one of"):
        posenc.build("rope", head_dim=8, kernel="tvm")
    real_find_spec = rope.importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "triton" else real_find_spec(name, *args)

    monkeypatch.setattr(rope.importlib.util, "find_spec", find_spec)
    with pytest.raises(RuntimeError, match="kernel='triton' needs Triton"):
        posenc.build("rope", head_dim=8, kernel="triton")


def test_default_kernel_is_eager_with_unchanged_numbers() -> None:
    """RoPE's default kernel is the eager one: bit-equal to it, bfloat16 rotated in bfloat16."""
    pe = posenc.build("rope", head_dim=64)
    assert pe.kernel == "eager" and "kernel='eager'" in repr(pe)
    q, k = torch.randn(2, 4, 5, 64).bfloat16(), torch.randn(2, 2, 5, 64).bfloat16()
    cos, sin = (t.float() for t in _tables(64))
    oq, ok = pe.rotate(q, k, POS, POS)
    torch.testing.assert_close((oq, ok), (EAGER(q, cos, sin), EAGER(k, cos, sin)), rtol=0, atol=0)


def test_auto_chooses_by_device_dtype_and_gradients() -> None:
    """kernel="auto": the C++ kernel for CPU tensors it takes (when it builds), eager for the rest:
    float64, tables that need gradients, q and k of two dtypes, meta tensors."""
    q, (cos, sin) = torch.randn(1, 2, 5, 8), _tables(8, torch.float32)
    cpu = "cpp" if _cpp_builds() else "eager"
    assert rope._choose("auto", q, q, cos, sin, cos, sin) == cpu
    assert rope._choose("auto", q.double(), q.double(), cos, sin, cos, sin) == "eager"
    learnable = cos.clone().requires_grad_()
    assert rope._choose("auto", q, q, learnable, sin, cos, sin) == "eager"
    with torch.no_grad():
        assert rope._choose("auto", q, q, learnable, sin, cos, sin) == cpu
    assert rope._choose("auto", q, q.bfloat16(), cos, sin, cos, sin) == "eager"
    meta = [t.to("meta") for t in (q, cos, sin)]
    assert rope._choose("auto", meta[0], meta[0], *meta[1:], *meta[1:]) == "eager"
    assert rope._choose("inductor", meta[0], meta[0], *meta[1:], *meta[1:]) == "inductor"


@pytest.mark.parametrize("kernel", ["eager", "auto", "cpp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_each_kernel_in_a_module_computes_the_formula(kernel: str, dtype: torch.dtype) -> None:
    """A RoPE module of each kernel against the float64 formula, forward and backward
    (float64 runs eager under every kernel)."""
    if kernel == "cpp" and not _cpp_builds():
        pytest.skip(rope_cpp.KERNEL.error or "no C++ kernel")
    pe = posenc.build("rope", head_dim=32, layout="interleaved", partial=0.75, kernel=kernel)
    q = torch.randn(2, 4, 5, 32).to(dtype).requires_grad_()
    k = torch.randn(2, 2, 5, 32).to(dtype).requires_grad_()
    oq, ok = pe.rotate(q, k, POS, POS)
    g = torch.randn_like(oq)
    torch.autograd.backward([oq, ok], [g, torch.ones_like(ok)])
    c64, s64 = (t.numpy() for t in _tables(24))
    tol = {"atol": 0.05, "rtol": 0.02} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 0}
    for got, x, s in ((oq, q, s64), (ok, k, s64), (q.grad, g, -s64)):
        assert got is not None and got.dtype == dtype
        want = PF.apply_rope(x.detach().double().numpy(), c64, s, layout="interleaved")
        torch.testing.assert_close(got.detach().double(), torch.from_numpy(want), **tol)
    want_k = PF.apply_rope(np.ones(k.shape), c64, -s64, layout="interleaved")
    torch.testing.assert_close(k.grad.double(), torch.from_numpy(want_k), **tol)  # type: ignore[union-attr]


def test_auto_without_a_compiler_warns_once_and_runs_eager(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rope_cpp.KERNEL, "op", None)
    monkeypatch.setattr(rope_cpp.KERNEL, "error", "could not build (no g++)")
    monkeypatch.setattr(rope_cpp.KERNEL, "warned", False)
    q, (cos, sin) = torch.randn(1, 2, 5, 8), _tables(8, torch.float32)
    with pytest.raises(RuntimeError, match="no g\\+\\+"):
        rotate_pair(q, q, cos, sin, cos, sin, kernel="cpp")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [rotate_pair(q, q, cos, sin, cos, sin, kernel="auto") for _ in range(2)]
    notices = [str(w.message) for w in caught]
    assert len(notices) == 1 and "rotates RoPE on CPU with the eager kernel" in notices[0]
    eager = rotate_pair(q, q, cos, sin, cos, sin)
    for pair in got:
        torch.testing.assert_close(pair, eager, rtol=0, atol=0)


@pytest.mark.parametrize("grad", [False, True])
def test_eager_pair_sharing_cos_sin_derives_its_tables_once(
    monkeypatch: pytest.MonkeyPatch, grad: bool
) -> None:
    """rotate_pair(q, k, cos, sin, cos, sin) without a forward's tables: one set of full-width
    tables for q and k (they were built twice), and the same numbers and gradients."""
    made: list[Any] = []
    real = rope_eager.full_tables

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(args[-1] if len(args) > 4 else kwargs.get("tables"))
        return real(*args, **kwargs)

    monkeypatch.setattr(rope_eager, "full_tables", counting)
    cos, sin = _tables(16, torch.float32)
    q = torch.randn(2, 4, len(POS), 16, requires_grad=grad)
    k = torch.randn(2, 2, len(POS), 16, requires_grad=grad)
    oq, ok = rotate_pair(q, k, cos, sin, cos, sin, kernel="eager")
    assert len(made) == 2 and made[0] is made[1] and made[0] is not None
    torch.testing.assert_close(oq, PF.apply_rope(q.detach(), cos, sin))
    torch.testing.assert_close(ok, PF.apply_rope(k.detach(), cos, sin))
    if grad:
        (oq.sum() + 2 * ok.sum()).backward()
        want_q = PF.apply_rope(torch.ones_like(q), cos, -sin)  # R(θ)ᵀ = R(-θ)
        torch.testing.assert_close(q.grad, want_q)
        torch.testing.assert_close(k.grad, 2 * PF.apply_rope(torch.ones_like(k), cos, -sin))
