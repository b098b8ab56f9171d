"""Interleaved timing: every implementation of a case runs in the same round, medians reported.

This box is shared and noisy: absolute times drift 2x between minutes, so implementations are
timed round-robin in one process and compared by ratios of medians (gpt-fast / perf.md habits:
warm up first, synchronise before stopping the clock, report min-max as well as the median).
"""

from __future__ import annotations

import ctypes
import os
import platform
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

#: Benchmark dtype labels (JSON and tables) and what they stand for.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Timing:
    """Seconds per call of one implementation on one case."""

    name: str
    median: float
    low: float
    high: float
    samples: list[float] = field(default_factory=list)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _calls_per_sample(fn: Callable[[], Any], device: str, target: float) -> int:
    """Calls per timed sample so one sample lasts about ``target`` seconds."""
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    once = max(time.perf_counter() - start, 1e-7)
    return max(1, min(1000, int(target / once)))


def interleaved(
    impls: dict[str, Callable[[], Any]],
    *,
    rounds: int = 15,
    warmup: int = 2,
    device: str = "cpu",
    target: float = 0.02,
    settings: dict[str, Callable[[], AbstractContextManager[Any]]] | None = None,
) -> dict[str, Timing]:
    """Time each callable ``rounds`` times, round-robin (round r starts at the r-th
    implementation); returns seconds per call.

    ``settings[name]()`` is a context entered around each of that implementation's samples,
    outside the clock (a process-wide setting such as a ``torch.backends`` flag: set once, as a
    user would, not once per call).
    """
    settings = settings or {}

    def setting(name: str) -> AbstractContextManager[Any]:
        return settings.get(name, nullcontext)()

    for name, fn in impls.items():
        with setting(name):
            for _ in range(warmup):
                fn()
    reps = {}
    for name, fn in impls.items():
        with setting(name):
            reps[name] = _calls_per_sample(fn, device, target)
    samples: dict[str, list[float]] = {name: [] for name in impls}
    order = list(impls)
    for r in range(rounds):
        # each round starts one implementation later, so each takes every place in the round
        # (first after the previous round, or after a given contender) instead of one fixed place
        for name in order[r % len(order) :] + order[: r % len(order)]:
            fn = impls[name]
            with setting(name):
                _sync(device)
                start = time.perf_counter()
                for _ in range(reps[name]):
                    fn()
                _sync(device)
                samples[name].append((time.perf_counter() - start) / reps[name])
    return {n: Timing(n, statistics.median(s), min(s), max(s), s) for n, s in samples.items()}


def machine() -> dict[str, Any]:
    """Where and under what load the numbers were taken."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": _cpu_name(),
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "loadavg": os.getloadavg(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        **isa(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def isa() -> dict[str, Any]:
    """Which vector ISA the numbers come from: the CPU's (``cpu_simd``: its AVX2 / AVX-512 /
    NEON flags), ATen's (``aten_cpu_capability``) and posenc's C++ kernels' build
    (``kernel_isa``: null when they cannot be built)."""
    from ..kernels import rope_cpp
    from ..kernels.native import cpu_has

    flags = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16", "asimd", "sve")
    try:
        kernel_isa: str | None = rope_cpp.load_kernel().isa()
    except RuntimeError:
        kernel_isa = None
    return {
        "cpu_simd": [f for f in flags if cpu_has(f)],
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "kernel_isa": kernel_isa,
    }


def steady_heap() -> dict[str, Any]:
    """Make glibc keep freed memory (as a long-running training process ends up doing) so every
    implementation's fresh tensors are recycled heap, not newly faulted pages.

    glibc's defaults make this a lottery: blocks above a moving mmap threshold come straight
    from the kernel and fault in page by page (4 KiB each), and a freed heap top is returned
    once it passes the trim threshold. In a one-off ``perf stat``, a loop cloning two 8 MiB bf16
    tensors faulted every page of every clone while the RoPE kernel writing the same bytes
    faulted almost none; in another order the roles swap. The threshold cannot go past 32 MiB,
    so at (1, 32, 2048, 128) fp32 (32 MiB per tensor) every output and every intermediate was
    still a fresh mapping: run to run the fast path measured 3.7-9x HF and 1.1-1.9x its clone
    floor, HF's own time moving 17-35 ms with how many intermediates it faulted. So mmap is
    switched off altogether (``M_MMAP_MAX`` = 0) and the heap is never trimmed (-1): every
    contender allocates from the same warm heap at every size. (A 1 GiB trim threshold was not
    enough: freeing the bias suite's dense (H, T, T) anchor then handed the heap top back, and
    the next contender faulted its tensors in again, 1.5x ALiBi's time at T = 4096.) Returns
    what was set (for the JSON); an empty dict off glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return {}
    m_trim_threshold, m_mmap_max = -1, -4  # mallopt parameters in <malloc.h>
    settings = {"mmap_max": 0, "trim_threshold": -1}
    ok = libc.mallopt(m_mmap_max, settings["mmap_max"]) == 1
    ok = ok and libc.mallopt(m_trim_threshold, settings["trim_threshold"]) == 1
    return {"glibc_mallopt": settings} if ok else {}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def as_json(t: Timing) -> dict[str, Any]:
    """A Timing without its raw samples, in microseconds."""
    d = asdict(t)
    d.pop("samples")
    return {k: (v * 1e6 if isinstance(v, float) else v) for k, v in d.items()}
