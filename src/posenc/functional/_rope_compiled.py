"""Opt-in fast RoPE: one kernel rotates q and k, chosen once per process.

``enable_compiled_rope()`` switches ``RoPE.rotate`` (and ``apply_rope_pair``) to a compiled
kernel of the same formula as ``functional.rotary.apply_rope``: read x once, rotate in float32
registers, write x's dtype once. Backends:

- ``"cpp"``: the hand-written CPU kernel (``_rope_cpp``), built once per machine (seconds) and
  shape-agnostic; CPU float32/bfloat16/float16 with unit last stride.
- ``"inductor"``: ``torch.compile`` of the formula, one cached kernel per shape/dtype (the first
  call per shape compiles, seconds on CPU); any device and dtype.
- ``"triton"``: posenc's Triton kernel (``_rope_triton``: q and k in one launch), for GPUs
  (any device under Triton's interpreter, ``TRITON_INTERPRET=1``).
- ``"auto"`` (default): ``"cpp"`` on CPU, ``"triton"`` on CUDA when Triton is installed
  (imported on the first CUDA call: CPU-only installs never import it), ``"inductor"``
  elsewhere; on CPU the eager path when the C++ kernel cannot be built (no compiler: Inductor
  could not build either), with one warning.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import _rope_cpp
from ._rope_torch import apply_rope_torch, full_tables, swap_pairs

Backend = Literal["auto", "cpp", "inductor", "triton"]
BACKENDS: tuple[Backend, ...] = ("auto", "cpp", "inductor", "triton")
_state: dict[str, object] = {"enabled": False, "backend": "auto", "cpp": False}
#: Kernels kept per layout (one per shape/dtype/grad combination seen); past it, new
#: combinations take the eager path (with one warning) instead of failing.
RECOMPILE_LIMIT = 256


def enable_compiled_rope(enabled: bool = True, backend: Backend = "auto") -> None:
    """Turn the fast RoPE path on (or off) for this process; builds the C++ kernel now
    (``backend`` "auto"/"cpp") so the first forward pays nothing.

    Raises: ValueError for an unknown backend; RuntimeError for ``backend="cpp"`` when the
    kernel cannot be built (no C++ compiler or ninja) and for ``backend="triton"`` without
    Triton.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if enabled and backend == "triton" and _triton() is None:
        raise RuntimeError("backend='triton' needs Triton (pip install triton)")
    cpp = False
    if enabled and backend in ("auto", "cpp"):
        try:
            _rope_cpp.load_kernel()
            cpp = True
        except RuntimeError as err:
            if backend == "cpp":
                raise
            warnings.warn(
                f"{err}; RoPE on CPU stays on the eager path (Inductor would need the same "
                "compiler)",
                stacklevel=2,
            )
    _state.update(enabled=bool(enabled), backend=backend, cpp=cpp)


def _triton() -> Any:
    """posenc's Triton kernel module, or None without Triton; imported on first need."""
    if "triton" not in _state:
        try:
            from . import _rope_triton

            _state["triton"] = _rope_triton
        except ImportError:
            _state["triton"] = None
    return _state["triton"]


def _triton_rotate(
    xs: list[Tensor], tables: list[tuple[Tensor, Tensor]], layout: str, *, backward: bool = False
) -> list[Tensor]:
    rotated: list[Tensor] = _triton().launch(xs, tables, layout, backward=backward)
    return rotated


class PairRotation(torch.autograd.Function):
    """(q, k) -> (R(θ_q) q, R(θ_k) k) by a kernel ``rotate(xs, tables, layout, backward=)``
    (C++ or Triton); backward: R(-θ) on the gradients that arrive, saving only the tables."""

    @staticmethod
    def forward(
        ctx: Any,
        rotate: Callable[..., list[Tensor]],
        q: Tensor,
        k: Tensor,
        cq: Tensor,
        sq: Tensor,
        ck: Tensor,
        sk: Tensor,
        layout: str,
    ) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(cq, sq, ck, sk)
        ctx.rotate, ctx.layout = rotate, layout
        ctx.set_materialize_grads(False)  # an unused output costs no zero-rotation
        oq, ok = rotate([q, k], [(cq, sq), (ck, sk)], layout)
        return oq, ok

    @staticmethod
    @once_differentiable  # the kernels record no graph: double backward is a clear error
    def backward(ctx: Any, gq: Tensor | None, gk: Tensor | None) -> tuple[Tensor | None, ...]:
        cq, sq, ck, sk = ctx.saved_tensors
        present = [
            (g if g.stride(-1) == 1 else g.contiguous(), (c, s))
            for g, c, s in ((gq, cq, sq), (gk, ck, sk))
            if g is not None
        ]
        grads = [g for g, _ in present]
        rotated = iter(ctx.rotate(grads, [t for _, t in present], ctx.layout, backward=True))
        dq = next(rotated) if gq is not None else None
        dk = next(rotated) if gk is not None else None
        return None, dq, dk, None, None, None, None, None


def compiled_rope_enabled() -> bool:
    """Whether ``enable_compiled_rope`` is on (and we are not already inside a compile)."""
    return bool(_state["enabled"]) and not torch.compiler.is_compiling()


