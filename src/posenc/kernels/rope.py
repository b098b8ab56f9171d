"""RoPE kernels behind one entry point: ``rotate_pair`` rotates q and k by the kernel it is given.

Each kernel computes ``posenc.functional.apply_rope`` (and is tested against it); a ``RoPE``
module runs the one named by its ``kernel`` argument:

- ``"eager"`` (``rope_eager``, the default): three PyTorch passes per tensor, backward = the
  inverse rotation; any device and dtype. bfloat16/float16 are rotated in their own dtype.
- ``"cpp"`` (``rope_cpp``): the hand-written CPU kernel, one pass over q and k; float32/bfloat16/
  float16 computed in float32. Built on first use per machine (seconds, said once in the log;
  a RuntimeError naming what is missing when it cannot be built), then loaded from disk.
- ``"inductor"`` (``rope_inductor``): ``torch.compile`` of the formula, one kernel per
  shape/dtype (the first call per shape compiles: seconds on CPU); any device and dtype.
- ``"triton"`` (``rope_triton``): q and k in one Triton launch, for GPUs (or CPU tensors under
  ``TRITON_INTERPRET=1``); needs Triton (``pip install "posenc[triton]"``).
- ``"auto"``: ``"cpp"`` on CPU tensors when the kernel builds (otherwise one warning, then
  ``"eager"``), ``"triton"`` on CUDA tensors when Triton is installed (imported on the first CUDA
  call), ``"eager"`` anywhere else.

Whatever the kernel, ``"eager"`` rotates: inputs the chosen kernel does not take (``cpp``: CPU
tensors; ``cpp``/``triton``: 2 to 4 dimensions, float32/bfloat16/float16 with unit last stride,
q and k of one dtype), cos/sin that need gradients (learnable phases: only the eager
kernel differentiates them) and calls while ``torch.compile`` traces (Dynamo traces the eager
kernel into the model's graph).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..functional.rotary import check_rope_args, check_rope_inplace
from . import rope_cpp, rope_eager, rope_inductor
from .rope_tables import RopeTables, pair_tables

Kernel = Literal["auto", "eager", "cpp", "inductor", "triton"]
KERNELS: tuple[Kernel, ...] = ("auto", "eager", "cpp", "inductor", "triton")
NO_TRITON = "kernel='triton' needs Triton (pip install 'posenc[triton]')"


def check_kernel(kernel: str) -> Kernel:
    """``kernel`` if it names a RoPE kernel. Raises: ValueError for another name, RuntimeError
    for ``"triton"`` without Triton installed (checked without importing it)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "triton" and importlib.util.find_spec("triton") is None:
        raise RuntimeError(NO_TRITON)
    return kernel


def rotate_pair(
    q: Tensor,
    k: Tensor,
    cos_q: Tensor,
    sin_q: Tensor,
    cos_k: Tensor,
    sin_k: Tensor,
    *,
    layout: str = "half",
    inplace: bool = False,
    kernel: str = "eager",
    prepared: tuple[RopeTables | None, RopeTables | None] = (None, None),
) -> tuple[Tensor, Tensor]:
    """(R(θ_q) q, R(θ_k) k) by ``kernel`` (the module docstring says which runs where).
    ``prepared``: q's and k's ``RopeTables`` (one forward's), so the tables kernels derive are
    made once for every layer.

    Shapes: q (..., Tq, D), k (..., Tk, D); cos/sin broadcastable to (..., T, P), 2P <= D (as
    ``posenc.functional.apply_rope_pair``, with the same checks and errors). ``inplace=True``
    (inference) writes the results into q and k and returns them.
    Raises: ValueError for an unknown kernel (and the formula's errors); RuntimeError for
    ``"cpp"`` where the kernel cannot be built and for ``"triton"`` without Triton.
    """
    check_rope_args(q, cos_q, sin_q, layout, "q")
    check_rope_args(k, cos_k, sin_k, layout, "k")
    if inplace:
        check_rope_inplace(q, cos_q, sin_q, "q")
        check_rope_inplace(k, cos_k, sin_k, "k")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    tables = pair_tables(cos_q, sin_q, cos_k, sin_k, prepared)
    chosen = _choose(kernel, q, k, cos_q, sin_q, cos_k, sin_k)
    if chosen == "inductor":
        return rope_inductor.rope_pair(q, k, *tables, layout, inplace)
    if chosen == "eager":
        return rope_eager.rope_pair(q, k, *tables, layout, inplace)
    rotate = rope_cpp.rope_pair if chosen == "cpp" else _triton().rope_pair
    if inplace or not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)):
        oq, ok = rotate([q, k], list(tables), layout, inplace=inplace)  # no graph: no Function
        return oq, ok
    rotated: tuple[Tensor, Tensor] = PairRotation.apply(rotate, q, k, *tables, layout)
    return rotated


