"""Where the eager RoPE path's time goes in bf16: the cost of each PyTorch pass, per process.

The eager path (``posenc.kernels.rope_eager``) rotates with PyTorch elementwise ops only.
This script times, for one q-sized tensor, the passes it and Hugging Face are built from
(``clone``, ``copy_``, ``torch.roll``, ``x * C``, ``addcmul_``, dtype conversions, a
half-width product into a strided half of the output) and the three whole forms for q and k
(HF's rotate_half, posenc's swap form, the half-width form), interleaved with the harness.
Each process is fresh: memory-bound passes move with what other tenants do to the shared
cache, so the spread between processes is part of the result.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/eager_passes.py --out FILE.json [--processes 3]
        [--shape 1x32x2048x128]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import torch

from posenc.bench.harness import as_json, interleaved, machine, steady_heap

SHAPE = (1, 32, 2048, 128)  # (B, H, T, D): 16 MiB per bf16 tensor


def one_process(shape: tuple[int, int, int, int]) -> dict[str, Any]:
    """Medians (µs) of every pass and form in this process."""
    heap = steady_heap()
    B, H, T, D = shape
    P, bf = D // 2, torch.bfloat16
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(B, H, T, D, generator=gen).to(bf) for _ in range(2))
    C, S = (torch.randn(T, D, generator=gen).to(bf) for _ in range(2))
    C32, q32, out = C.float(), q.float(), torch.empty_like(q)
    (_, b), (out_a, _), (s_a, s_b) = q.chunk(2, -1), out.chunk(2, -1), S.chunk(2, -1)

    def hf() -> Any:  # x cos + rotate_half(x) sin, rotate_half = cat(-x2, x1)
        return [x * C + torch.cat((-x[..., P:], x[..., :P]), -1) * S for x in (q, k)]

    def swap() -> Any:  # posenc's eager form: swap copy, then mul_ and addcmul_
        return [torch.roll(x, P, -1).mul_(S).addcmul_(x, C) for x in (q, k)]

    def halves() -> Any:  # each output half from the other input half, then addcmul_
        outs = []
        for x in (q, k):
            o = torch.empty_like(x)
            (xa, xb), (oa, ob) = x.chunk(2, -1), o.chunk(2, -1)
            torch.mul(xb, s_a, out=oa)
            torch.mul(xa, s_b, out=ob)
            outs.append(o.addcmul_(x, C))
        return outs

    impls = {
        "clone": lambda: q.clone(),
        "copy_": lambda: out.copy_(q),
        "roll": lambda: torch.roll(q, P, -1),
        "mul": lambda: q * C,
        "addcmul_": lambda: out.addcmul_(q, C),
        "to_float32": lambda: q.float(),
        "to_bfloat16": lambda: q32.to(bf),
        "mul_float32": lambda: q32 * C32,
        "mul_mixed": lambda: q * C32,
        "half_mul_strided": lambda: torch.mul(b, s_a, out=out_a),
        "qk_hf": hf,
        "qk_swap": swap,
        "qk_halves": halves,
    }
    timings = interleaved(impls, rounds=15)
    return {"heap": heap, "us": {n: as_json(t) for n, t in timings.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--shape", default="x".join(map(str, SHAPE)), help="BxHxTxD")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    B, H, T, D = (int(n) for n in args.shape.split("x"))
    if args.child:
        json.dump(one_process((B, H, T, D)), sys.stdout)
        return
    runs = []
    for i in range(args.processes):
        child = [sys.executable, __file__, "--child", "--out", "-", "--shape", args.shape]
        done = subprocess.run(child, capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout))
        us = runs[-1]["us"]
        print(
            f"process {i}: copy_ {us['copy_']['median']:.0f} µs, mul {us['mul']['median']:.0f},"
            f" half_mul_strided {us['half_mul_strided']['median']:.0f}; q+k: HF"
            f" {us['qk_hf']['median']:.0f}, swap {us['qk_swap']['median']:.0f}, halves"
            f" {us['qk_halves']['median']:.0f}"
        )
    result = {"machine": machine(), "shape": [B, H, T, D], "dtype": "bf16", "processes": runs}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
