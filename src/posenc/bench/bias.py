"""Score-bias attention benchmark: posenc's bias paths against SDPA without bias.

For ALiBi, T5, Kerple and FIRE at long T, causal and bidirectional: time per call of the default
path (``bias_backend="auto"``: the Toeplitz view for offset-only biases, FIRE's fused kernel;
on CUDA, where those CPU paths do not run, the blockwise one), the blockwise path and compiled
FlexAttention (on CUDA bidirectional calls too), interleaved with plain SDPA and with the dense
(1, H, T, T) bias the anchors build, where it fits; and the peak extra memory of one call, in a
fresh process on CPU (``peak_extra_bytes``), from the allocator on CUDA.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable
from typing import Any, Literal
from unittest.mock import patch

import torch
import torch.nn.functional as F

from .harness import DTYPES, Progress, as_json, each, interleaved

ENCODINGS = ("alibi", "t5", "kerple", "fire")
DENSE_LIMIT_BYTES = 2 << 30  # skip the dense anchor when its bias alone exceeds 2 GiB


def _impls(
    name: str, T: int, H: int, D: int, causal: bool, dtype: str = "fp32", device: str = "cpu"
) -> dict[str, Callable[[], Any]]:
    from ..attention import Attention, CachedKeys
    from ..attention.backends import Call, attend
    from ..kernels.flex import flex_runs_on
    from ..registry import build_for_model

    torch_dtype = DTYPES[dtype]
    pe = build_for_model(name, dim=H * D, n_heads=H, max_len=T).to(device, torch_dtype)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, T, D, generator=g).to(device, torch_dtype) for _ in range(3))
    pos = torch.arange(T, device=device)
    valid = torch.ones(1, T, dtype=torch.bool, device=device)
    keys = CachedKeys(k, v, pos[None], valid, pos[None] * 0)

    def posenc(backend: Literal["auto", "blocks", "flex"]) -> Callable[[], Any]:
        layer = Attention(H * D, H, pe=pe, causal=causal, bias_backend=backend)
        return lambda: attend(layer, Call(q, keys, pe.prepare(pos), None, 0))

    impls: dict[str, Callable[[], Any]] = {
        "sdpa_no_bias": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "posenc_default": posenc("auto"),
        "posenc_blockwise": posenc("blocks"),
    }
    if pe.capabilities.bias == "offset" and flex_runs_on(torch.device(device)):
        impls["posenc_flex"] = posenc("flex")  # compiled FlexAttention
    if H * T * T * 4 <= DENSE_LIMIT_BYTES:

        def dense() -> Any:
            bias = pe.bias(pos, pos)  # (1, H, T, T): what the anchors build
            if bias is None:
                raise ValueError(f"{name} has no score bias")
            if causal:
                bias = bias.masked_fill(
                    torch.ones(T, T, dtype=torch.bool, device=device).triu(1), float("-inf")
                )
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))

        impls["dense_bias"] = dense
    return impls


def _peak_child(args: tuple[str, int, int, int, bool, str, str], out: Any) -> None:
    name, T, H, D, causal, impl, dtype = args
    torch.set_num_threads(1)
    with torch.no_grad():
        fn = _impls(name, T, H, D, causal, dtype)[impl]
        fn()  # kernels, thread pools and compiled code exist before the measured call
        before = _status_kib("VmRSS")
        _reset_peak()
        fn()
    out.put((_status_kib("VmHWM") - before) * 1024)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    """Reset VmHWM (the peak resident size) to the current size (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_extra_bytes(
    name: str, T: int, H: int, D: int, causal: bool, impl: str, dtype: str = "fp32"
) -> int:
    """Peak resident memory one call in ``dtype`` adds, measured in a fresh (spawned) process."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_child, args=((name, T, H, D, causal, impl, dtype), queue))
    # A fixed mmap threshold: glibc otherwise raises it after each large free and keeps freed
    # blocks in its heap, so the resident peak would count memory no tensor holds any more.
    with patch.dict(os.environ, {"MALLOC_MMAP_THRESHOLD_": "131072"}):
        proc.start()
    value = int(queue.get(timeout=1800))
    proc.join()
    return max(value, 0)


def run_case(
    name: str,
    T: int,
    causal: bool,
    *,
    H: int,
    D: int,
    rounds: int,
    memory: bool = True,
    dtype: str = "fp32",
    device: str = "cpu",
) -> dict[str, Any]:
    """Timings and peak extra memory of each implementation for one encoding and length."""
    dev = torch.device(device).type
    with torch.no_grad():
        impls = _impls(name, T, H, D, causal, dtype, device)
        timings = interleaved(impls, rounds=rounds, warmup=1, target=0.0, device=dev)
        if memory and dev == "cuda":
            peaks = {n: cuda_peak_extra_bytes(fn) / 2**20 for n, fn in impls.items()}
        elif memory:
            peaks = {n: peak_extra_bytes(name, T, H, D, causal, n, dtype) / 2**20 for n in impls}
        else:
            peaks = {}
    base = timings["sdpa_no_bias"].median
    return {
        "encoding": name,
        "T": T,
        "H": H,
        "D": D,
        "causal": causal,
        "dtype": dtype,
        "device": dev,
        "us": {n: as_json(t) for n, t in timings.items()},
        "x_sdpa_no_bias": {n: t.median / base for n, t in timings.items()},
        "peak_extra_MiB": peaks,
        "dense_bias_MiB": H * T * T * 4 / 2**20,
    }


def cuda_peak_extra_bytes(fn: Callable[[], Any]) -> int:
    """Peak CUDA memory one (already warmed-up) call adds over what was allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    del out
    return max(torch.cuda.max_memory_allocated() - before, 0)


def run(
    quick: bool = False, device: str = "cpu", progress: Progress | None = None
) -> list[dict[str, Any]]:
    """All cases: fp32 with peak memory at T = 4096 and 16384, then bf16 time at T = 4096
    (on CUDA with memory too: the allocator's peak costs nothing to read);
    ``quick``: T=256, one round, no memory processes (a CI smoke run).
    ``progress(case, done, total)`` after each finished case."""
    gpu = torch.device(device).type == "cuda"
    cases = [(256, "fp32", False)] if quick else [(4096, "fp32", True), (16384, "fp32", True)]
    cases += [] if quick else [(4096, "bf16", gpu)]
    specs = [
        (name, T, causal, dtype, memory)
        for T, dtype, memory in cases
        for name in ENCODINGS
        for causal in (True, False)
    ]

    def one(spec: tuple[str, int, bool, str, bool]) -> dict[str, Any]:
        name, T, causal, dtype, memory = spec
        rounds = 1 if quick else (5 if T <= 4096 else 2)
        return run_case(
            name, T, causal, H=8, D=64, rounds=rounds, memory=memory, dtype=dtype, device=device
        )

    return each(specs, one, progress)
