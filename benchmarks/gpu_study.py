"""GPU study: where the Triton RoPE kernel's time goes, and which path an offset-only score
bias should take on CUDA by default. Needs a CUDA GPU, Triton and (optional) Liger-Kernel.

    python benchmarks/gpu_study.py --out benchmarks/results/gpu-study.json

RoPE (q and k of one shape, float32 cos/sin tables of (T, D/2) given): each implementation is
timed two ways, in interleaved rounds (medians):
- ``eager``: back-to-back calls, one synchronisation per sample: what a Python caller sees,
  the larger of the host's launch work and the GPU's;
- ``graph``: the same calls captured in a CUDA graph and replayed: GPU time alone.
Contenders: posenc's full ``rotate_pair(kernel="triton")``, its ``launch`` with several launch
shapes (rows per program, warps), HF's ``apply_rotary_pos_emb``, Liger-Kernel's Triton kernel,
and a clone of q and k (the memory floor).

Bias (ALiBi and T5, one query block of T = 4096, 8 heads of 64): SDPA without a bias (the
floor); posenc's blockwise path (``bias_backend="blocks"``, the CUDA default before this
study); compiled FlexAttention (``"flex"``); the dense (H, T, T) bias gathered from the
per-offset table and handed to SDPA as ``attn_mask``; the dense bias from ``pe.bias``.
Forward times and peak extra memory.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import posenc
from posenc import functional as PF
from posenc.attention.backends import offset_table
from posenc.bench.bias import _impls as bias_impls
from posenc.bench.harness import DTYPES, interleaved, machine
from posenc.kernels import rope_triton
from posenc.kernels.rope import rotate_pair

Impl = Callable[[], Any]
ROPE_SHAPES = [(1, 32, 2048, 128), (4, 8, 1024, 64), (1, 8, 8192, 64), (8, 32, 4096, 128)]
LAUNCH_SHAPES = [(4, 4), (8, 4), (16, 4), (32, 4), (16, 8), (64, 8)]  # (rows, warps)


def graph_time(fn: Impl, calls: int = 20, replays: int = 15) -> float:
    """Median seconds per call of ``fn`` captured ``calls`` times in one CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / calls)
    samples.sort()
    return samples[len(samples) // 2]


def rope_case(shape: tuple[int, int, int, int], dtype: torch.dtype) -> dict[str, Any]:
    torch.manual_seed(0)
    q, k = (torch.randn(shape, dtype=dtype, device="cuda") for _ in range(2))
    T, D = shape[2], shape[3]
    cos, sin = (
        t.float().cuda()
        for t in PF.rope_cos_sin(torch.arange(T), PF.rope_inv_freq(D, xp=PF.torch_xp))
    )
    hc = torch.cat([cos, cos], -1)[None].to(dtype)
    hs = torch.cat([sin, sin], -1)[None].to(dtype)
    impls: dict[str, Impl] = {
        "clone": lambda: (q.clone(), k.clone()),
        "posenc_rotate_pair": lambda: rotate_pair(q, k, cos, sin, cos, sin, kernel="triton"),
    }
    for rows, warps in LAUNCH_SHAPES:
        impls[f"posenc_launch_r{rows}_w{warps}"] = lambda rows=rows, warps=warps: (
            rope_triton.launch([q, k], [(cos, sin), (cos, sin)], "half", rows=rows, num_warps=warps)
        )
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    impls["hf"] = lambda: apply_rotary_pos_emb(q, k, hc, hs)
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        qt, kt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k))
        impls["liger"] = lambda: liger_rotary_pos_emb(qt, kt, hc, hs)
    except ImportError:
        pass
    with torch.no_grad():
        eager = interleaved(impls, rounds=9, device="cuda")
        graph = {n: graph_time(f) for n, f in impls.items()}
    moved = 4 * q.numel() * q.element_size()  # q and k read and written once
    return {
        "shape": list(shape),
        "dtype": str(dtype).removeprefix("torch."),
        "eager_us": {n: t.median * 1e6 for n, t in eager.items()},
        "graph_us": {n: s * 1e6 for n, s in graph.items()},
        "graph_GBps": {n: moved / s / 1e9 for n, s in graph.items()},
    }


def bias_case(name: str, causal: bool, dtype: str, T: int = 4096) -> dict[str, Any]:
    """posenc.bench.bias's contenders on CUDA, plus the dense bias gathered from the
    per-offset table (one (H, 2T - 1) table, one gather) handed to SDPA."""
    H, D = 8, 64
    impls = bias_impls(name, T, H, D, causal, dtype, device="cuda")
    torch.manual_seed(0)
    pe = posenc.build_for_model(name, dim=H * D, n_heads=H, max_len=T).to("cuda", DTYPES[dtype])
    g = torch.Generator().manual_seed(0)  # the same q, k, v as bias_impls draws
    q, k, v = (torch.randn(1, H, T, D, generator=g).to("cuda", DTYPES[dtype]) for _ in range(3))
    pos = torch.arange(T, device="cuda")

    def gathered() -> torch.Tensor:
        table = offset_table(pe, 1 - T, T - 1, H).to(q.dtype)  # (H, 2T - 1)
        offsets = pos[:, None] - pos[None, :] + (T - 1)  # (T, T) column of offset i - j
        bias = table[:, offsets]  # (H, T, T)
        if causal:
            bias = bias.masked_fill(offsets < T - 1, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])

    impls["gathered_dense"] = gathered
    out: dict[str, Any] = {"encoding": name, "causal": causal, "dtype": dtype, "T": T}
    with torch.no_grad():
        ref = impls["dense_bias"]()
        out["max_abs_diff_vs_dense"] = {
            n: float((f() - ref).abs().max()) for n, f in impls.items() if n != "sdpa_no_bias"
        }
        timings = interleaved(impls, rounds=7, device="cuda")
        peak = {}
        for n, f in impls.items():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            f()
            torch.cuda.synchronize()
            peak[n] = (torch.cuda.max_memory_allocated() - base) / 2**20
    out["ms"] = {n: t.median * 1e3 for n, t in timings.items()}
    out["peak_extra_MiB"] = peak
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-study.json"))
    parser.add_argument("--skip-bias", action="store_true")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    result: dict[str, Any] = {"machine": machine(), "rope": [], "bias": [], "complete": False}

    def save() -> None:
        args.out.write_text(json.dumps(result, indent=1))

    for shape in ROPE_SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            t0 = time.time()
            result["rope"].append(rope_case(shape, dtype))
            save()
            case = result["rope"][-1]
            best = min(case["graph_us"], key=case["graph_us"].get)
            print(
                f"rope {shape} {dtype}: {time.time() - t0:.1f}s; graph us "
                + ", ".join(f"{n}={u:.1f}" for n, u in case["graph_us"].items())
                + "; eager us "
                + ", ".join(f"{n}={u:.1f}" for n, u in case["eager_us"].items())
                + f"; best graph {best}",
                flush=True,
            )
    if not args.skip_bias:
        for name in ("alibi", "t5"):
            for causal in (True, False):
                for dtype in ("fp32", "bf16"):
                    result["bias"].append(bias_case(name, causal, dtype))
                    save()
                    c = result["bias"][-1]
                    print(
                        f"bias {name} causal={causal} {dtype}: ms "
                        + ", ".join(f"{n}={m:.2f}" for n, m in c["ms"].items())
                        + f"; MiB {c['peak_extra_MiB']}; diff {c['max_abs_diff_vs_dense']}",
                        flush=True,
                    )
    result["complete"] = True
    save()


if __name__ == "__main__":
    main()
