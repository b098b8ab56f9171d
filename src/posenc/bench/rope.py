"""RoPE benchmark: posenc's eager, compiled and in-place paths against the anchors and floors.

Cases: (B, H, T, D) x dtype x {forward, forward+backward}; q and k rotated per call. posenc:
the default eager path, the opt-in fast path (``enable_compiled_rope()``: the C++ kernel on
CPU) and its Inductor backend, and the in-place forms. Anchors (each skipped, and said so, when
not installed): Hugging Face ``apply_rotary_pos_emb`` with cos/sin given in the input dtype
(what ``LlamaRotaryEmbedding`` returns), rotary-embedding-torch, x-transformers, torchtune
(fed its own (B, T, H, D) layout). Floors: ``clone`` of q and k (out of place) and ``copy_``
into preallocated buffers (in place). The fast path is switched on around each sample, outside
the clock, as a user switches it on once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch

from .. import functional as PF
from ..functional._rope_compiled import Backend
from .harness import as_json, interleaved

SHAPES = [(1, 32, 2048, 128), (4, 8, 1024, 64), (1, 8, 8192, 64)]
QUICK_SHAPES = [(1, 8, 512, 64)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
Impl = Callable[[], Any]
ANCHORS = ("hf_apply_rotary_pos_emb", "rotary_embedding_torch", "x_transformers", "torchtune")
#: Tensors whose gradients a forward+backward sample resets (anchors fed their own layout).
_LEAVES: list[torch.Tensor] = []


def _tables(T: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = PF.rope_cos_sin(torch.arange(T), PF.rope_inv_freq(D, xp=PF.torch_xp))
    return cos.float(), sin.float()  # (T, D/2)


@contextmanager
def _fast_path(backend: Backend | None) -> Iterator[None]:
    """``enable_compiled_rope`` on (``backend``) or off for the duration of one sample."""
    PF.enable_compiled_rope(backend is not None, backend=backend or "auto")
    try:
        yield
    finally:
        PF.enable_compiled_rope(False)


#: Fast-path backend of each posenc implementation (None: the default eager path).
BACKEND: dict[str, Backend | None] = {
    "posenc_eager": None,
    "posenc_cpp": "cpp",
    "posenc_inductor": "inductor",
    "posenc_inplace": None,
    "posenc_inplace_cpp": "cpp",
}


def settings() -> dict[str, Callable[[], AbstractContextManager[None]]]:
    """The switch each posenc implementation runs under (see ``harness.interleaved``)."""
    return {name: functools.partial(_fast_path, backend) for name, backend in BACKEND.items()}


def _posenc(q: torch.Tensor, k: torch.Tensor) -> dict[str, Impl]:
    T, D = q.shape[-2:]
    cos, sin = _tables(T, D)
    qb, kb = q.detach().clone(), k.detach().clone()

    def pair() -> Any:
        return PF.apply_rope_pair(q, k, cos, sin, cos, sin)

    def pair_inplace() -> Any:
        with torch.no_grad():
            return PF.apply_rope_pair(qb, kb, cos, sin, cos, sin, inplace=True)

    return {name: pair_inplace if name.startswith("posenc_inplace") else pair for name in BACKEND}


def _anchors(q: torch.Tensor, k: torch.Tensor) -> tuple[dict[str, Impl], list[str]]:
    _LEAVES[:] = [q, k]
    impls: dict[str, Impl] = {}
    skipped: list[str] = []
    T, D = q.shape[-2:]
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        cos, sin = _tables(T, D)
        hc = torch.cat([cos, cos], -1)[None].to(q.dtype)  # (1, T, D) as HF's rotary returns
        hs = torch.cat([sin, sin], -1)[None].to(q.dtype)
        impls["hf_apply_rotary_pos_emb"] = lambda: apply_rotary_pos_emb(q, k, hc, hs)
    except ImportError:
        skipped.append("transformers")
    try:
        from rotary_embedding_torch import RotaryEmbedding

        ret = RotaryEmbedding(D)
        impls["rotary_embedding_torch"] = lambda: (
            ret.rotate_queries_or_keys(q),
            ret.rotate_queries_or_keys(k),
        )
    except ImportError:
        skipped.append("rotary-embedding-torch")
    try:
        from x_transformers.x_transformers import RotaryEmbedding as XRot
        from x_transformers.x_transformers import apply_rotary_pos_emb as x_apply

        xrot = XRot(D)
        t = torch.arange(T)

        def xt() -> Any:
            freqs, scale = xrot(t)
            return x_apply(q, freqs, scale), x_apply(k, freqs, scale)

        impls["x_transformers"] = xt
    except ImportError:
        skipped.append("x-transformers")
    try:
        from torchtune.modules import RotaryPositionalEmbeddings as TuneRope

        tune = TuneRope(D, max_seq_len=T)
        qt = q.detach().transpose(1, 2).contiguous().requires_grad_(q.requires_grad)
        kt = k.detach().transpose(1, 2).contiguous().requires_grad_(k.requires_grad)
        impls["torchtune"] = lambda: (tune(qt).transpose(1, 2), tune(kt).transpose(1, 2))
        _LEAVES.extend([qt, kt])
    except ImportError:
        skipped.append("torchtune")
    return impls, skipped


def _floors(q: torch.Tensor, k: torch.Tensor) -> dict[str, Impl]:
    qb, kb = torch.empty_like(q), torch.empty_like(k)
    return {
        "floor_clone": lambda: (q.detach().clone(), k.detach().clone()),
        "floor_copy_into": lambda: (qb.copy_(q.detach()), kb.copy_(k.detach())),
    }


def _with_backward(impls: dict[str, Impl], q: torch.Tensor, k: torch.Tensor) -> dict[str, Impl]:
    gq, gk = torch.randn_like(q), torch.randn_like(k)

    def wrap(fn: Impl) -> Impl:
        def run() -> None:
            oq, ok = fn()
            torch.autograd.backward([oq, ok], [gq, gk])
            for leaf in _LEAVES:
                leaf.grad = None

        return run

    skip = ("floor", "posenc_inplace")
    return {n: wrap(f) for n, f in impls.items() if not n.startswith(skip)}


def run_case(
    shape: tuple[int, int, int, int], dtype: str, backward: bool, rounds: int
) -> dict[str, Any]:
    """Time every implementation on one case; ratios are to HF and to the copy floors."""
    torch.manual_seed(0)
    B, H, T, D = shape
    q = torch.randn(B, H, T, D, dtype=DTYPES[dtype], requires_grad=backward)
    k = torch.randn(B, H, T, D, dtype=DTYPES[dtype], requires_grad=backward)
    anchors, skipped = _anchors(q, k)
    impls = {**_posenc(q, k), **anchors}
    impls = _with_backward(impls, q, k) if backward else {**impls, **_floors(q, k)}
    timings = interleaved(impls, rounds=rounds, settings=settings())
    result: dict[str, Any] = {
        "shape": list(shape),
        "dtype": dtype,
        "mode": "fwd+bwd" if backward else "fwd",
        "skipped_anchors": skipped,
        "us": {n: as_json(t) for n, t in timings.items()},
    }
    med = {n: t.median for n, t in timings.items()}
    ref = {
        "hf": med.get("hf_apply_rotary_pos_emb"),
        "clone": med.get("floor_clone"),
        "copy_into": med.get("floor_copy_into"),
    }
    result["speedup_vs_hf"] = {n: ref["hf"] / m for n, m in med.items()} if ref["hf"] else {}
    anchor_times = {n: m for n, m in med.items() if n in ANCHORS}
    if anchor_times:
        fastest = min(anchor_times, key=anchor_times.__getitem__)
        result["fastest_anchor"] = fastest
        result["speedup_vs_fastest_anchor"] = {
            n: anchor_times[fastest] / m for n, m in med.items() if n.startswith("posenc")
        }
    if ref["clone"]:
        result["x_clone_floor"] = {n: m / ref["clone"] for n, m in med.items()}
    if ref["copy_into"]:
        result["inplace_x_copy_floor"] = {
            n: med[n] / ref["copy_into"] for n in ("posenc_inplace", "posenc_inplace_cpp")
        }
    return result


def run(quick: bool = False) -> list[dict[str, Any]]:
    """All RoPE cases (``quick``: one small shape, few rounds, for CI smoke runs)."""
    shapes = QUICK_SHAPES if quick else SHAPES
    rounds = 3 if quick else 11
    return [
        run_case(shape, dtype, backward, rounds)
        for shape in shapes
        for dtype in DTYPES
        for backward in (False, True)
    ]