def rotate_tables(
    q: Tensor,
    k: Tensor,
    tq: RopeTables,
    tk: RopeTables,
    *,
    layout: str = "half",
    inplace: bool = False,
    kernel: str = "eager",
) -> tuple[Tensor, Tensor]:
    """``rotate_pair`` of q by its one forward's tables ``tq`` and k by ``tk`` (what the
    rotary encodings hand over: the kernels' derived tables are made once for every layer)."""
    return rotate_pair(
        q,
        k,
        tq.cos,
        tq.sin,
        tk.cos,
        tk.sin,
        layout=layout,
        inplace=inplace,
        kernel=kernel,
        prepared=(tq, tk),
    )


def _choose(kernel: Kernel, q: Tensor, k: Tensor, *tables: Tensor) -> Kernel:
    """The kernel that rotates these inputs: ``kernel``, resolved for ``"auto"``, or
    ``"eager"`` where ``kernel`` does not take them."""
    if kernel == "eager" or torch.compiler.is_compiling():
        return "eager"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tables):
        return "eager"  # learnable phases: the custom backwards return no table gradients
    if kernel == "auto":
        kernel = _auto(q.device)
    if kernel in ("cpp", "triton"):
        module = rope_cpp if kernel == "cpp" else _triton()
        if module is None:
            raise RuntimeError(NO_TRITON)
        takes = module.supports(q, tables[0]) and module.supports(k, tables[2])
        return kernel if takes and q.dtype == k.dtype else "eager"
    return kernel


def _auto(device: torch.device) -> Kernel:
    """``kernel="auto"`` on ``device``: cpp on CPU (if it builds), triton on CUDA (if
    installed), eager elsewhere."""
    if device.type == "cpu":
        fallback = "kernel='auto' rotates RoPE on CPU with the eager kernel"
        return "cpp" if rope_cpp.KERNEL.available(fallback) else "eager"
    if device.type == "cuda" and _triton() is not None:
        return "triton"
    return "eager"


@functools.cache
def _triton() -> Any:
    """posenc's Triton kernel module, or None without Triton; imported on first need."""
    try:
        from . import rope_triton
    except ImportError:
        return None
    return rope_triton


#: A one-pass kernel: ``rotate(xs, tables, layout, *, backward=, inplace=)``, ``tables`` each
#: x's ``RopeTables``.
Rotate = Callable[..., list[Tensor]]


class PairRotation(torch.autograd.Function):
    """(q, k) -> (R(θ_q) q, R(θ_k) k) by a kernel ``rotate(xs, tables, layout, backward=)``
    (C++ or Triton); backward: R(-θ) on the gradients that arrive, saving only the tables."""

    @staticmethod
    def forward(
        ctx: Any, rotate: Rotate, q: Tensor, k: Tensor, tq: RopeTables, tk: RopeTables, layout: str
    ) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(tq.cos, tq.sin, tk.cos, tk.sin)  # autograd's in-place check
        ctx.rotate, ctx.layout, ctx.tables = rotate, layout, (tq, tk)
        ctx.set_materialize_grads(False)  # an unused output costs no zero-rotation
        oq, ok = rotate([q, k], [tq, tk], layout)
        return oq, ok

    @staticmethod
    @once_differentiable  # the kernels record no graph: double backward is a clear error
    def backward(ctx: Any, gq: Tensor | None, gk: Tensor | None) -> tuple[Tensor | None, ...]:
        _ = ctx.saved_tensors  # raises if cos/sin were changed in place since the forward
        present = [
            (g if g.stride(-1) == 1 else g.contiguous(), t)
            for g, t in zip((gq, gk), ctx.tables, strict=True)
            if g is not None
        ]
        grads, tables = [p[0] for p in present], [p[1] for p in present]
        rotated = iter(ctx.rotate(grads, tables, ctx.layout, backward=True))
        dq = next(rotated) if gq is not None else None
        dk = next(rotated) if gk is not None else None
        return None, dq, dk, None, None, None
