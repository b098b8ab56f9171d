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
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from ..kernels.native import cpu_model

Spec = TypeVar("Spec")
Case = TypeVar("Case")
#: Called after each finished case with the case, how many cases are done and how many in all.
Progress = Callable[[Any, int, int], None]

#: Benchmark dtype labels (JSON and tables) and what they stand for.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Timing:
    """Seconds per call of one implementation on one case."""

    name: str
    median: float
    low: float
    high: float
    samples: list[float]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def interleaved(
    impls: dict[str, Callable[[], Any]],
    *,
    rounds: int = 15,
    warmup: int = 2,
    device: str = "cpu",
    target: float = 0.02,
    calls: int | None = None,
    settings: dict[str, Callable[[], AbstractContextManager[Any]]] | None = None,
) -> dict[str, Timing]:
    """Time each callable ``rounds`` times, round-robin (round r starts at the r-th
    implementation); returns seconds per call.

    A sample is ``calls`` calls, or (by default) as many as last about ``target`` seconds.
    ``settings[name]()`` is a context entered around each of that implementation's samples,
    outside the clock (a process-wide setting such as a ``torch.backends`` flag: set once, as a
    user would, not once per call).
    """
    settings = settings or {}

    def seconds_per_call(name: str, n: int) -> float:
        with settings.get(name, nullcontext)():
            _sync(device)
            start = time.perf_counter()
            for _ in range(n):
                impls[name]()
            _sync(device)
            return (time.perf_counter() - start) / max(n, 1)

    for name in impls:
        seconds_per_call(name, warmup)
    reps = {
        name: calls or max(1, min(1000, int(target / max(seconds_per_call(name, 1), 1e-7))))
        for name in impls
    }
    samples: dict[str, list[float]] = {name: [] for name in impls}
    order = list(impls)
    for r in range(rounds):
        # each round starts one implementation later, so each takes every place in the round
        # (first after the previous round, or after a given contender) instead of one fixed place
        for name in order[r % len(order) :] + order[: r % len(order)]:
            samples[name].append(seconds_per_call(name, reps[name]))
    return {n: Timing(n, statistics.median(s), min(s), max(s), s) for n, s in samples.items()}


def each(
    specs: list[Spec], run: Callable[[Spec], Case], progress: Progress | None = None
) -> list[Case]:
    """``run`` on each spec in turn; ``progress(case, done, total)`` after each finished case
    (the CLI reports it and rewrites its JSON, so a stopped run keeps what it finished)."""
    cases: list[Case] = []
    for spec in specs:
        cases.append(run(spec))
        if progress is not None:
            progress(cases[-1], len(cases), len(specs))
    return cases


def machine() -> dict[str, Any]:
    """Where and under what load the numbers were taken."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_model(),
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

    By default glibc serves blocks above a moving mmap threshold (at most 32 MiB) straight from
    the kernel, faulting them in page by page, and returns a freed heap top past the trim
    threshold: which contender paid the faults then depended on the order (HF's RoPE time
    moved 17-35 ms at (1, 32, 2048, 128) fp32, and the bias suite's dense anchor handed the
    heap back even with a 1 GiB trim threshold). So mmap is switched off (``M_MMAP_MAX`` = 0)
    and the heap never trimmed (-1). Returns what was set (for the JSON); {} off glibc.
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


def as_json(t: Timing) -> dict[str, Any]:
    """A Timing without its raw samples, in microseconds."""
    return {"name": t.name, "median": t.median * 1e6, "low": t.low * 1e6, "high": t.high * 1e6}


def peak_memory_bytes(fn: Callable[[], Any]) -> int:
    """Peak CPU memory one call of ``fn`` holds at once beyond what existed before it, from the
    torch profiler's memory events (``profile_memory=True``): each op's own allocations net of
    its own frees (``self_cpu_memory_usage``), summed in start order; the running total's
    maximum. An op that allocates and frees inside itself counts net, so this is a lower
    bound of the allocator's true peak (an 8 MiB temporary reads 8 MiB)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
        del out
    events = sorted(
        (e for e in prof.events() if e.self_cpu_memory_usage), key=lambda e: e.time_range.start
    )
    held = peak = 0
    for e in events:
        held += e.self_cpu_memory_usage
        peak = max(peak, held)
    return peak
