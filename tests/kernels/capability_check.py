"""Every CPU kernel and fused attention path against a float64 reference, under the CPU
capability this process was started with (``ATEN_CPU_CAPABILITY``): run by
``test_cpu_capabilities.py`` once per capability the machine allows, in a fresh process each.

Sizes T from 1 to 300, none a multiple of any vector width or block; causal and bidirectional;
GQA; with and without a cache offset; the grid encodings' tables (per pair and per head).
Prints one line per failing case and exits 1 if any.
Usage: ``ATEN_CPU_CAPABILITY=avx2 python tests/kernels/capability_check.py [--inductor]``
(``--inductor-only``: the Inductor RoPE kernel alone, every dtype and layout).
"""

from __future__ import annotations

import math
import sys

import torch

import posenc
from posenc.attention.backends import fire_attention, offset_table_for
from posenc.kernels import rope_cpp
from posenc.kernels.fire_fused import KERNEL as FIRE_KERNEL
from posenc.kernels.native import build_isa
from posenc.kernels.rope import rotate_pair
from posenc.kernels.rope_eager import apply_rope
from posenc.kernels.rope_tables import RopeTables
from posenc.kernels.toeplitz import toeplitz_bias_attention

SIZES = (1, 3, 17, 40, 63, 129, 200, 300)
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}
failures: list[str] = []


def check(name: str, got: torch.Tensor, want: torch.Tensor, atol: float) -> None:
    err = (got.double() - want.double()).abs().max().item() if got.numel() else 0.0
    if not math.isfinite(err) or err > atol:
        failures.append(f"{name}: max error {err:.3g} > {atol:g}")


def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, sign: float):
    """float64 (a cos - σ b sin, b cos + σ a sin) on each pair; features past 2P unchanged."""
    x, c, s = x.double(), cos.double(), sign * sin.double()
    P = c.shape[-1]
    out = x.clone()
    if layout == "half":
        a, b = x[..., :P], x[..., P : 2 * P]
        out[..., :P], out[..., P : 2 * P] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., 0 : 2 * P : 2], x[..., 1 : 2 * P : 2]
        out[..., 0 : 2 * P : 2], out[..., 1 : 2 * P : 2] = a * c - b * s, b * c + a * s
    return out


def rope_cases(inductor: bool) -> None:
    g = torch.Generator().manual_seed(0)
    for T in SIZES:
        for D, P in ((64, 32), (40, 20), (24, 8), (6, 3)):  # full, odd-sized, partial rotary
            angles = torch.randn(T, P, generator=g, dtype=torch.float64) * 3
            cos, sin = angles.cos().float(), angles.sin().float()
            pair = [RopeTables(cos, sin)] * 2  # q's and k's
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                q = torch.randn(2, 4, T, D, generator=g).to(dtype)
                k = torch.randn(2, 2, T, D, generator=g).to(dtype)
                atol = TOL[dtype] * 8
                for layout in ("half", "interleaved"):
                    tag = f"T={T} D={D} P={P} {dtype} {layout}"
                    want_q = rope_reference(q, cos, sin, layout, 1.0)
                    want_k = rope_reference(k, cos, sin, layout, 1.0)
                    oq, ok = rope_cpp.rope_pair([q, k], pair, layout)
                    check(f"cpp {tag} q", oq, want_q, atol)
                    check(f"cpp {tag} k", ok, want_k, atol)
                    bq, _ = rope_cpp.rope_pair([q, k], pair, layout, backward=True)
                    check(
                        f"cpp backward {tag}", bq, rope_reference(q, cos, sin, layout, -1.0), atol
                    )
                    qi, ki = q.clone(), k.clone()
                    rope_cpp.rope_pair([qi, ki], pair, layout, inplace=True)
                    check(f"cpp in place {tag}", qi, want_q, atol)
                    if dtype == torch.float32:
                        eager = apply_rope(q, cos, sin, layout=layout)
                        check(f"eager {tag}", eager, want_q, atol)
            if inductor and T in (17, 300) and D == 64:
                q = torch.randn(1, 4, T, D, generator=g)
                with torch.no_grad():
                    oq, _ = rotate_pair(q, q, cos, sin, cos, sin, kernel="inductor")
                check(f"inductor T={T}", oq, rope_reference(q, cos, sin, "half", 1.0), 2e-5)


def inductor_cases() -> None:
    """The Inductor RoPE kernel at sizes around every vector width, each dtype and layout."""
    g = torch.Generator().manual_seed(2)
    for T in (1, 17, 40, 300):
        angles = torch.randn(T, 32, generator=g, dtype=torch.float64) * 3
        cos, sin = angles.cos().float(), angles.sin().float()
        for dtype in (torch.float32, torch.bfloat16):
            q = torch.randn(1, 4, T, 64, generator=g).to(dtype)
            k = torch.randn(1, 2, T, 64, generator=g).to(dtype)
            for layout in ("half", "interleaved"):
                with torch.no_grad():
                    oq, ok = rotate_pair(q, k, cos, sin, cos, sin, layout=layout, kernel="inductor")
                tag = f"inductor T={T} {dtype} {layout}"
                check(f"{tag} q", oq, rope_reference(q, cos, sin, layout, 1.0), TOL[dtype] * 8)
                check(f"{tag} k", ok, rope_reference(k, cos, sin, layout, 1.0), TOL[dtype] * 8)


