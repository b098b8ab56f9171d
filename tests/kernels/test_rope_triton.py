"""posenc's Triton RoPE kernel (``kernel="triton"``, ``posenc.kernels.rope_triton``), run on CPU
in Triton's interpreter (no GPU needed).

Skipped when Triton is not installed (``pip install -c constraints.txt -e ".[triton]"``; CI
installs it for this file). Speed is a GPU matter (``posenc bench --device cuda``), not tested.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported: kernels on CPU

import functools

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

import posenc
from posenc import functional as PF
from posenc.kernels.rope import rotate_pair
from tests.reference.rotary import rope_vector

LOW = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}


TRITON = functools.partial(rotate_pair, kernel="triton")


@pytest.fixture
def triton_backend() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET is not 1: these tests run the kernel on CPU tensors")


def _exact(x: torch.Tensor, pos: torch.Tensor, rot: int, layout: str) -> np.ndarray:
    """float64 loop reference per row; pos broadcast to x's (B, H, T)."""
    xs, ps = x.double().numpy(), pos.expand(*x.shape[:-1]).numpy()
    out = np.empty(xs.shape)
    for idx in np.ndindex(*xs.shape[:-1]):
        out[idx] = rope_vector(xs[idx], int(ps[idx]), layout=layout, rotary_dim=rot)
    return out


def _assert_rounding_level(out: torch.Tensor, exact: np.ndarray) -> None:
    exact_t = torch.from_numpy(exact)
    bound = (exact_t.abs() + 1e-3) * 2 * LOW[out.dtype] + 4e-6
    err = (out.double() - exact_t).abs()
    assert bool((err <= bound).all()), float((err / bound).max())


def _tables(pos: torch.Tensor, rot: int) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = PF.rope_cos_sin(pos, PF.rope_inv_freq(rot, xp=PF.torch_xp))
    return cos.float(), sin.float()


@pytest.mark.usefixtures("triton_backend")
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("D", "rot"), [(64, 64), (40, 24), (6, 6)])
def test_kernel_matches_float64_reference(
    layout: str, dtype: torch.dtype, D: int, rot: int
) -> None:
    """One launch for q and k of different lengths and head counts, position ids per batch
    (packing, decode), partial rotary (features past ``rot`` copied)."""
    q, k = torch.randn(2, 4, 9, D).to(dtype), torch.randn(2, 2, 5, D).to(dtype)
    pos_q, pos_k = torch.randint(0, 5000, (2, 1, 9)), torch.randint(0, 5000, (2, 1, 5))
    (cq, sq), (ck, sk) = _tables(pos_q, rot), _tables(pos_k, rot)
    oq, ok = TRITON(q, k, cq, sq, ck, sk, layout=layout)
    for x, pos, out in ((q, pos_q, oq), (k, pos_k, ok)):
        _assert_rounding_level(out, _exact(x, pos, rot, layout))
        torch.testing.assert_close(out[..., rot:], x[..., rot:], rtol=0, atol=0)


@pytest.mark.usefixtures("triton_backend")
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_backward_is_the_inverse_rotation(layout: str) -> None:
    pos = torch.arange(300, 311)
    cos, sin = _tables(pos, 32)
    q = torch.randn(1, 2, 11, 32, requires_grad=True)
    k = torch.randn(1, 2, 11, 32, requires_grad=True)
    oq, ok = TRITON(q, k, cos, sin, cos, sin, layout=layout)
    gq, gk = torch.randn_like(oq), torch.randn_like(ok)
    torch.autograd.backward([oq, ok], [gq, gk])
    assert q.grad is not None and k.grad is not None
    _assert_rounding_level(q.grad, _exact(gq, -pos, 32, layout))  # R(θ)^T = R(-θ)
    _assert_rounding_level(k.grad, _exact(gk, -pos, 32, layout))
    q.grad = None
    oq, _ = TRITON(q, k, cos, sin, cos, sin, layout=layout)
    oq.sum().backward()  # k's output unused: its gradient arrives as zeros
    assert q.grad is not None


@pytest.mark.usefixtures("triton_backend")
def test_inplace_and_strided_inputs() -> None:
    """In place writes into q and k (bit-equal to out of place); a transposed (B, T, H, D) view
    of q is read through its strides."""
    pos = torch.arange(40, 47)
    cos, sin = _tables(pos, 32)
    q = torch.randn(2, 7, 4, 32).transpose(1, 2)
    k = torch.randn(2, 4, 7, 32)
    oq, ok = TRITON(q, k, cos, sin, cos, sin)
    _assert_rounding_level(oq, _exact(q, pos, 32, "half"))
    q2, k2 = q.clone(), k.clone()
    with torch.no_grad():
        rq, rk = TRITON(q2, k2, cos, sin, cos, sin, inplace=True)
    assert rq is q2 and rk is k2
    torch.testing.assert_close(q2, oq, rtol=0, atol=0)
    torch.testing.assert_close(k2, ok, rtol=0, atol=0)


