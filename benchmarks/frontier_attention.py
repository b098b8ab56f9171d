"""Forgetting, stick-breaking and PaTH attention: posenc's blockwise forms against fla-core's
naive references and a NoPE causal SDPA in the same process, forward (inference, no grad) and
forward + backward, with the largest tensor each forward creates.

Each (family, T, pass) case interleaves its three contenders (``posenc.bench.harness``), so
load from other tenants falls on all of them; ratios are to SDPA, which computes no position
at all (the price of the encoding) and to fla's reference. fla's references are loaded from
the installed fla-core's files (``tests.anchors._fla``; its package imports Triton).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/frontier_attention.py --out FILE.json
        [--lengths 512 1024 2048 4096] [--heads 8] [--dim 64] [--rounds 5] [--block 128]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from posenc import functional as PF
from posenc.bench.harness import as_json, interleaved, machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.anchors._fla import fla_naive
from tests.functional._data_position import Largest

FAMILIES = ("forgetting", "stick_breaking", "path")


def inputs(H: int, T: int, D: int, grad: bool) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    w = F.normalize(torch.randn(1, H, T, D, generator=gen), dim=-1)
    a = {
        "q": torch.randn(1, H, T, D, generator=gen),
        "k": torch.randn(1, H, T, D, generator=gen),
        "v": torch.randn(1, H, T, D, generator=gen),
        "w": w,
        "beta": 2 * torch.sigmoid(torch.randn(1, H, T, generator=gen)),
        "log_f": F.logsigmoid(torch.randn(1, H, T, generator=gen) + 3),
    }
    return {n: x.requires_grad_(grad) for n, x in a.items()}


def contenders(family: str, a: dict[str, torch.Tensor], block: int) -> dict[str, Callable[[], Any]]:
    """posenc, fla and SDPA forwards of ``family`` on ``a``, each returning one tensor."""
    fla = {n: x.transpose(1, 2) for n, x in a.items()}  # fla's (B, T, H, ...) layout
    q, k, v = a["q"], a["k"], a["v"]
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    if family == "forgetting":
        naive = fla_naive("forgetting_attn").naive_forgetting_attn
        ours = lambda: PF.forgetting_attention(q, k, v, a["log_f"], block_size=block)  # noqa: E731
        theirs = lambda: naive(fla["q"], fla["k"], fla["v"], fla["log_f"])  # noqa: E731
    elif family == "stick_breaking":
        naive_sb = fla_naive("stickbreaking_attn").naive_stickbreaking_attn
        ours = lambda: PF.stick_breaking_attention(q, k, v, block_size=block)[0]  # noqa: E731
        theirs = lambda: naive_sb(fla["q"], fla["k"], fla["v"])[0]  # noqa: E731
    else:
        naive_path = fla_naive("path_attn").naive_path_attn
        zeros = torch.zeros_like(fla["log_f"])
        scale = q.shape[-1] ** -0.5

        def ours() -> Any:
            return PF.path_attention(q, k, v, a["w"], a["beta"], block_size=block)

        def theirs() -> Any:
            return naive_path(
                fla["q"], fla["k"], fla["v"], fla["w"], fla["beta"], zeros, scale=scale
            )

    return {"posenc": ours, "fla_naive": theirs, "sdpa_nope": sdpa}


def with_backward(f: Callable[[], Any], a: dict[str, torch.Tensor]) -> Callable[[], None]:
    def run() -> None:
        for x in a.values():
            x.grad = None
        f().sum().backward()

    return run


def case(family: str, T: int, H: int, D: int, block: int, rounds: int, backward: bool) -> dict:
    a = inputs(H, T, D, backward)
    impls = contenders(family, a, block)
    largest = {}
    with torch.no_grad():
        for name, f in impls.items():
            with Largest() as mode:
                f()
            largest[name] = mode.numel
    if backward:
        impls = {n: with_backward(f, a) for n, f in impls.items()}
        timings = interleaved(impls, rounds=rounds, warmup=1, calls=1)
    else:
        with torch.no_grad():
            timings = interleaved(impls, rounds=rounds, warmup=1, calls=1)
    us = {n: as_json(t) for n, t in timings.items()}
    med = {n: u["median"] for n, u in us.items()}
    return {
        "family": family,
        "T": T,
        "pass": "fwd+bwd" if backward else "fwd",
        "us": us,
        "largest_tensor_elements_fwd": largest,
        "posenc_over_sdpa": med["posenc"] / med["sdpa_nope"],
        "posenc_over_fla": med["posenc"] / med["fla_naive"],
        "loadavg_after": list(os.getloadavg()),
    }


def write(path: str, result: dict) -> None:
    """JSON to a temp file in the same folder, then renamed."""
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
        json.dump(result, f, indent=1)
    os.replace(f.name, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--passes", nargs="+", default=["fwd", "fwd+bwd"])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "machine": machine(),
        "shape": {"B": 1, "H": args.heads, "D": args.dim, "dtype": "fp32", "block": args.block},
        "cases": [],
    }
    for T in args.lengths:
        for family in args.families:
            for p in args.passes:
                c = case(family, T, args.heads, args.dim, args.block, args.rounds, p != "fwd")
                result["cases"].append(c)
                write(args.out, result)  # a stopped run keeps what it finished
                med = {n: u["median"] / 1e3 for n, u in c["us"].items()}
                print(
                    f"T={T} {family} {p}: posenc {med['posenc']:.1f} ms, fla naive "
                    f"{med['fla_naive']:.1f} ms, SDPA NoPE {med['sdpa_nope']:.1f} ms; largest "
                    f"tensor posenc {c['largest_tensor_elements_fwd']['posenc']:,} vs fla "
                    f"{c['largest_tensor_elements_fwd']['fla_naive']:,}",
                    flush=True,
                )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
