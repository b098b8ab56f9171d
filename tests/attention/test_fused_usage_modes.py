"""Review of the fused bias paths and native kernels under real usage modes: a JIT build cache
left behind by a killed build, the flex block-mask cache across grad modes, FIRE subclasses,
inference mode and activation checkpointing."""

from __future__ import annotations

import copy
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

import posenc
from posenc.attention.backends import fire_attention
from posenc.encodings.bias import FIRE
from posenc.kernels import fire_fused, native
from posenc.kernels import flex as FX

# ------------------------------------------------------------- native: a build killed midway

_TINY_KERNEL = """
#include <ATen/core/Tensor.h>
#include <torch/library.h>

at::Tensor same(const at::Tensor& x) { return x; }

TORCH_LIBRARY(NAME, m) {
  m.def("same(Tensor x) -> Tensor");
  m.impl("same", c10::DispatchKey::CPU, &same);
}
"""


def _stale_lock(root: Path, kernel: native.NativeKernel) -> Path:
    """The build directory torch uses for ``name`` under ``root``, holding the ``lock`` file a
    build killed by SIGKILL (OOM, preemption) leaves behind (torch waits for it without end)."""
    from torch.utils import cpp_extension

    build_dir = Path(cpp_extension._get_build_directory(kernel.build_name(), False))
    assert build_dir.is_relative_to(root)
    (build_dir / "lock").touch()
    return build_dir


def test_stale_build_lock_is_cleared_before_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load`` reached torch's build with the stale ``lock`` in place (torch then spins on it
    forever: every FIRE forward in eval, or ``enable_compiled_rope()``, hung); it is removed
    under posenc's own process lock first, and the same directory is used."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    kernel = native.NativeKernel("posenc_stale_fake", Path("unused.cpp"), "test kernel")
    build_dir = _stale_lock(tmp_path, kernel)
    seen: dict[str, Any] = {}

    def fake_load(**kwargs: Any) -> None:
        seen["lock"] = (build_dir / "lock").exists()
        seen["dir"] = kwargs.get("build_directory")

    monkeypatch.setattr(cpp_extension, "load", fake_load)
    kernel.load()
    assert seen == {"lock": False, "dir": str(build_dir)}


@pytest.mark.slow
def test_stale_build_lock_does_not_hang_a_real_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real build of a tiny kernel behind a stale ``lock``: it finished in seconds instead of
    waiting forever (run in a thread so that a hang fails the test instead of the session).
    Slow: a fresh compile on every run, uncached."""
    if not fire_fused.KERNEL.available():  # no C++ toolchain here: nothing to build
        pytest.skip(str(fire_fused.KERNEL.error))
    name = f"posenc_stale_{uuid.uuid4().hex[:8]}"
    source = tmp_path / "tiny.cpp"
    source.write_text(_TINY_KERNEL.replace("NAME", name))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    kernel = native.NativeKernel(name, source, "test kernel")
    _stale_lock(tmp_path / "ext", kernel)
    done: list[bool] = []
    worker = threading.Thread(target=lambda: done.append(kernel.available()), daemon=True)
    worker.start()
    worker.join(timeout=180)
    assert done == [True], kernel.error or "load still waiting on the stale lock"
    x = torch.randn(3)
    assert kernel.load().same(x) is not None


# ---------------------------------------------------------- flex: the cached causal block mask


def test_block_mask_cached_under_inference_mode_is_not_made_of_inference_tensors() -> None:
    """The causal block mask is cached for every later call of its (T, L); the first one may be
    an evaluation under ``torch.inference_mode``. Its tensors were then inference tensors, and
    flex saves them for backward (``ctx.save_for_backward``): training at that size afterwards
    (on GPU, where flex runs with gradients) failed with "Inference tensors cannot be saved for
    backward". It is now built outside inference mode."""
    FX._causal_block_mask.cache_clear()
    try:
        with torch.inference_mode():
            mask = FX._causal_block_mask(37, 53, torch.device("cpu"))
        tensors = [t for t in mask.as_tuple() if isinstance(t, torch.Tensor)]
        assert tensors and not any(t.is_inference() for t in tensors)
    finally:
        FX._causal_block_mask.cache_clear()


# ------------------------------------------------------- FIRE: a subclass with its own bias


class _ScaledFIRE(FIRE):
    """A user's FIRE variant: the same parameters, its own bias (here three times FIRE's)."""

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, **_: Any) -> torch.Tensor:
        return 3.0 * super().bias(q_pos, k_pos)


def test_fire_subclass_rewriting_bias_is_not_fused() -> None:
    """The fused kernel computes FIRE's own formula; a subclass rewriting ``bias`` got it
    anyway in eval (``Attention``'s CPU default), its bias silently ignored: the output was
    0.16 away from the blocks path, which calls the subclass's bias. (Offset-only biases have
    the same guard: a subclass's own bias is declared "positions", with no fused kernel.)"""
    torch.manual_seed(0)
    pe = _ScaledFIRE(n_heads=4)
    with torch.no_grad():
        pe.mlp_out.weight.normal_(0.0, 2.0)
    auto = posenc.Attention(32, 4, pe=pe, causal=True).eval()
    blocks = copy.deepcopy(auto)
    blocks.bias_backend = "blocks"
    x = torch.randn(2, 50, 32)
    pos = torch.arange(50)
    q = torch.randn(2, 4, 50, 8)
    with torch.no_grad():
        torch.testing.assert_close(auto(x), blocks(x), rtol=0, atol=2e-6)
        assert fire_attention(q, q, q, pe, pos, pos, causal=True, scale=0.5) is None


# ------------------------------------------------ usage modes that hold (regression guards)


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple", "fire"])
def test_fused_defaults_equal_blocks_under_inference_mode_and_checkpoint(name: str) -> None:
    """The CPU defaults (Toeplitz view; FIRE's kernel) under ``torch.inference_mode`` equal the
    blocks path; trained through non-reentrant activation checkpointing, the learned bias
    parameters get the blocks path's gradients."""
    torch.manual_seed(0)
    pe = posenc.build_for_model(name, dim=32, n_heads=4, max_len=512)
    auto = posenc.Attention(32, 4, pe=pe, causal=True, n_kv_heads=2)
    blocks = copy.deepcopy(auto)
    blocks.bias_backend = "blocks"
    x = torch.randn(2, 260, 32)  # T·L past TOEPLITZ_MIN_ENTRIES
    with torch.inference_mode():
        torch.testing.assert_close(auto.eval()(x), blocks.eval()(x), rtol=1e-5, atol=1e-6)
    out = torch.utils.checkpoint.checkpoint(auto.train(), x, use_reentrant=False)
    out.square().sum().backward()
    blocks.train()(x).square().sum().backward()
    for (n, got), want in zip(auto.pe.named_parameters(), blocks.pe.parameters(), strict=True):
        assert got.grad is not None and want.grad is not None, n
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-6, msg=n)
