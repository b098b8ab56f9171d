"""posenc on a CUDA device: every encoding's forward and cached decode against the same model on
CPU, no host synchronisation on the forward path, the Triton RoPE kernel on the GPU against a
float64 reference, and FlexAttention's fused biases against the explicit scores.

Skipped without CUDA (CI has no GPU). Run on a GPU machine with
``python -m pytest tests/gpu -q`` (``-m slow`` adds the compiled paths).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import posenc
from posenc import functional as PF
from posenc.attention import Attention
from posenc.kernels.rope import rotate_pair
from tests.reference.rotary import rope_vector

CUDA = torch.device("cuda")
V_SIZE = 50


@pytest.fixture(autouse=True)
def _exact_matmuls() -> None:
    """TF32 would make GPU and CPU differ by 1e-3: compare in true float32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def _model(name: str, layers: int = 2) -> posenc.TinyTransformer:
    torch.manual_seed(0)
    model = posenc.TinyTransformer(
        vocab_size=V_SIZE, pe=name, d_model=32, n_heads=4, n_layers=layers, max_len=64
    )
    with torch.no_grad():  # move learned position parameters off their near-zero init
        for p in model.pe.parameters():
            p.normal_(std=0.5)
    return model.eval()


def _idx(T: int = 12) -> torch.Tensor:
    return torch.randint(0, V_SIZE, (2, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", posenc.names(axes=1))
def test_forward_and_decode_match_cpu(name: str) -> None:
    """The same weights give the same logits on CUDA as on CPU, full and cached."""
    cpu = _model(name)
    gpu = _model(name).to(CUDA)
    idx = _idx()
    with torch.no_grad():
        want = cpu(idx)
        got = gpu(idx.to(CUDA))
        cache = gpu.new_cache()
        steps = [gpu(idx[:, :5].to(CUDA), cache=cache)]
        steps += [gpu(idx[:, t : t + 1].to(CUDA), cache=cache) for t in range(5, idx.shape[1])]
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.cat(steps, 1).cpu(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", posenc.names(axes=1))
def test_no_host_sync_on_the_forward_path(name: str) -> None:
    """No value of a device tensor is read on the host in a forward or a cached decode step
    (``torch.cuda.set_sync_debug_mode("error")`` raises at the first synchronising call)."""
    model = _model(name).to(CUDA)
    idx = _idx().to(CUDA)
    with torch.no_grad():
        model(idx)  # first call: lazy buffers and kernel choices may read once
        cache = model.new_cache()
        model(idx[:, :5], cache=cache)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            model(idx)
            model(idx[:, 5:6], cache=cache)
        finally:
            torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("name", [n for n in posenc.names(axes=1) if n != "randomized"])
def test_no_host_sync_in_training_step(name: str) -> None:
    """Forward and backward in training mode (randomized draws its positions on the host by
    design, one read per forward, and is left out)."""
    model = _model(name).to(CUDA).train()
    idx = _idx().to(CUDA)
    model.loss(idx[:, :-1], idx[:, 1:]).backward()  # warm-up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        model.loss(idx[:, :-1], idx[:, 1:]).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


LOW = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("D", "rot"), [(128, 128), (64, 64), (40, 24), (6, 6)])
def test_triton_kernel_on_the_gpu(layout: str, dtype: torch.dtype, D: int, rot: int) -> None:
    """``kernel="triton"`` on CUDA tensors: q and k of different lengths and head counts,
    positions per batch row, partial rotary; within rounding of the float64 formula."""
    pytest.importorskip("triton")
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 33, D, generator=gen).to(dtype)
    k = torch.randn(2, 2, 17, D, generator=gen).to(dtype)
    pos_q = torch.randint(0, 5000, (2, 1, 33), generator=gen)
    pos_k = torch.randint(0, 5000, (2, 1, 17), generator=gen)
    inv = PF.rope_inv_freq(rot, xp=PF.torch_xp)
    tables = [t.float().to(CUDA) for p in (pos_q, pos_k) for t in PF.rope_cos_sin(p, inv)]
    oq, ok = rotate_pair(q.to(CUDA), k.to(CUDA), *tables, layout=layout, kernel="triton")
    for x, pos, out in ((q, pos_q, oq), (k, pos_k, ok)):
        xs, ps = x.double().numpy(), pos.expand(*x.shape[:-1]).numpy()
        exact = torch.tensor(
            [rope_vector(xs[i], int(ps[i]), layout=layout, rotary_dim=rot) for i in _rows(xs)]
        ).reshape(x.shape)
        err = (out.cpu().double() - exact).abs()
        bound = (exact.abs() + 1e-3) * 2 * LOW[dtype] + 4e-6
        assert bool((err <= bound).all()), float((err / bound).max())
        torch.testing.assert_close(out[..., rot:].cpu(), x[..., rot:], rtol=0, atol=0)


def _rows(xs: np.ndarray) -> list[tuple[int, ...]]:
    return list(np.ndindex(*xs.shape[:-1]))


def test_auto_kernel_picks_triton_on_cuda_and_matches_eager() -> None:
    pytest.importorskip("triton")
    from posenc.kernels.rope import _auto

    assert _auto(CUDA) == "triton"
    pe_auto = posenc.build("rope", head_dim=64, kernel="auto").to(CUDA)
    pe_eager = posenc.build("rope", head_dim=64, kernel="eager").to(CUDA)
    q, k = torch.randn(2, 8, 256, 64, device=CUDA), torch.randn(2, 8, 256, 64, device=CUDA)
    pos = torch.arange(256, device=CUDA)
    a = pe_auto.rotate(q, k, pos, pos)
    b = pe_eager.rotate(q, k, pos, pos)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple"])
@pytest.mark.parametrize("causal", [True, False])
def test_flex_bias_matches_explicit_scores(name: str, causal: bool) -> None:
    """``bias_backend="flex"`` (compiled FlexAttention on the GPU) against the blockwise path,
    forward and the gradients of q/k/v and of the learned bias parameters."""
    torch.manual_seed(0)
    layers = {
        b: Attention(
            64,
            4,
            pe=posenc.build_for_model(name, dim=64, n_heads=4, max_len=512),
            causal=causal,
            bias_backend=b,
        ).to(CUDA)
        for b in ("flex", "blocks")
    }
    layers["blocks"].load_state_dict(layers["flex"].state_dict())
    x = torch.randn(2, 300, 64, device=CUDA)
    outs, grads = {}, {}
    for b, layer in layers.items():
        xb = x.clone().requires_grad_(True)
        out = layer(xb, torch.arange(300, device=CUDA))
        out.square().sum().backward()
        outs[b] = out.detach()
        grads[b] = [xb.grad] + [p.grad for p in layer.pe.parameters() if p.grad is not None]
    torch.testing.assert_close(outs["flex"], outs["blocks"], rtol=2e-4, atol=2e-4)
    assert len(grads["flex"]) == len(grads["blocks"])
    for gf, gb in zip(grads["flex"], grads["blocks"], strict=True):
        torch.testing.assert_close(gf, gb, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple"])
def test_flex_reads_no_position_on_the_host(name: str) -> None:
    """With the models' default positions the offsets' range is known on the host: the compiled
    FlexAttention call synchronises nothing once compiled."""
    model = posenc.TinyTransformer(vocab_size=V_SIZE, pe=name, d_model=64, n_heads=4, n_layers=2)
    for block in model.blocks:
        block.attn.bias_backend = "flex"
    model = model.to(CUDA).eval()
    idx = _idx(128).to(CUDA)
    with torch.no_grad():
        model(idx)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            model(idx)
        finally:
            torch.cuda.set_sync_debug_mode("default")
