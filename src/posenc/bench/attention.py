"""Attention-layer benchmark: what each encoding adds to one attention layer, and x-transformers.

One ``posenc.Attention`` (causal, B x T tokens of width C, H heads) per encoding, forward and
forward+backward, timed interleaved with the same layer without position (NoPE): the ratio is
the price of the encoding. Where x-transformers has the matching option, its attention-only
layer (``Decoder(custom_layers=("a",))``, flash attention where it allows, its pre-norm and
residual included) runs in the same rounds. Each implementation's peak memory of one call is
read after the timings (CPU: the torch profiler's memory events, ``harness.peak_memory_bytes``;
CUDA: the allocator's peak). ``--quick`` runs one encoding of each family (``QUICK``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .. import registry
from ..attention import Attention
from .bias import cuda_peak_extra_bytes
from .harness import Progress, as_json, each, interleaved, peak_memory_bytes
from .lab import NO_FLASH, XT_OPTIONS

SHAPE = (1, 2048, 512, 8)  # B, T, C, H
QUICK_SHAPE = (1, 128, 64, 4)
#: ``--quick``: one encoding of each family a tutorial compares (seed 001's benchmark of
#: sinusoidal, learned and relative encodings, with rotary and bias ones).
QUICK = {
    "additive": "sinusoidal",
    "learned": "learned",
    "rotary": "rope",
    "bias": "alibi",
    "relative": "shaw",
}


def _xt_layer(name: str, C: int, H: int) -> torch.nn.Module | None:
    try:
        from x_transformers import Decoder
    except ImportError:
        return None
    if name not in ("rope", "xpos", "alibi", "t5", "pope", "nope"):
        return None  # absolute tables live outside x-transformers' attention layers
    layer_kw = dict(XT_OPTIONS[name][0])
    if "rotary_emb_dim" in layer_kw:
        layer_kw["rotary_emb_dim"] = C // H
    return Decoder(
        dim=C,
        depth=1,
        heads=H,
        attn_dim_head=C // H,
        custom_layers=("a",),
        attn_flash=name not in NO_FLASH,
        **layer_kw,
    )


def _impls(
    name: str, shape: tuple[int, int, int, int], backward: bool, device: str = "cpu"
) -> dict[str, Callable]:
    B, T, C, H = shape
    x = torch.randn(B, T, C, device=device, requires_grad=backward)
    pos = torch.arange(T, device=device)
    layers: dict[str, torch.nn.Module] = {}
    for label, pe_name in (("nope", "nope"), ("posenc", name)):
        torch.manual_seed(0)
        pe = registry.build_for_model(pe_name, dim=C, n_heads=H, max_len=T)
        layers[label] = Attention(C, H, pe=pe, causal=True, embedded=True).to(device)
    xt = _xt_layer(name, C, H)
    if xt is not None:
        layers["x_transformers"] = xt.to(device)

    def call(layer: torch.nn.Module) -> Callable[[], Any]:
        pe = layer.pe if isinstance(layer, Attention) else None

        def run() -> Any:
            out = layer(x if pe is None else pe.embed(x, pos))  # absolute tables add here
            if backward:
                out.sum().backward()
                x.grad = None
                layer.zero_grad(set_to_none=True)
            return out

        return run

    return {label: call(layer) for label, layer in layers.items()}


def run_case(
    name: str, shape: tuple[int, int, int, int], backward: bool, rounds: int, device: str = "cpu"
) -> dict[str, Any]:
    """Time one encoding's layer against NoPE and x-transformers (forward or forward+backward)."""
    impls = _impls(name, shape, backward, device)
    dev = torch.device(device).type
    peak = cuda_peak_extra_bytes if dev == "cuda" else peak_memory_bytes
    with torch.set_grad_enabled(backward):
        timings = interleaved(impls, rounds=rounds, warmup=1, device=dev)
        peaks = {n: peak(fn) / 2**20 for n, fn in impls.items()}
    med = {n: t.median for n, t in timings.items()}
    out: dict[str, Any] = {
        "encoding": name,
        "shape_BTCH": list(shape),
        "mode": "fwd+bwd" if backward else "fwd",
        "device": dev,
        "us": {n: as_json(t) for n, t in timings.items()},
        "x_nope": {n: m / med["nope"] for n, m in med.items()},
        "peak_MiB": peaks,
    }
    if "x_transformers" in med:
        out["speedup_vs_x_transformers"] = med["x_transformers"] / med["posenc"]
    return out


def run(
    quick: bool = False, device: str = "cpu", progress: Progress | None = None
) -> list[dict[str, Any]]:
    """Every encoding but NoPE itself (``quick``: one of each family, ``QUICK``), forward and
    forward+backward, on ``device``; ``progress(case, done, total)`` after each finished case."""
    shape = QUICK_SHAPE if quick else SHAPE
    names = [n for n in registry.names(axes=1) if n != "nope"]  # 1-D sequences
    if quick:
        names = list(QUICK.values())
    specs = [(name, backward) for name in names for backward in (False, True)]
    rounds = 1 if quick else 5
    return each(specs, lambda s: run_case(s[0], shape, s[1], rounds, device=device), progress)
