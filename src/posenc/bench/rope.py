"""RoPE benchmark: posenc's eager, compiled and in-place paths against the anchors and floors.

Cases: (B, H, T, D) x dtype x {forward, forward+backward}; q and k rotated per call by
``posenc.kernels.rope.rotate_pair`` with an explicit kernel: the default "eager", the fast one
(``FAST_KERNEL``: "cpp" on CPU, "triton" on CUDA, as ``kernel="auto"`` picks there) and
"inductor", and the in-place forms of the eager and fast kernels. Anchors (each
skipped, and said so, when not installed): Hugging Face ``apply_rotary_pos_emb`` with cos/sin
given in the input dtype (what ``LlamaRotaryEmbedding`` returns), rotary-embedding-torch,
x-transformers, torchtune (fed its own (B, T, H, D) layout), and with the Triton fast path (the
GPU suite) Liger-Kernel's ``liger_rotary_pos_emb``: HF's signature, fed the (B, H, T, D) view of
(B, T, H, D) memory that HF's attention passes, which it rotates in place. Floors: ``clone`` of
q and k (out of place) and ``copy_`` into preallocated buffers (in place; on a GPU, the
device-to-device copy bandwidth).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from .. import functional as PF
from ..kernels.rope import Kernel, rotate_pair
from .harness import DTYPES, as_json, interleaved

SHAPES = [(1, 32, 2048, 128), (4, 8, 1024, 64), (1, 8, 8192, 64)]
QUICK_SHAPES = [(1, 8, 512, 64)]
Impl = Callable[[], Any]
ANCHORS = (
    "hf_apply_rotary_pos_emb",
    "rotary_embedding_torch",
    "x_transformers",
    "torchtune",
    "liger_rotary_pos_emb",
)
#: The fast kernel on each device: the C++ kernel on CPU, the Triton kernel on CUDA.
FAST_KERNEL: dict[str, Kernel] = {"cpu": "cpp", "cuda": "triton"}
#: Tensors whose gradients a forward+backward sample resets (anchors fed their own layout).
_LEAVES: list[torch.Tensor] = []


def _tables(T: int, D: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = PF.rope_cos_sin(torch.arange(T), PF.rope_inv_freq(D, xp=PF.torch_xp))
    return cos.float().to(device), sin.float().to(device)  # (T, D/2)


def kernels(fast: Kernel) -> dict[str, Kernel]:
    """The RoPE kernel each posenc implementation runs (``posenc.kernels.rope``)."""
    return {
        "posenc_eager": "eager",
        f"posenc_{fast}": fast,
        "posenc_inductor": "inductor",
        "posenc_inplace": "eager",
        f"posenc_inplace_{fast}": fast,
    }


def _posenc(q: torch.Tensor, k: torch.Tensor, fast: Kernel) -> dict[str, Impl]:
    T, D = q.shape[-2:]
    cos, sin = _tables(T, D, q.device)
    qb, kb = q.detach().clone(), k.detach().clone()

    def pair(kernel: Kernel) -> Impl:
        return lambda: rotate_pair(q, k, cos, sin, cos, sin, kernel=kernel)

    def pair_inplace(kernel: Kernel) -> Impl:
        def run() -> Any:
            with torch.no_grad():
                return rotate_pair(qb, kb, cos, sin, cos, sin, inplace=True, kernel=kernel)

        return run

    return {
        name: (pair_inplace if name.startswith("posenc_inplace") else pair)(kernel)
        for name, kernel in kernels(fast).items()
    }


def _anchors(
    q: torch.Tensor, k: torch.Tensor, liger: bool = False
) -> tuple[dict[str, Impl], list[str]]:
    _LEAVES[:] = [q, k]
    impls: dict[str, Impl] = {}
    skipped: list[str] = []
    T, D = q.shape[-2:]
    cos, sin = _tables(T, D, q.device)
    hc = torch.cat([cos, cos], -1)[None].to(q.dtype)  # (1, T, D) as HF's rotary returns
    hs = torch.cat([sin, sin], -1)[None].to(q.dtype)
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        impls["hf_apply_rotary_pos_emb"] = lambda: apply_rotary_pos_emb(q, k, hc, hs)
    except ImportError:
        skipped.append("transformers")
    try:
        from rotary_embedding_torch import RotaryEmbedding

        ret = RotaryEmbedding(D).to(q.device)
        impls["rotary_embedding_torch"] = lambda: (
            ret.rotate_queries_or_keys(q),
            ret.rotate_queries_or_keys(k),
        )
    except ImportError:
        skipped.append("rotary-embedding-torch")
    try:
        from x_transformers.x_transformers import RotaryEmbedding as XRot
        from x_transformers.x_transformers import apply_rotary_pos_emb as x_apply

        xrot = XRot(D).to(q.device)
        t = torch.arange(T, device=q.device)

        def xt() -> Any:
            freqs, scale = xrot(t)
            return x_apply(q, freqs, scale), x_apply(k, freqs, scale)

        impls["x_transformers"] = xt
    except ImportError:
        skipped.append("x-transformers")
    try:
        from torchtune.modules import RotaryPositionalEmbeddings as TuneRope

        tune = TuneRope(D, max_seq_len=T).to(q.device)
        qt = q.detach().transpose(1, 2).contiguous().requires_grad_(q.requires_grad)
        kt = k.detach().transpose(1, 2).contiguous().requires_grad_(k.requires_grad)
        impls["torchtune"] = lambda: (tune(qt).transpose(1, 2), tune(kt).transpose(1, 2))
        _LEAVES.extend([qt, kt])
    except ImportError:
        skipped.append("torchtune")
    if liger:  # a Triton kernel: the GPU suite's anchor
        try:
            from liger_kernel.transformers.rope import liger_rotary_pos_emb

            # (B, T, H, D) memory seen as (B, H, T, D), as HF's attention hands it over
            ql = q.detach().transpose(1, 2).contiguous().requires_grad_(q.requires_grad)
            kl = k.detach().transpose(1, 2).contiguous().requires_grad_(k.requires_grad)
            qv, kv = ql.transpose(1, 2), kl.transpose(1, 2)
            impls["liger_rotary_pos_emb"] = lambda: liger_rotary_pos_emb(qv, kv, hc, hs)
            _LEAVES.extend([ql, kl])
        except ImportError:
            skipped.append("liger-kernel")
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
    shape: tuple[int, int, int, int],
    dtype: str,
    backward: bool,
    rounds: int,
    device: str = "cpu",
    fast: Kernel | None = None,
) -> dict[str, Any]:
    """Time every implementation on one case; ratios are to HF, to the fastest anchor and to
    the copy floors. ``fast``: the fast kernel (default ``FAST_KERNEL[device]``)."""
    fast = fast or FAST_KERNEL[torch.device(device).type]
    torch.manual_seed(0)
    B, H, T, D = shape
    q = torch.randn(B, H, T, D, dtype=DTYPES[dtype], device=device, requires_grad=backward)
    k = torch.randn(B, H, T, D, dtype=DTYPES[dtype], device=device, requires_grad=backward)
    anchors, skipped = _anchors(q, k, liger=fast == "triton")
    impls = {**_posenc(q, k, fast), **anchors}
    impls = _with_backward(impls, q, k) if backward else {**impls, **_floors(q, k)}
    dev = torch.device(device).type
    timings = interleaved(impls, rounds=rounds, device=dev)
    moved = 2 * (q.numel() + k.numel()) * q.element_size() * (2 if backward else 1)
    result: dict[str, Any] = {
        "shape": list(shape),
        "dtype": dtype,
        "mode": "fwd+bwd" if backward else "fwd",
        "device": dev,
        "fast_backend": fast,
        "skipped_anchors": skipped,
        "us": {n: as_json(t) for n, t in timings.items()},
        # q and k read and written once per direction: what a one-pass kernel must move
        "GBps": {n: moved / t.median / 1e9 for n, t in timings.items()},
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
            n: med[n] / ref["copy_into"] for n in ("posenc_inplace", f"posenc_inplace_{fast}")
        }
        # the share of the copy bandwidth each reaches (the GPU target: >= 0.8 for the kernel)
        result["copy_bandwidth_fraction"] = {
            n: ref["copy_into"] / m for n, m in med.items() if n.startswith("posenc")
        }
    if "liger_rotary_pos_emb" in med:
        liger = med["liger_rotary_pos_emb"]
        ours = {n: m for n, m in med.items() if n.startswith("posenc")}
        result["speedup_vs_liger"] = {n: liger / m for n, m in ours.items()}
    return result


def run(quick: bool = False, device: str = "cpu") -> list[dict[str, Any]]:
    """All RoPE cases on ``device`` (``quick``: one small shape, few rounds, for CI smoke runs)."""
    shapes = QUICK_SHAPES if quick else SHAPES
    rounds = 3 if quick else 11
    return [
        run_case(shape, dtype, backward, rounds, device=device)
        for shape in shapes
        for dtype in DTYPES
        for backward in (False, True)
    ]


def _median_seconds(fn: Callable[[], Any], setup: Callable[[], Any], n: int) -> float:
    """Median wall time of ``fn`` over n calls, ``setup`` run (untimed) before each."""
    times = []
    for _ in range(n):
        setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cache_case(positions: int = 1 << 20, head_dim: int = 128, rounds: int = 5) -> dict[str, Any]:
    """The cos/sin cache: building it for ``positions`` positions (float64 angles, float32
    tables), against HF's ``LlamaRotaryEmbedding`` on the same positions where installed; and
    one decode step (cos/sin of a new position, then q and k of one token rotated) over 200
    steps onward from position 16 and back from the end of that range: equal times mean no
    table is rebuilt per step, O(1) in the position."""
    from ..encodings.rotary import RoPE

    rope = RoPE(head_dim=head_dim)
    pos = torch.arange(positions)
    result: dict[str, Any] = {"positions": positions, "head_dim": head_dim}
    result["build_s"] = _median_seconds(lambda: rope.cos_sin(pos), lambda: None, rounds)
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        config = LlamaConfig(hidden_size=head_dim, num_attention_heads=1, head_dim=head_dim)
        hf = LlamaRotaryEmbedding(config)
        x = torch.zeros(1, 1, head_dim)
        result["hf_build_s"] = _median_seconds(lambda: hf(x, pos[None]), lambda: None, rounds)
    except ImportError:
        result["hf_build_s"] = None
    q, k = torch.randn(1, 8, 1, head_dim), torch.randn(1, 8, 1, head_dim)
    decode: dict[str, float] = {}
    for at, step in ((16, 1), (positions - 1, -1)):
        times = []
        for i in range(200):
            p = torch.tensor([at + i * step])  # each step a new position
            start = time.perf_counter()
            rope.rotate(q, k, p, p)
            times.append(time.perf_counter() - start)
        decode[str(at)] = statistics.median(times) * 1e6
    result["decode_step_us"] = decode
    return result
