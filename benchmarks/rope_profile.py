"""Where the fast RoPE path's time goes on CPU (issue 40): page faults and CPU time, as JSON.

Usage: ``python benchmarks/rope_profile.py --out FILE [--heap steady|default] [--rounds N]
[--quick]`` (``--quick``: the suite's quick shape only, a smoke run).

Two profiles, each per (B, H, T, D) x dtype of ``posenc bench rope``:

- ``faults``: the C++ kernel out of place and in place and a clone of q and k, in rounds
  (order rotated), each sample ``calls`` calls: wall time, minor page faults, system and user
  CPU time per call (``getrusage``), medians over the rounds. Out of place pays for fresh
  output pages where glibc hands them out (``--heap default``): the faults and the kernel's
  zeroing show as system time, which in place never pays.
- ``cpu_per_element``: one thread, CPU time (``time.thread_time``, which a loaded machine's
  preemption does not inflate) per element of q and k for the kernel in place against
  ``copy_`` into preallocated tensors (the operator called directly: no Python checks), on an
  L2-resident shape and the suite's: a kernel at or below ``copy_`` at the large shapes and
  above it in L2 is compute-bound there only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from posenc import functional as PF
from posenc.bench import harness
from posenc.bench.rope import QUICK_SHAPES, SHAPES
from posenc.kernels import rope_cpp
from posenc.kernels.rope import rotate_pair

Impl = Callable[[], Any]
L2_SHAPE = (1, 8, 128, 64)  # 128 KiB (bf16) to 256 KiB (fp32) per tensor


def _inputs(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    q, k = torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)
    T, D = shape[-2:]
    cos, sin = PF.rope_cos_sin(torch.arange(T), PF.rope_inv_freq(D, xp=PF.torch_xp))
    return q, k, cos.float(), sin.float()


def _per_call(fn: Impl, calls: int) -> dict[str, float]:
    """Wall ms, minor faults, system and user ms per call over ``calls`` calls."""
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(calls):
        fn()
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    return {
        "wall_ms": wall / calls * 1e3,
        "minflt": (after.ru_minflt - before.ru_minflt) / calls,
        "sys_ms": (after.ru_stime - before.ru_stime) / calls * 1e3,
        "user_ms": (after.ru_utime - before.ru_utime) / calls * 1e3,
    }


def faults_case(shape: tuple[int, ...], dtype: str, rounds: int) -> dict[str, Any]:
    q, k, cos, sin = _inputs(shape, harness.DTYPES[dtype])
    qb, kb = q.clone(), k.clone()
    impls: dict[str, Impl] = {
        "cpp": lambda: rotate_pair(q, k, cos, sin, cos, sin, kernel="cpp"),
        "cpp_inplace": lambda: rotate_pair(qb, kb, cos, sin, cos, sin, kernel="cpp", inplace=True),
        "clone": lambda: (q.clone(), k.clone()),
    }
    calls = 3
    samples: dict[str, list[dict[str, float]]] = {n: [] for n in impls}
    for fn in impls.values():
        fn()  # warm-up: the kernel built and loaded, the heap in its steady state
    names = list(impls)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            samples[name].append(_per_call(impls[name], calls))
    med = {
        n: {key: statistics.median(s[key] for s in ss) for key in ss[0]}
        for n, ss in samples.items()
    }
    return {"shape": list(shape), "dtype": dtype, "calls": calls, "per_call": med}


def cpu_case(shape: tuple[int, ...], dtype: str, rounds: int) -> dict[str, Any]:
    q, k, cos, sin = _inputs(shape, harness.DTYPES[dtype])
    eq, ek = torch.empty_like(q), torch.empty_like(k)
    op = rope_cpp.load_kernel()  # the operator itself: at L2 sizes rotate_pair's checks (~20 µs)
    impls: dict[str, Impl] = {  # would be half the time
        "cpp_inplace": lambda: op.rope_([q, k], [cos, cos], [sin, sin], 1.0, False),
        "copy_": lambda: (eq.copy_(q), ek.copy_(k)),
    }
    elements = 2 * q.numel()
    calls = max(3, int(1e7 / elements))
    samples: dict[str, list[float]] = {n: [] for n in impls}
    for fn in impls.values():
        fn()
    for _ in range(rounds):
        for name, fn in impls.items():
            start = time.thread_time()
            for _ in range(calls):
                fn()
            samples[name].append((time.thread_time() - start) / calls / elements * 1e9)
    ns = {n: statistics.median(s) for n, s in samples.items()}
    return {
        "shape": list(shape),
        "dtype": dtype,
        "ns_per_element": ns,
        "inplace_x_copy": ns["cpp_inplace"] / ns["copy_"],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--heap", choices=("steady", "default"), default="default")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    settings = harness.steady_heap() if args.heap == "steady" else {}
    result: dict[str, Any] = {
        "machine": {**harness.machine(), "heap": settings, "heap_policy": args.heap},
        "faults": [faults_case(s, d, args.rounds) for s in shapes for d in harness.DTYPES],
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    result["cpu_per_element"] = [
        cpu_case(s, d, args.rounds) for s in [L2_SHAPE, *shapes] for d in harness.DTYPES
    ]
    torch.set_num_threads(threads)
    result["loadavg_end"] = os.getloadavg()
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, args.out)
    for case in result["faults"]:
        cells = "  ".join(
            f"{n}: {v['wall_ms']:.2f} ms, {v['minflt']:.0f} faults, sys {v['sys_ms']:.2f} ms"
            for n, v in case["per_call"].items()
        )
        print("x".join(map(str, case["shape"])), case["dtype"], cells)
    for case in result["cpu_per_element"]:
        ns = case["ns_per_element"]
        print(
            "x".join(map(str, case["shape"])),
            case["dtype"],
            f"1 thread, CPU ns/element: in place {ns['cpp_inplace']:.3f}, copy_ {ns['copy_']:.3f}",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