def test_cpu_only_paths_never_import_triton() -> None:
    """``auto`` on CPU tensors uses the C++ kernel or the eager one without importing posenc's
    Triton kernel (torch's Dynamo imports Triton itself when it is installed)."""
    import subprocess
    import sys

    code = (
        "import sys, torch; import posenc\n"
        "pe = posenc.build('rope', head_dim=8, kernel='auto')\n"
        "q, pos = torch.randn(1, 1, 4, 8), torch.arange(4)\n"
        "pe.rotate(q, q, pos, pos)\n"
        "assert 'posenc.kernels.rope_triton' not in sys.modules, 'kernel imported'\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.usefixtures("triton_backend")
def test_rope_module_with_the_triton_kernel_matches_eager() -> None:
    fast, eager = (posenc.build("rope", head_dim=16, kernel=n) for n in ("triton", "eager"))
    q = torch.randn(1, 4, 6, 16, requires_grad=True)
    k = torch.randn(1, 2, 6, 16, requires_grad=True)
    pos = torch.arange(6)
    fq, fk = fast.rotate(q, k, pos, pos)
    (fq.sum() + 2 * fk.sum()).backward()
    fast_grads = q.grad.clone(), k.grad.clone()  # type: ignore[union-attr]
    q.grad = k.grad = None
    eq, ek = eager.rotate(q, k, pos, pos)
    (eq.sum() + 2 * ek.sum()).backward()
    torch.testing.assert_close((fq, fk), (eq, ek))
    torch.testing.assert_close(fast_grads, (q.grad, k.grad))


@pytest.mark.usefixtures("triton_backend")
@pytest.mark.parametrize("backward", [False, True])
def test_gpu_bench_suite_runs_the_triton_kernel(backward: bool) -> None:
    """``posenc bench rope --device cuda`` times the Triton kernel as the fast path against
    Liger-Kernel (here on CPU tensors in the interpreter, so only that they run and report,
    never their speed)."""
    from posenc.bench import rope

    case = rope.run_case((1, 2, 8, 16), "fp32", backward, rounds=1, fast="triton")
    assert case["fast_backend"] == "triton"
    assert {"posenc_triton", "posenc_eager"} <= set(case["us"])
    if "liger-kernel" not in case["skipped_anchors"]:  # extra [bench-gpu]
        assert set(case["speedup_vs_liger"]) >= {"posenc_triton", "posenc_eager"}
    assert all(v > 0 for v in case["GBps"].values())
    if not backward:
        fractions = case["copy_bandwidth_fraction"]
        assert {"posenc_triton", "posenc_inplace_triton"} <= set(fractions)
        assert set(case["inplace_x_copy_floor"]) == {
            "posenc_inplace",
            "posenc_inplace_triton",
            "posenc_inplace_inductor",
        }


@pytest.mark.usefixtures("triton_backend")
def test_tables_not_fitting_and_shared_rows_are_refused() -> None:
    """The kernel reads sin through cos's strides and 2P features per row: a sin of another
    shape or 2P > D would read (and write) out of bounds; in place on an expanded tensor would
    rotate its shared rows more than once."""
    pos = torch.arange(5)
    cos, sin = _tables(pos, 8)
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 1, 5, 8)
    with pytest.raises(ValueError, match="cos and sin must have one shape"):
        TRITON(q, k, cos, sin[:1], cos, sin[:1])
    c16, s16 = _tables(pos, 16)
    with pytest.raises(ValueError, match="cos/sin have 8 pairs but q has only 8 features"):
        TRITON(q, k, c16, s16, c16, s16)
    with torch.no_grad(), pytest.raises(ValueError, match="inplace=True needs q without shared"):
        TRITON(q[:, :1].expand(1, 3, 5, 8), k, cos, sin, cos, sin, inplace=True)


@pytest.mark.usefixtures("triton_backend")
def test_double_backward_raises_and_meta_tensors_trace() -> None:
    """A gradient penalty through the kernel raises (it used to drop the penalty's gradient);
    meta tensors (shape tracing) go to the eager kernel, not to a launch."""
    pos = torch.arange(5)
    cos, sin = _tables(pos, 8)
    q, k = torch.randn(1, 2, 5, 8, requires_grad=True), torch.randn(1, 1, 5, 8)
    oq, _ = TRITON(q, k, cos, sin, cos, sin)
    (gq,) = torch.autograd.grad((oq**2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        ((oq**2).sum() + (gq**2).sum()).backward()
    qm, km, cm, sm = (t.to("meta") for t in (q.detach(), k, cos, sin))
    oqm, okm = TRITON(qm, km, cm, sm, cm, sm)
    assert oqm.shape == qm.shape and okm.shape == km.shape and oqm.is_meta
