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
from .harness import DTYPES, Progress, as_json, each, interleaved

SHAPES = [(1, 32, 2048, 128), (4, 8, 1024, 64), (1, 8, 8192, 64), (1, 32, 512, 128)]
QUICK_SHAPES = [(1, 8, 512, 64)]
Impl = Callable[[], Any]
#: The fast kernel on each device: the C++ kernel on CPU, the Triton kernel on CUDA.
FAST_KERNEL: dict[str, Kernel] = {"cpu": "cpp", "cuda": "triton"}
#: The fast path's targets (issue 40), forward: (what, bound, "min" | "max").
TARGETS = {
    "speedup_vs_hf": (4.0, "min"),  # out of place: HF's time / the fast path's
    "inplace_speedup_vs_hf": (4.0, "min"),
    "x_own_inplace": (1.3, "max"),  # out of place / in place
    "x_clone_floor": (1.5, "max"),  # out of place / clone of q and k
}


def _tables(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 cos and sin, (T, D/2), for q of shape (B, H, T, D)."""
    T, D = q.shape[-2:]
    cos, sin = PF.rope_cos_sin(torch.arange(T), PF.rope_inv_freq(D, xp=PF.torch_xp))
    return cos.float().to(q.device), sin.float().to(q.device)


def _bthd(t: torch.Tensor) -> torch.Tensor:
    """A (B, T, H, D)-contiguous copy of a (B, H, T, D) tensor, a leaf like ``t``."""
    return t.detach().transpose(1, 2).contiguous().requires_grad_(t.requires_grad)


def _posenc(q: torch.Tensor, k: torch.Tensor, fast: Kernel) -> dict[str, Impl]:
    """posenc's paths (``posenc.kernels.rope``): eager, fast and inductor, out of place and in
    place."""
    cos, sin = _tables(q)
    qb, kb = q.detach().clone(), k.detach().clone()

    def pair(kernel: Kernel) -> Impl:
        return lambda: rotate_pair(q, k, cos, sin, cos, sin, kernel=kernel)

    def pair_inplace(kernel: Kernel) -> Impl:
        def run() -> Any:
            with torch.no_grad():
                return rotate_pair(qb, kb, cos, sin, cos, sin, inplace=True, kernel=kernel)

        return run

    return {
        "posenc_eager": pair("eager"),
        f"posenc_{fast}": pair(fast),
        "posenc_inductor": pair("inductor"),
        "posenc_inplace": pair_inplace("eager"),
        f"posenc_inplace_{fast}": pair_inplace(fast),
        "posenc_inplace_inductor": pair_inplace("inductor"),
    }


def _anchors(
    q: torch.Tensor, k: torch.Tensor, liger: bool = False
) -> tuple[dict[str, Impl], list[str], list[torch.Tensor]]:
    """The anchors installed here, the packages of those skipped, and the leaves whose
    gradients a forward+backward sample resets (anchors fed their own layout)."""
    T, D = q.shape[-2:]
    cos, sin = _tables(q)
    hc = torch.cat([cos, cos], -1)[None].to(q.dtype)  # (1, T, D) as HF's rotary returns
    hs = torch.cat([sin, sin], -1)[None].to(q.dtype)
    leaves = [q, k]

    def hf() -> Impl:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        return lambda: apply_rotary_pos_emb(q, k, hc, hs)

    def ret() -> Impl:
        from rotary_embedding_torch import RotaryEmbedding

        rot = RotaryEmbedding(D).to(q.device)
        return lambda: (rot.rotate_queries_or_keys(q), rot.rotate_queries_or_keys(k))

    def xt() -> Impl:
        from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

        xrot = RotaryEmbedding(D).to(q.device)
        t = torch.arange(T, device=q.device)

        def run() -> Any:
            freqs, scale = xrot(t)
            return apply_rotary_pos_emb(q, freqs, scale), apply_rotary_pos_emb(k, freqs, scale)

        return run

    def tune() -> Impl:
        from torchtune.modules import RotaryPositionalEmbeddings

        rope = RotaryPositionalEmbeddings(D, max_seq_len=T).to(q.device)
        qt, kt = _bthd(q), _bthd(k)
        leaves.extend([qt, kt])
        return lambda: (rope(qt).transpose(1, 2), rope(kt).transpose(1, 2))

    def liger_rope() -> Impl:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        # (B, T, H, D) memory seen as (B, H, T, D), as HF's attention hands it over
        ql, kl = _bthd(q), _bthd(k)
        leaves.extend([ql, kl])
        qv, kv = ql.transpose(1, 2), kl.transpose(1, 2)
        return lambda: liger_rotary_pos_emb(qv, kv, hc, hs)

    anchors = {  # name -> (package, maker)
        "hf_apply_rotary_pos_emb": ("transformers", hf),
        "rotary_embedding_torch": ("rotary-embedding-torch", ret),
        "x_transformers": ("x-transformers", xt),
        "torchtune": ("torchtune", tune),
    }
    if liger:  # a Triton kernel: the GPU suite's anchor
        anchors["liger_rotary_pos_emb"] = ("liger-kernel", liger_rope)
    impls: dict[str, Impl] = {}
    skipped: list[str] = []
    for name, (package, make) in anchors.items():
        try:
            impls[name] = make()
        except ImportError:
            skipped.append(package)
    return impls, skipped, leaves


def _floors(q: torch.Tensor, k: torch.Tensor) -> dict[str, Impl]:
    qb, kb = torch.empty_like(q), torch.empty_like(k)
    return {
        "floor_clone": lambda: (q.detach().clone(), k.detach().clone()),
        "floor_copy_into": lambda: (qb.copy_(q.detach()), kb.copy_(k.detach())),
    }


def _with_backward(
    impls: dict[str, Impl], q: torch.Tensor, k: torch.Tensor, leaves: list[torch.Tensor]
) -> dict[str, Impl]:
    """The out-of-place implementations, each followed by its backward."""
    gq, gk = torch.randn_like(q), torch.randn_like(k)

    def wrap(fn: Impl) -> Impl:
        def run() -> None:
            torch.autograd.backward(fn(), [gq, gk])
            for leaf in leaves:
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
    dev = torch.device(device).type
    fast = fast or FAST_KERNEL[dev]
    torch.manual_seed(0)
    q, k = (
        torch.randn(shape, dtype=DTYPES[dtype], device=device, requires_grad=backward)
        for _ in range(2)
    )
    anchors, skipped, leaves = _anchors(q, k, liger=fast == "triton")
    impls = {**_posenc(q, k, fast), **anchors}
    impls = _with_backward(impls, q, k, leaves) if backward else {**impls, **_floors(q, k)}
    timings = interleaved(impls, rounds=rounds, device=dev)
    med = {n: t.median for n, t in timings.items()}
    ours = {n: m for n, m in med.items() if n.startswith("posenc")}
    # q and k read and written once per direction: what a one-pass kernel must move
    moved = 2 * (q.numel() + k.numel()) * q.element_size() * (2 if backward else 1)
    result: dict[str, Any] = {
        "shape": list(shape),
        "dtype": dtype,
        "mode": "fwd+bwd" if backward else "fwd",
        "device": dev,
        "fast_backend": fast,
        "skipped_anchors": skipped,
        "us": {n: as_json(t) for n, t in timings.items()},
        "GBps": {n: moved / m / 1e9 for n, m in med.items()},
    }
    hf = med.get("hf_apply_rotary_pos_emb")
    result["speedup_vs_hf"] = {n: hf / m for n, m in med.items()} if hf else {}
    if anchors:
        fastest = min(anchors, key=med.__getitem__)
        result["fastest_anchor"] = fastest
        result["speedup_vs_fastest_anchor"] = {n: med[fastest] / m for n, m in ours.items()}
    if "floor_clone" in med:
        result["x_clone_floor"] = {n: m / med["floor_clone"] for n, m in med.items()}
    if "floor_copy_into" in med:
        copy = med["floor_copy_into"]
        inplace = ("posenc_inplace", f"posenc_inplace_{fast}", "posenc_inplace_inductor")
        result["inplace_x_copy_floor"] = {n: med[n] / copy for n in inplace}
        # the share of the copy bandwidth each reaches (the GPU target: >= 0.8 for the kernel)
        result["copy_bandwidth_fraction"] = {n: copy / m for n, m in ours.items()}
    if "liger_rotary_pos_emb" in med:
        liger = med["liger_rotary_pos_emb"]
        result["speedup_vs_liger"] = {n: liger / m for n, m in ours.items()}
    if not backward:
        result["targets"] = targets(med, fast)
    return result


def targets(med: dict[str, float], fast: str) -> dict[str, dict[str, Any]]:
    """The fast path's ``TARGETS`` on one forward case (median seconds ``med``): each value, its
    bound, whether it is met and ``miss_factor`` (how many times worse than the bound; <= 1:
    met). Those whose timings are missing (HF not installed) are left out."""
    out, inplace = med[f"posenc_{fast}"], med[f"posenc_inplace_{fast}"]
    hf = med.get("hf_apply_rotary_pos_emb")
    values = {
        "speedup_vs_hf": None if hf is None else hf / out,
        "inplace_speedup_vs_hf": None if hf is None else hf / inplace,
        "x_own_inplace": out / inplace,
        "x_clone_floor": out / med["floor_clone"],
    }
    rows: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        if value is None:
            continue
        bound, kind = TARGETS[name]
        miss = bound / value if kind == "min" else value / bound
        rows[name] = {"value": value, kind: bound, "met": miss <= 1, "miss_factor": miss}
    return rows


def run(
    quick: bool = False, device: str = "cpu", progress: Progress | None = None
) -> list[dict[str, Any]]:
    """All RoPE cases on ``device`` (``quick``: one small shape, few rounds, for CI smoke runs);
    ``progress(case, done, total)`` after each finished case."""
    shapes = QUICK_SHAPES if quick else SHAPES
    rounds = 3 if quick else 11
    specs = [
        (shape, dtype, backward)
        for shape in shapes
        for dtype in DTYPES
        for backward in (False, True)
    ]
    return each(specs, lambda s: run_case(*s, rounds, device=device), progress)


def cache_case(positions: int = 1 << 20, head_dim: int = 128, rounds: int = 5) -> dict[str, Any]:
    """The cos/sin cache: building it for ``positions`` positions (float64 angles, float32
    tables), against HF's ``LlamaRotaryEmbedding`` on the same positions where installed; and
    one decode step (cos/sin of a new position, then q and k of one token rotated) over 200
    steps onward from position 16 and back from the end of that range: equal times mean no
    table is rebuilt per step, O(1) in the position."""
    from ..encodings.rotary import RoPE

    rope = RoPE(head_dim=head_dim)
    pos = torch.arange(positions)
    builds: dict[str, Impl] = {"build_s": lambda: rope.cos_sin(pos)}
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        config = LlamaConfig(hidden_size=head_dim, num_attention_heads=1, head_dim=head_dim)
        hf = LlamaRotaryEmbedding(config)
        x = torch.zeros(1, 1, head_dim)
        builds["hf_build_s"] = lambda: hf(x, pos[None])
    except ImportError:
        pass
    timings = interleaved(builds, rounds=rounds, warmup=0, calls=1)
    result: dict[str, Any] = {"positions": positions, "head_dim": head_dim, "hf_build_s": None}
    result |= {n: t.median for n, t in timings.items()}
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
