"""FIRE's fused CPU attention kernel (``kernels.fire_fused``, called with the encoding's terms
by ``attention.backends.fire_attention``) against float64 attention."""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.attention import Attention, backends
from posenc.kernels import fire_fused as FF
from tests.encodings.bias_helpers import fire_reference


@pytest.fixture(autouse=True)
def _kernel() -> None:
    if not FF.KERNEL.available():  # no C++ toolchain here: the blocks path covers FIRE
        pytest.skip(str(FF.KERNEL.error))


def _fire(H: int, hidden: int = 8, seed: int = 0, **kw: float) -> torch.nn.Module:
    """FIRE with spread-out parameters: kinks on both sides of 0 and inside [0, 1]."""
    torch.manual_seed(seed)
    pe = posenc.build("fire", n_heads=H, hidden=hidden, **kw)
    with torch.no_grad():
        pe.mlp_in.weight.normal_(0.0, 3.0)
        pe.mlp_in.bias.uniform_(-1.5, 1.5)
        pe.mlp_out.weight.normal_(0.0, 2.0)
    return pe


def _attention64(q, k, v, bias: np.ndarray, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + bias) v in float64; causal by index (key c <= L - T + r)."""
    T, L = q.shape[2], k.shape[2]
    mask = torch.from_numpy(bias)
    if causal:
        mask = mask.masked_fill(~torch.ones(T, L, dtype=torch.bool).tril(L - T), -math.inf)
    groups = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(groups, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q.double(), k, v, attn_mask=mask)


def _run(pe, q, k, v, q_pos, k_pos, causal: bool) -> torch.Tensor:
    with torch.no_grad():
        out = backends.fire_attention(
            q, k, v, pe, q_pos, k_pos, causal=causal, scale=1 / math.sqrt(q.shape[-1])
        )
    assert out is not None
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_matches_the_paper_formula_in_float64(causal: bool) -> None:
    """Two query blocks (T = 140 > 128) over two key tiles (L = 600 > 512), keys starting
    before the queries (a cache prefix), grouped-query heads, threshold inside the range."""
    pe = _fire(4, init_threshold=60.0, init_c=0.3)
    T, L, a = 140, 600, 700
    q, k, v = torch.randn(1, 4, T, 24), torch.randn(1, 2, L, 24), torch.randn(1, 2, L, 24)
    q_pos, k_pos = torch.arange(a, a + T), torch.arange(a + T - L, a + T)
    out = _run(pe, q, k, v, q_pos, k_pos, causal)
    exact = _attention64(q, k, v, fire_reference(pe, q_pos, k_pos), causal)
    torch.testing.assert_close(out.double(), exact, rtol=0, atol=2e-5)


@pytest.mark.parametrize(
    ("T", "L", "a", "b", "causal"),
    [
        (300, 300, 0, 0, True),  # prefill
        (1, 777, 776, 0, True),  # decode one token against a cache
        (257, 1100, 5, 40, False),  # keys after and before the queries: offsets of both signs
        (130, 130, 9000, 9000, False),  # far past the threshold: every query normalised
    ],
)
def test_tiles_edges_and_offsets_match_dense_attention(
    T: int, L: int, a: int, b: int, causal: bool
) -> None:
    pe = _fire(3, hidden=32, seed=T)
    B = 2
    q, k, v = torch.randn(B, 3, T, 64), torch.randn(B, 3, L, 64), torch.randn(B, 3, L, 64)
    q_pos, k_pos = torch.arange(a, a + T).expand(B, T), torch.arange(b, b + L).expand(B, L)
    out = _run(pe, q, k, v, q_pos, k_pos, causal)
    with torch.no_grad():
        bias = copy.deepcopy(pe).double().bias(q_pos[0], k_pos[0])[0].numpy()  # checked: test_fire
    torch.testing.assert_close(out.double(), _attention64(q, k, v, bias, causal), rtol=0, atol=2e-5)


def test_strided_queries_and_flat_units() -> None:
    """q as a transposed (B, T, H, D) view; MLP units with w1 = 0 (constant, no kink)."""
    pe = _fire(2)
    with torch.no_grad():
        pe.mlp_in.weight[:3] = 0.0
    q = torch.randn(1, 50, 2, 16).transpose(1, 2)
    k, v = torch.randn(1, 2, 50, 16), torch.randn(1, 2, 50, 16)
    pos = torch.arange(50)
    exact = _attention64(q, k, v, fire_reference(pe, pos, pos), True)
    torch.testing.assert_close(_run(pe, q, k, v, pos, pos, True).double(), exact, rtol=0, atol=2e-5)


def test_nan_in_a_query_stays_in_its_row() -> None:
    pe = _fire(2)
    q, k, v = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 20, 16), torch.randn(1, 2, 20, 16)
    q[0, 1, 7, 3] = math.nan
    out = _run(pe, q, k, v, torch.arange(20), torch.arange(20), False)
    assert out[0, 1, 7].isnan().all()
    assert not out[0, 0].isnan().any() and not out[0, 1, 8:].isnan().any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_is_computed_in_float32(dtype: torch.dtype) -> None:
    """bfloat16/float16 inputs: the float64 formula on the rounded inputs, to the output
    dtype's rounding, with a cache prefix (L > T) and GQA."""
    pe = _fire(4)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 70, 16, generator=g).to(dtype)
    k, v = (torch.randn(1, 2, 90, 16, generator=g).to(dtype) for _ in range(2))
    q_pos, k_pos = torch.arange(20, 90), torch.arange(90)
    for causal in (True, False):
        got = _run(pe, q, k, v, q_pos, k_pos, causal)
        assert got.dtype == dtype
        bias = fire_reference(pe, q_pos, k_pos)
        want = _attention64(q, k, v, bias, causal)
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=1e-2)