def _rotate(x: Tensor, C: Tensor, S: Tensor, layout: str) -> Tensor:
    """x ⊙ C + swap(x) ⊙ S in C's dtype (float32, float64 for float64 x; tables from
    ``_rope_torch.full_tables``): one pointwise kernel over contiguous rows, 2-4x faster under
    Inductor than slicing halves."""
    R = C.shape[-1]
    rot = x[..., :R]
    P = R // 2
    # flip, not roll: Inductor vectorises the flipped (.., 2, P) view (roll is 2-5x slower)
    swapped = rot.unflatten(-1, (2, P)).flip(-2).flatten(-2) if layout == "half" else None
    swapped = swap_pairs(rot, P, layout) if swapped is None else swapped
    out = (rot.to(C.dtype) * C + swapped.to(C.dtype) * S).to(x.dtype)
    return out if x.shape[-1] == R else torch.cat([out, x[..., R:]], dim=-1)


def _pair(
    q: Tensor, k: Tensor, cq: Tensor, sq: Tensor, ck: Tensor, sk: Tensor, layout: str
) -> tuple[Tensor, Tensor]:
    return _rotate(q, cq, sq, layout), _rotate(k, ck, sk, layout)


def _pair_(
    q: Tensor, k: Tensor, cq: Tensor, sq: Tensor, ck: Tensor, sk: Tensor, layout: str
) -> tuple[Tensor, Tensor]:
    return q.copy_(_rotate(q, cq, sq, layout)), k.copy_(_rotate(k, ck, sk, layout))


@functools.cache
def _compiled(layout: str, inplace: bool) -> Callable[..., tuple[Tensor, Tensor]]:
    fn = functools.partial(_pair_ if inplace else _pair, layout=layout)
    return torch.compile(fn, dynamic=False, fullgraph=True)


def compiled_rope_pair(
    q: Tensor,
    k: Tensor,
    cos_q: Tensor,
    sin_q: Tensor,
    cos_k: Tensor,
    sin_k: Tensor,
    layout: str,
    inplace: bool = False,
) -> tuple[Tensor, Tensor]:
    """Rotate q (..., Tq, D) and k (..., Tk, D) in one kernel; ``inplace`` writes the results
    into q and k.

    Inductor: each shape/dtype/grad combination is its own cached kernel; dynamo's default
    limit of 8 recompiles per function would stop a model that sees more sequence lengths.
    """
    backend = _state["backend"]
    use_triton = backend == "triton" or (backend == "auto" and q.device.type == "cuda")
    kernel: Any = _triton() if use_triton else None
    fits = kernel is not None and q.dtype == k.dtype
    if fits and kernel.supports(q, cos_q) and kernel.supports(k, cos_k):
        if inplace or not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)):
            tables = [(cos_q, sin_q), (cos_k, sin_k)]
            oq, ok = kernel.launch([q, k], tables, layout, inplace=inplace)
            return oq, ok
        rotated_t: tuple[Tensor, Tensor] = PairRotation.apply(
            _triton_rotate, q, k, cos_q, sin_q, cos_k, sin_k, layout
        )
        return rotated_t
    use_cpp = (
        _state["cpp"]
        and q.dtype == k.dtype
        and _rope_cpp.supports(q, cos_q)
        and _rope_cpp.supports(k, cos_k)
    )
    if use_cpp:
        tables = [(cos_q, sin_q), (cos_k, sin_k)]
        if inplace:
            oq, ok = _rope_cpp.rope_pair_([q, k], tables, layout)
            return oq, ok
        if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)):
            oq, ok = _rope_cpp.rope_pair([q, k], tables, layout)  # no graph: skip the Function
            return oq, ok
        rotated: tuple[Tensor, Tensor] = PairRotation.apply(
            _rope_cpp.rope_pair, q, k, cos_q, sin_q, cos_k, sin_k, layout
        )
        return rotated
    if backend == "auto" and q.device.type == "cpu" and not _state["cpp"]:  # no compiler here
        return (
            apply_rope_torch(q, cos_q, sin_q, layout, inplace),
            apply_rope_torch(k, cos_k, sin_k, layout, inplace),
        )
    import torch._dynamo.config as dynamo_config
    from torch._dynamo.exc import FailOnRecompileLimitHit

    with dynamo_config.patch(recompile_limit=RECOMPILE_LIMIT):
        work_q, work_k = (torch.promote_types(x.dtype, torch.float32) for x in (q, k))
        cq, sq = full_tables(cos_q, sin_q, layout, work_q)
        shared = cos_k is cos_q and sin_k is sin_q and work_k == work_q
        ck, sk = (cq, sq) if shared else full_tables(cos_k, sin_k, layout, work_k)
        try:
            return _compiled(layout, inplace)(q, k, cq, sq, ck, sk)
        except FailOnRecompileLimitHit:  # raised before running: q and k are untouched
            if not _state.get("warned_limit"):
                _state["warned_limit"] = True
                warnings.warn(
                    f"compiled RoPE: {RECOMPILE_LIMIT} shape/dtype combinations compiled for "
                    f"layout {layout!r}; new ones take the eager path",
                    RuntimeWarning,
                    stacklevel=3,
                )
    return (
        apply_rope_torch(q, cos_q, sin_q, layout, inplace),
        apply_rope_torch(k, cos_k, sin_k, layout, inplace),
    )