def attention_reference(q, k, v, pe, q_pos, k_pos, causal, scale):  # type: ignore[no-untyped-def]
    """float64 softmax(scale q kᵀ + bias) v; GQA by repeating heads; causal by cache index."""
    H, T, L = q.shape[1], q.shape[2], k.shape[2]
    k = k.double().repeat_interleave(H // k.shape[1], dim=1)
    v = v.double().repeat_interleave(H // v.shape[1], dim=1)
    scores = scale * q.double() @ k.transpose(-2, -1) + pe.bias(q_pos, k_pos).double()
    if causal:
        scores = scores.masked_fill(~torch.ones(T, L, dtype=torch.bool).tril(L - T), -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def bias_cases() -> None:
    g = torch.Generator().manual_seed(1)
    encodings = {n: posenc.build_for_model(n, dim=64, n_heads=4, max_len=1024) for n in
                 ("alibi", "t5", "kerple", "fire")}  # fmt: skip
    for T in SIZES:
        for offset in (0, 7):  # 7: T new queries after 7 cached keys
            L = T + offset
            q = torch.randn(2, 4, T, 16, generator=g)
            k, v = torch.randn(2, 2, L, 16, generator=g), torch.randn(2, 2, L, 16, generator=g)
            q_pos, k_pos = torch.arange(offset, L), torch.arange(L)
            for causal in (True, False):
                for name, pe in encodings.items():
                    tag = f"{name} T={T} offset={offset} causal={causal}"
                    with torch.no_grad():
                        if name == "fire":
                            out = fire_attention(
                                q, k, v, pe, q_pos, k_pos, causal=causal, scale=0.25
                            )
                        else:
                            table = offset_table_for(pe, q_pos, k_pos, 4)
                            assert table is not None
                            out = toeplitz_bias_attention(
                                q, k, v, table, q_pos, k_pos, causal=causal, scale=0.25
                            )
                        if out is None:
                            failures.append(f"{tag}: the fused path declined")
                            continue
                        want = attention_reference(q, k, v, pe, q_pos, k_pos, causal, 0.25)
                    check(tag, out, want, 2e-5)


def grid_cases() -> None:
    """The C++ kernel on the grid encodings' tables: (B, 1, T, P) per pair (RoPE-2D, M-RoPE)
    and (B, H, T, P) per head (RoPE-Mixed), each layout, called directly and through the
    encoding built with ``kernel="cpp"``, against float64 cos/sin of the encoding's angles."""
    g = torch.Generator().manual_seed(3)
    for name, heads in (("rope_2d", {}), ("mrope", {}), ("rope_mixed", {"n_heads": 4})):
        for layout in ("half", "interleaved"):
            cpp = posenc.build(name, head_dim=24, kernel="cpp", layout=layout, **heads)
            for T in (1, 17, 63):
                pos = torch.randint(0, 64, (2, T, cpp.capabilities.axes), generator=g)
                cos, sin = cpp.cos_sin(pos, torch.float64)  # (B, T, P) | (B, H, T, P)
                if cos.ndim == 3:
                    cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, P)
                for dtype in (torch.float32, torch.bfloat16):
                    q = torch.randn(2, 4, T, 24, generator=g).to(dtype)
                    k = torch.randn(2, 4, T, 24, generator=g).to(dtype)
                    tag, atol = f"grid {name} T={T} {dtype} {layout}", TOL[dtype] * 8
                    if not rope_cpp.supports(q, cos.float()):
                        failures.append(f"{tag}: the C++ kernel does not take these tables")
                        continue
                    tables = [RopeTables(cos.float(), sin.float())] * 2
                    oq, ok = rope_cpp.rope_pair([q, k], tables, layout)
                    with torch.no_grad():
                        mq, mk = cpp.rotate(q, k, pos, pos)
                    for what, got, x in (("q", oq, q), ("k", ok, k), ("module q", mq, q)):
                        check(f"{tag} {what}", got, rope_reference(x, cos, sin, layout, 1.0), atol)
                    check(f"{tag} module k", mk, rope_reference(k, cos, sin, layout, 1.0), atol)


def main() -> int:
    torch.manual_seed(0)
    isa = rope_cpp.load_kernel().isa()
    print(f"capability {torch.backends.cpu.get_cpu_capability()}, build {build_isa()}: "
          f"rope kernel {isa}, FIRE kernel {FIRE_KERNEL.load().isa()}")  # fmt: skip
    if "--inductor-only" in sys.argv:
        inductor_cases()
    else:
        rope_cases(inductor="--inductor" in sys.argv)
        grid_cases()
        bias_cases()
    for line in failures:
        print(line)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