def test_declines_what_it_does_not_cover() -> None:
    """Gradients, float64 or mixed dtypes, gapped positions, another encoding: None (the
    caller's blocks)."""
    pe = _fire(2)
    q, k, v = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    pos = torch.arange(8)

    def call(pe=pe, q=q, pos=pos):
        return backends.fire_attention(q, k, v, pe, pos, pos, causal=True, scale=0.25)

    assert call() is None  # FIRE's parameters require grad: training takes the blocks
    with torch.no_grad():
        assert call() is not None
        assert call(q=q.bfloat16()) is None  # k, v stay float32
        assert (
            backends.fire_attention(
                q.double(), k.double(), v.double(), pe, pos, pos, causal=True, scale=0.25
            )
            is None
        )
        assert call(pos=pos * 2) is None
        assert call(pe=posenc.build("alibi", n_heads=2)) is None


def test_attention_uses_it_in_inference_and_blocks_in_training(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Attention`` (bias_backend="auto") takes the kernel in eval mode and agrees with the
    blocks backend; in training it declines, and gradients reach FIRE's parameters."""
    results: list[torch.Tensor | None] = []

    def spy(*args, **kwargs):
        results.append(backends.fire_attention(*args, **kwargs))
        return results[-1]

    monkeypatch.setitem(backends.FUSED, "fire", spy)
    pe = _fire(4)
    fused = Attention(64, 4, pe=pe, causal=True)
    blocks = Attention(64, 4, pe=pe, causal=True, bias_backend="blocks")
    blocks.load_state_dict(fused.state_dict())
    x = torch.randn(2, 90, 64)
    with torch.no_grad():
        torch.testing.assert_close(fused.eval()(x), blocks.eval()(x), rtol=0, atol=2e-5)
    assert len(results) == 1 and results[0] is not None
    fused.train()(x).sum().backward()
    assert len(results) == 2 and results[1] is None
    assert pe.mlp_out.weight.grad is not None and pe.c.grad is not None


def test_failed_build_warns_once_and_declines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FF.KERNEL, "op", None)
    monkeypatch.setattr(FF.KERNEL, "error", "could not build (no g++)")
    monkeypatch.setattr(FF.KERNEL, "warned", False)
    pe = _fire(2)
    q = torch.randn(1, 2, 8, 16)
    pos = torch.arange(8)
    with torch.no_grad(), pytest.warns(UserWarning, match="no g\\+\\+.*query blocks"):
        assert backends.fire_attention(q, q, q, pe, pos, pos, causal=True, scale=0.25) is None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        assert backends.fire_attention(q, q, q, pe, pos, pos, causal=True, scale=0.25) is None


