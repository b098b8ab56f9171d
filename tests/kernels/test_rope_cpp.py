"""The hand-written CPU RoPE kernel (``kernel="cpp"``, ``posenc.kernels.rope_cpp``) against the
formula, through ``rotate_pair`` and ``RoPE(kernel="cpp")``."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF
from posenc.kernels import rope_cpp
from posenc.kernels.rope import rotate_pair
from posenc.kernels.rope_tables import RopeTables
from tests.reference.rotary import rope as ref_rope

LOW = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}
CPP = functools.partial(rotate_pair, kernel="cpp")
EAGER = functools.partial(rotate_pair, kernel="eager")


@pytest.fixture
def cpp() -> None:
    try:
        rope_cpp.load_kernel()
    except RuntimeError as err:  # no C++ toolchain on this machine: nothing to test
        pytest.skip(str(err))


def _tables(pos: torch.Tensor, rot: int) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = PF.rope_cos_sin(pos, PF.rope_inv_freq(rot, xp=PF.torch_xp))
    return cos.float(), sin.float()


def _assert_rounding_level(out: torch.Tensor, exact: np.ndarray) -> None:
    """|out - exact| within one unit of out's dtype at the value's size (plus fp32 arithmetic)."""
    exact_t = torch.from_numpy(exact)
    bound = (exact_t.abs() + 1e-3) * 2 * LOW[out.dtype] + 4e-6
    err = (out.double() - exact_t).abs()
    assert out.dtype in LOW and bool((err <= bound).all()), float((err / bound).max())


@pytest.mark.usefixtures("cpp")
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("D", "rot"), [(128, 128), (96, 96), (64, 64), (80, 80), (64, 24), (6, 6)])
def test_kernel_matches_float64_reference(
    layout: str, dtype: torch.dtype, D: int, rot: int
) -> None:
    """Line-wide and half-line vector steps and the scalar tail (P = 64, 48, 32, 40, 12, 3),
    partial rotary, per-batch positions."""
    q64, k64 = torch.randn(2, 4, 9, D, dtype=torch.float64), torch.randn(2, 2, 9, D)
    q, k = q64.to(dtype), k64.to(dtype)
    pos = torch.randint(0, 5000, (2, 9))
    cos, sin = _tables(pos, rot)  # (B, T, P)
    oq, ok = CPP(q, k, cos[:, None], sin[:, None], cos[:, None], sin[:, None],
                                layout=layout)  # fmt: skip
    for x, out in ((q, oq), (k, ok)):
        exact = ref_rope(x.double().numpy(), pos.numpy(), layout=layout, rotary_dim=rot)
        _assert_rounding_level(out, exact)
        torch.testing.assert_close(out[..., rot:], x[..., rot:], rtol=0, atol=0)


@pytest.mark.usefixtures("cpp")
@pytest.mark.parametrize("per_head", [False, True])
def test_position_blocks_with_ragged_end_and_per_head_tables(per_head: bool) -> None:
    """The kernel walks blocks of 2048 positions (P = 64) and 4 heads side by side when they
    share tables: T = 2100 and 2051 end in partial blocks, 6 heads in groups of 4 and 2; q and
    k differ in length; tables per (batch, head) (one head at a time) or per batch."""
    q = torch.randn(2, 6, 2100, 128, dtype=torch.bfloat16)
    k = torch.randn(2, 6, 2051, 128, dtype=torch.bfloat16)
    pos_q = torch.randint(0, 9000, (2, 6, 2100) if per_head else (2, 1, 2100))
    pos_k = torch.randint(0, 9000, (2, 6, 2051) if per_head else (2, 1, 2051))
    (cq, sq), (ck, sk) = _tables(pos_q, 128), _tables(pos_k, 128)
    oq, ok = CPP(q, k, cq, sq, ck, sk)
    for x, pos, out in ((q, pos_q, oq), (k, pos_k, ok)):
        pos3 = pos.expand(*x.shape[:3])
        exact = np.stack([  # (B, H, T, D): the float64 loop per (batch, head) row of positions
            ref_rope(x[b, h][None, None].double().numpy(), pos3[b, h].numpy())[0, 0]
            for b in range(2) for h in range(6)
        ]).reshape(x.shape)  # fmt: skip
        _assert_rounding_level(out, exact)


@pytest.mark.usefixtures("cpp")
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_outputs_streamed_past_the_cache(layout: str, dtype: torch.dtype) -> None:
    """Outputs of 16 MiB or more (q and k together) take non-temporal stores; blocks of four
    heads and 4096 positions (P = 32): T = 4100 ends in a partial block. Same values, forward and
    backward."""
    q = torch.randn(2, 8, 4100, 64, dtype=dtype, requires_grad=True)  # 8-16 MiB each
    k = torch.randn(2, 8, 4100, 64, dtype=dtype, requires_grad=True)
    pos = torch.arange(4100)
    cos, sin = _tables(pos, 64)
    oq, ok = CPP(q, k, cos, sin, cos, sin, layout=layout)
    c64, s64 = PF.rope_cos_sin(pos, PF.rope_inv_freq(64, xp=PF.torch_xp))
    for x, out in ((q, oq), (k, ok)):  # float64 torch formula: the loop reference is too slow
        exact = PF.apply_rope(x.detach().double(), c64, s64, layout=layout)
        _assert_rounding_level(out.detach(), exact.numpy())
    g = torch.randn_like(oq)
    torch.autograd.backward([oq, ok], [g, g])
    exact_grad = PF.apply_rope(g.double(), c64, -s64, layout=layout)  # R(θ)^T g = R(-θ) g
    _assert_rounding_level(q.grad, exact_grad.numpy())


@pytest.mark.usefixtures("cpp")
def test_low_precision_tables_converted_once_per_forward() -> None:
    """bf16 cos/sin (Hugging Face's format for bf16 models) reach the kernel as float32 copies,
    made once per forward's ``RopeTables`` and reused by later layers and the backward; without
    them each call converts afresh, so a table changed in place is followed."""
    pos = torch.arange(16)
    c64, s64 = PF.rope_cos_sin(pos, PF.rope_inv_freq(32, xp=PF.torch_xp))
    cos, sin = c64.to(torch.bfloat16), s64.to(torch.bfloat16)
    q = torch.randn(1, 2, 16, 32, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, 2, 16, 32, dtype=torch.bfloat16)
    tables = RopeTables(cos, sin)
    rotate = functools.partial(rotate_pair, kernel="cpp", prepared=(tables, tables))
    first = rotate(q, k, cos, sin, cos, sin)[0]
    made = tables._float32  # what the call converted: cos and sin, once
    assert made is not None and all(copy.dtype == torch.float32 for copy in made)
    assert made[0] is not cos and made[1] is not sin
    rotate(q.detach(), k, cos, sin, cos, sin)  # another layer: nothing converted again
    first.backward(torch.ones_like(first))
    assert all(a is b for a, b in zip(tables.float32(), made, strict=True))
    with torch.no_grad():
        sin.neg_()  # R(-θ): changed in place; a new forward (no tables) follows it
    oq, ok = CPP(q.detach(), k, cos, sin, cos, sin)
    for x, out in ((q.detach(), oq), (k, ok)):  # float64 formula with the tables as given
        exact = PF.apply_rope(x.double(), cos.double(), sin.double())
        _assert_rounding_level(out, exact.numpy())
    exact_grad = PF.apply_rope(torch.ones(1, 2, 16, 32).double(), cos.double(), sin.double())
    _assert_rounding_level(q.grad, exact_grad.numpy())  # first call's R(-θ): the negated sin


@pytest.mark.usefixtures("cpp")
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_strided_and_3d_inputs(layout: str) -> None:
    """q as a (B, T, H, D) -> (B, H, T, D) transpose view, and 3-D (H, T, D) keys."""
    pos = torch.arange(40, 47)
    cos, sin = _tables(pos, 32)
    q = torch.randn(2, 7, 4, 32).transpose(1, 2)  # (B, H, T, D), not contiguous
    k = torch.randn(3, 7, 32)
    oq, ok = CPP(q, k, cos, sin, cos, sin, layout=layout)
    _assert_rounding_level(oq, ref_rope(q.double().numpy(), pos.numpy(), layout=layout))
    _assert_rounding_level(ok, ref_rope(k[None].double().numpy(), pos.numpy(), layout=layout)[0])


@pytest.mark.usefixtures("cpp")
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_is_inverse_rotation_and_matches_eager(layout: str, dtype: torch.dtype) -> None:
    pos = torch.arange(300, 311)
    cos, sin = _tables(pos, 48)
    q = torch.randn(2, 4, 11, 64).to(dtype).requires_grad_()
    k = torch.randn(2, 1, 11, 64).to(dtype).requires_grad_()
    gq, gk = torch.randn(2, 4, 11, 64).to(dtype), torch.randn(2, 1, 11, 64).to(dtype)
    torch.autograd.backward(CPP(q, k, cos, sin, cos, sin, layout=layout), [gq, gk])
    for x, g in ((q, gq), (k, gk)):
        assert x.grad is not None and x.grad.dtype == dtype
        # the gradient is R(-θ) g: the reference rotation at negated positions
        exact = ref_rope(g.double().numpy(), -pos.numpy(), layout=layout, rotary_dim=48)
        _assert_rounding_level(x.grad, exact)


@pytest.mark.usefixtures("cpp")
def test_backward_with_one_output_used() -> None:
    pos = torch.arange(5)
    cos, sin = _tables(pos, 16)
    q = torch.randn(1, 2, 5, 16, requires_grad=True)
    k = torch.randn(1, 2, 5, 16, requires_grad=True)
    oq, _ = CPP(q, k, cos, sin, cos, sin)
    oq.sum().backward()
    assert q.grad is not None and k.grad is None


@pytest.mark.usefixtures("cpp")
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_inplace_writes_into_q_and_k(layout: str, dtype: torch.dtype) -> None:
    pos = torch.arange(1000, 1013)
    cos, sin = _tables(pos, 40)
    q, k = torch.randn(1, 4, 13, 40).to(dtype), torch.randn(1, 2, 13, 40).to(dtype)
    eq, ek = CPP(q, k, cos, sin, cos, sin, layout=layout)
    qb, kb = q.clone(), k.clone()
    with torch.no_grad():
        iq, ik = CPP(qb, kb, cos, sin, cos, sin, layout=layout, inplace=True)
    assert iq is qb and ik is kb
    torch.testing.assert_close((qb, kb), (eq, ek), rtol=0, atol=0)


@pytest.mark.usefixtures("cpp")
def test_nan_and_inf_propagate() -> None:
    pos = torch.arange(3)
    cos, sin = _tables(pos, 32)
    for dtype in (torch.bfloat16, torch.float32):
        q = torch.ones(1, 1, 3, 32, dtype=dtype)
        q[0, 0, 1, 0] = float("nan")
        q[0, 0, 2, 5] = float("inf")
        oq, _ = CPP(q, q.clone(), cos, sin, cos, sin)
        assert bool(oq[0, 0, 1, [0, 16]].isnan().all())  # the NaN's pair
        assert bool(oq[0, 0, 0].isfinite().all()) and not bool(oq[0, 0, 2].isfinite().all())


@pytest.mark.usefixtures("cpp")
def test_rope_module_fast_path_matches_eager_with_backward() -> None:
    fast, eager = (
        posenc.build("rope", head_dim=32, layout="interleaved", partial=0.75, kernel=kernel)
        for kernel in ("cpp", "eager")
    )
    q = torch.randn(2, 4, 6, 32, requires_grad=True)
    k = torch.randn(2, 2, 6, 32, requires_grad=True)
    pos = torch.arange(6)
    fq, fk = fast.rotate(q, k, pos, pos)
    (fq.sum() + 2 * fk.sum()).backward()
    fast_grads = q.grad.clone(), k.grad.clone()  # type: ignore[union-attr]
    q.grad = k.grad = None
    eq, ek = eager.rotate(q, k, pos, pos)
    (eq.sum() + 2 * ek.sum()).backward()
    torch.testing.assert_close((fq, fk), (eq, ek))
    torch.testing.assert_close(fast_grads, (q.grad, k.grad))


def test_supports_only_what_the_kernel_takes() -> None:
    cos = torch.zeros(5, 8)
    assert rope_cpp.supports(torch.zeros(2, 3, 5, 16), cos)
    assert not rope_cpp.supports(torch.zeros(2, 3, 5, 16, dtype=torch.float64), cos)
    assert not rope_cpp.supports(torch.zeros(2, 3, 16, 5).transpose(-1, -2), cos)
    assert not rope_cpp.supports(torch.zeros(1, 2, 3, 5, 16), cos)  # 5-D
    assert not rope_cpp.supports(torch.zeros(2, 3, 5, 16), torch.zeros(4, 2, 1, 5, 8))


@pytest.mark.usefixtures("cpp")
def test_inputs_the_kernel_does_not_take_run_eager() -> None:
    """float64 and 5-D tensors are rotated by the eager kernel under kernel="cpp"."""
    pos = torch.arange(5)
    c64, s64 = PF.rope_cos_sin(pos, PF.rope_inv_freq(8, xp=PF.torch_xp))
    for q in (torch.randn(1, 2, 5, 8, dtype=torch.float64), torch.randn(2, 1, 2, 5, 8)):
        c, s = c64.to(q.dtype), s64.to(q.dtype)
        torch.testing.assert_close(CPP(q, q, c, s, c, s), EAGER(q, q, c, s, c, s), rtol=0, atol=0)


def test_failed_build_is_a_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rope_cpp.KERNEL, "op", None)
    monkeypatch.setattr(rope_cpp.KERNEL, "error", "could not build (no g++)")
    q, (cos, sin) = torch.randn(1, 1, 5, 8), _tables(torch.arange(5), 8)
    pe = posenc.build("rope", head_dim=8, kernel="cpp")  # built on first use, not here
    with pytest.raises(RuntimeError, match="no g\\+\\+"):
        CPP(q, q, cos, sin, cos, sin)
    with pytest.raises(RuntimeError, match="no g\\+\\+"):
        pe.rotate(q, q, torch.arange(5), torch.arange(5))


@pytest.mark.usefixtures("cpp")
def test_sin_alone_requiring_grad_gets_its_gradient() -> None:
    """Learnable sin with a constant cos takes the autograd path, as in eager."""
    pos = torch.arange(5)
    cos, sin = _tables(pos, 8)
    sin = sin.clone().requires_grad_()
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 1, 5, 8)
    oq, ok = CPP(q, k, cos, sin, cos, sin)
    (oq.sum() + ok.sum()).backward()
    fast = sin.grad
    sin.grad = None
    eq, ek = PF.apply_rope_pair(q, k, cos, sin, cos, sin)
    (eq.sum() + ek.sum()).backward()
    assert fast is not None
    torch.testing.assert_close(fast, sin.grad)


@pytest.mark.usefixtures("cpp")
def test_fast_path_refuses_what_eager_refuses() -> None:
    """Layout, tables that do not fit q/k, and in place on rows sharing memory (an expanded
    tensor would be rotated once per row sharing it): ValueError, never a silent result."""
    pos = torch.arange(5)
    cos, sin = _tables(pos, 8)
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 1, 5, 8)
    with pytest.raises(ValueError, match="layout must be one of"):
        CPP(q, k, cos, sin, cos, sin, layout="neox")
    with pytest.raises(ValueError, match="cos/sin have 4 pairs but k has only 6 features"):
        CPP(q, k[..., :6], cos, sin, cos, sin)
    with pytest.raises(ValueError, match="cos and sin must have one shape"):
        CPP(q, k, cos, sin[:1], cos, sin)
    with pytest.raises(ValueError, match=r"do not broadcast to q of shape \(2, 5, 8\)"):
        CPP(q[0], k, cos.expand(3, 1, 5, 4), sin.expand(3, 1, 5, 4), cos, sin)
    base = torch.randn(1, 1, 5, 8)
    with torch.no_grad(), pytest.raises(ValueError, match="inplace=True needs q without shared"):
        CPP(base.expand(2, 3, 5, 8), k, cos, sin, cos, sin, inplace=True)


@pytest.mark.usefixtures("cpp")
def test_double_backward_is_a_clear_error() -> None:
    """The kernel's backward records no graph: differentiating it again raises instead of
    dropping the second-order term (a gradient penalty) or failing inside the kernel."""
    pos = torch.arange(5)
    cos, sin = _tables(pos, 8)
    q, k = torch.randn(1, 2, 5, 8, requires_grad=True), torch.randn(1, 1, 5, 8)
    oq, _ = CPP(q, k, cos, sin, cos, sin)
    (gq,) = torch.autograd.grad((oq**2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        ((oq**2).sum() + (gq**2).sum()).backward()
