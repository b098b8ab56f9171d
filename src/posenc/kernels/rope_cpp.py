"""Hand-written CPU RoPE kernel (``kernel="cpp"``, ``csrc/rope_cpu.cpp``): one pass over q and
k, both layouts, vectorised for AVX-512, AVX2 and NEON (``csrc/simd.h``).

Built on first use for this CPU and cached on disk (``native``): seconds once, then a load.
The kernel reads x once, rotates in float32 registers and writes once (float32, bfloat16,
float16); ``out`` may be x itself (in place). The backward rotates the gradient by -θ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .native import NativeKernel
from .rope_tables import RopeTables

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
KERNEL = NativeKernel(
    "posenc_rope_cpu",
    Path(__file__).parent / "csrc" / "rope_cpu.cpp",
    "CPU RoPE kernel",
)


def load_kernel() -> Any:
    """Build (first time) and load the extension; returns ``torch.ops.posenc_rope_cpu``.

    Raises: RuntimeError naming what is missing (a C++ compiler, ninja) when the build fails.
    """
    return KERNEL.load()


def supports(x: Tensor, cos: Tensor) -> bool:
    """Whether the kernel takes x (..., T, D) with tables cos (..., T, P): CPU, float32/bf16/fp16,
    unit last stride, at most 4 dimensions, cos broadcasting to x right-aligned."""
    # cheap attribute checks: this runs twice per call, and torch's broadcast helper costs as
    # much as the kernel at decode sizes
    nx, nc = x.dim(), cos.dim()
    if not (x.is_cpu and cos.is_cpu and x.dtype in _DTYPES and 2 <= nx <= 4 and nc <= nx):
        return False
    if x.stride(-1) != 1:
        return False
    xs, cs = x.shape, cos.shape  # leading dims of cos, right-aligned (not P)
    return all(cs[-d] in (1, xs[-d]) for d in range(2, nc + 1))


def _f32(tables: RopeTables) -> tuple[Tensor, Tensor]:
    """Float32 tables with unit last stride (what the kernel reads): cos and sin themselves, or
    their copies, made once per ``tables`` (one forward's: every layer's forward and backward
    share them; with bf16 tables, as Hugging Face's rotary embedding returns them for bf16
    models, converting all four per call cost (4, 8, 1024, 64)'s pair 261-266 µs against
    184-224 µs)."""
    return tables.float32()


def rope_pair(
    xs: list[Tensor],
    tables: list[RopeTables],
    layout: str,
    *,
    backward: bool = False,
    inplace: bool = False,
) -> list[Tensor]:
    """Each x (..., T, D) rotated by its ``RopeTables``' cos, sin (..., T, P), broadcast
    right-aligned (by -θ when ``backward``), which keep their float32 copies; features past 2P
    are copied through. No autograd (``rope.PairRotation``). ``inplace``: into the xs
    themselves (inference), returned."""
    converted = [_f32(t) for t in tables]
    cos, sin = [c for c, _ in converted], [s for _, s in converted]
    sign, interleaved = -1.0 if backward else 1.0, layout == "interleaved"
    if inplace:
        load_kernel().rope_(xs, cos, sin, sign, interleaved)
        return xs
    outs: list[Tensor] = load_kernel().rope(xs, cos, sin, sign, interleaved)
    return outs