@pytest.mark.parametrize("shape", [(2, 0, 64), (0, 300, 64)])
def test_empty_batch_or_sequence_in_float32_inference(shape: tuple[int, int, int]) -> None:
    """T = 0 or B = 0 (with explicit (B, T) positions) in eval: empty output, not a crash in
    reading the positions' start."""
    pe = _fire(4)
    attn = Attention(64, 4, pe=pe, causal=True).eval()
    x = torch.randn(*shape)
    pos = torch.arange(shape[1]).expand(shape[0], shape[1])
    with torch.no_grad():
        assert attn(x).shape == shape
        assert attn(x, pos).shape == shape
        q = torch.randn(shape[0], 4, shape[1], 16)
        assert backends.fire_attention(q, q, q, pe, pos, pos, causal=True, scale=0.25) is None


@pytest.mark.parametrize("causal", [True, False])
def test_one_head_fire_is_shared_by_all_heads(causal: bool) -> None:
    """A one-head FIRE's (1, 1, T, L) bias broadcasts over the heads in the blocks path; the
    kernel shares it too (float64 formula, GQA), instead of rejecting the head count."""
    pe = _fire(1)
    q, k, v = torch.randn(2, 4, 30, 16), torch.randn(2, 2, 30, 16), torch.randn(2, 2, 30, 16)
    pos = torch.arange(30)
    exact = _attention64(q, k, v, fire_reference(pe, pos, pos), causal)
    got = _run(pe, q, k, v, pos, pos, causal)
    torch.testing.assert_close(got.double(), exact, rtol=0, atol=2e-5)
    fused = Attention(64, 4, pe=pe, causal=causal).eval()
    blocks = Attention(64, 4, pe=pe, causal=causal, bias_backend="blocks").eval()
    blocks.load_state_dict(fused.state_dict())
    x = torch.randn(2, 40, 64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), blocks(x), rtol=0, atol=2e-5)


def test_bad_inputs_raise_clear_errors() -> None:
    pe = _fire(4)
    q, k = torch.randn(1, 4, 10, 16), torch.randn(1, 2, 10, 16)
    pos = torch.arange(10)

    def call(q=q, k=k, v=k, q_pos=pos, k_pos=pos, pe=pe):
        return backends.fire_attention(q, k, v, pe, q_pos, k_pos, causal=True, scale=0.25)

    with torch.no_grad():
        with pytest.raises(ValueError, match=r"q_pos must have shape \(10,\) or \(1, 10\)"):
            call(q_pos=torch.arange(3))  # was read for its start only
        with pytest.raises(ValueError, match=r"k_pos must have shape \(10,\)"):
            call(k_pos=torch.arange(12))
        with pytest.raises(TypeError, match="q_pos must be an integer tensor"):
            call(q_pos=pos.float())
        with pytest.raises(ValueError, match="k and v must be"):
            call(v=k[:, :, :5])
        with pytest.raises(ValueError, match="q must have 4 dimensions"):
            call(q=q[0])
        with pytest.raises(ValueError, match="4 heads must be a multiple of k's 3"):
            call(k=torch.randn(1, 3, 10, 16), v=torch.randn(1, 3, 10, 16))
        with pytest.raises(TypeError, match="q must be a floating-point tensor"):
            call(q=q.long())
        with pytest.raises(ValueError, match="FIRE has 3 heads, attention has 4"):
            call(pe=_fire(3))


def test_missing_setuptools_is_a_failed_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.utils.cpp_extension`` imports setuptools (not in Python >= 3.12 venvs): its
    ImportError is a failed build (one warning, the blocks path), not a crash in forward."""
    import sys

    import torch.utils

    from posenc.kernels.native import NativeKernel

    monkeypatch.delattr(torch.utils, "cpp_extension", raising=False)
    monkeypatch.delitem(sys.modules, "torch.utils.cpp_extension", raising=False)
    monkeypatch.setitem(sys.modules, "setuptools", None)  # cpp_extension's import fails
    kernel = NativeKernel("posenc_missing_test", FF.KERNEL.source, "test kernel")
    assert not kernel.available()
    assert kernel.error is not None and "import of setuptools halted" in kernel.error
    with pytest.raises(RuntimeError, match="could not build posenc's test kernel"):
        kernel.load()
    monkeypatch.setattr(FF, "KERNEL", kernel)
    pe = _fire(4)
    fused = Attention(64, 4, pe=pe, causal=True).eval()
    blocks = Attention(64, 4, pe=pe, causal=True, bias_backend="blocks").eval()
    blocks.load_state_dict(fused.state_dict())
    x = torch.randn(1, 20, 64)
    with torch.no_grad(), pytest.warns(UserWarning, match="setuptools.*query blocks"):
        torch.testing.assert_close(fused(x), blocks(x))
