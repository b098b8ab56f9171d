"""Data-dependent attention benchmark: forgetting (FoX), stick-breaking and PaTH attention.

For each family, length T and pass (forward under ``no_grad``, forward + backward), four
contenders run in the same interleaved rounds (``harness.interleaved``):

- ``posenc``: the blockwise formula, ``posenc.functional``'s ``forgetting_attention``,
  ``stick_breaking_attention`` or ``path_attention``, on given q, k, v (B, H, T, D) (and w, β,
  log f);
- ``fla_naive``: fla-core's pure-torch reference of the same formula on the same tensors
  (``fla/ops/<op>/naive.py``, loaded by path: fla's package ``__init__`` imports Triton), when
  fla-core is installed; otherwise the case says so (``fla_naive``: "not installed");
- ``posenc_layer``: one causal ``posenc.Attention`` (width C, H heads) with the family's
  encoding, its projections included, on x (B, T, C);
- ``nope_layer``: the same layer without position (NoPE, SDPA): ``layer_over_nope`` is the
  price of the encoding.

Decode (``decode_case``): one query over a cache of L keys, as a model's cached step calls
each form: FoX and stick-breaking with Tq = 1; PaTH by ``path_attention_cached`` (the cached
keys carried to the last token, one rank-one update per step) and, for contrast, by
``path_attention`` recomputing every chunk's transforms (``path_recompute``); NoPE SDPA of the
same row (``sdpa_nope``). ``us_per_key`` is the median over L: flat when a step is O(L).

Memory: ``largest_tensor_elements_fwd``, the most elements one operation's output holds in the
forward (no (T, T) tensor means < T²), and ``saved_for_backward_MiB``, what autograd keeps
for the backward (the distinct storages saved by the forward).

fla's references are not timed forward + backward past ``FLA_BACKWARD_MAX_T``: PaTH's writes
each block pair into one (T, T) tensor in place and its backward replays every write over the
whole tensor, O((T/64)²·T²) (minutes at T = 2048); stick-breaking's backward at T = 4096 holds
over 16 GiB (H·T² float32 tensors saved by the dozen: killed for memory on a 23 GiB machine).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from .. import functional as PF
from .. import registry
from ..attention import Attention
from .harness import Progress, as_json, each, interleaved

FAMILIES = ("fox", "stick_breaking", "path")
#: The registry name of each family -> fla-core's op folder.
FLA_OPS = {"fox": "forgetting_attn", "stick_breaking": "stickbreaking_attn", "path": "path_attn"}
LENGTHS = (512, 1024, 2048, 4096)
QUICK_LENGTHS = (128,)
H, D = 8, 64  # heads, head dim: the layers' width C = H·D
#: Past this T, fla's reference is not timed forward + backward (see the module docstring).
FLA_BACKWARD_MAX_T = {"path": 1024, "stick_breaking": 2048}
_PREFIX = "_posenc_bench_fla_naive_"


def fla_naive(op: str) -> ModuleType | None:
    """``fla.ops.<op>.naive`` loaded from the installed fla-core's files under a private
    name (nothing is registered as ``fla``), or None when fla-core is not installed."""
    spec = importlib.util.find_spec("fla")
    if spec is None or spec.origin is None:
        return None
    name = _PREFIX + op
    if name not in sys.modules:
        path = Path(spec.origin).parent / "ops" / op / "naive.py"
        file_spec = importlib.util.spec_from_file_location(name, path)
        if file_spec is None or file_spec.loader is None or not path.exists():
            return None
        module = importlib.util.module_from_spec(file_spec)
        sys.modules[name] = module
        file_spec.loader.exec_module(module)
    return sys.modules[name]


def inputs(T: int, grad: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """float32 q, k, v, w (unit rows) (1, H, T, D), β in (0, 2) and log f < 0 (1, H, T)."""
    gen = torch.Generator().manual_seed(seed)
    a = {
        "q": torch.randn(1, H, T, D, generator=gen),
        "k": torch.randn(1, H, T, D, generator=gen),
        "v": torch.randn(1, H, T, D, generator=gen),
        "w": F.normalize(torch.randn(1, H, T, D, generator=gen), dim=-1),
        "beta": 2 * torch.sigmoid(torch.randn(1, H, T, generator=gen)),
        "log_f": F.logsigmoid(torch.randn(1, H, T, generator=gen) + 3),
    }
    return {n: x.requires_grad_(grad) for n, x in a.items()}


def formulas(family: str, a: dict[str, torch.Tensor]) -> dict[str, Callable[[], torch.Tensor]]:
    """posenc's formula and (where installed) fla's reference of ``family`` on ``a``."""
    q, k, v, scale = a["q"], a["k"], a["v"], D**-0.5
    fla = {n: x.transpose(1, 2) for n, x in a.items()}  # fla's (B, T, H, ...) layout
    naive = fla_naive(FLA_OPS[family])
    impls: dict[str, Callable[[], torch.Tensor]] = {}
    if family == "fox":
        impls["posenc"] = lambda: PF.forgetting_attention(q, k, v, a["log_f"])
        if naive is not None:
            f = naive.naive_forgetting_attn
            impls["fla_naive"] = lambda: f(fla["q"], fla["k"], fla["v"], fla["log_f"])
    elif family == "stick_breaking":
        impls["posenc"] = lambda: PF.stick_breaking_attention(q, k, v)[0]
        if naive is not None:
            g = naive.naive_stickbreaking_attn
            impls["fla_naive"] = lambda: g(fla["q"], fla["k"], fla["v"])[0]
    else:
        impls["posenc"] = lambda: PF.path_attention(q, k, v, a["w"], a["beta"])
        if naive is not None:
            p, zeros = naive.naive_path_attn, torch.zeros_like(fla["log_f"])
            impls["fla_naive"] = lambda: p(
                fla["q"], fla["k"], fla["v"], fla["w"], fla["beta"], zeros, scale=scale
            )
    return impls


def layers(family: str, T: int, grad: bool) -> tuple[dict[str, Attention], torch.Tensor]:
    """The family's causal ``Attention`` and the same layer without position, and x (1, T, C)."""
    C = H * D
    out = {}
    for label, name in (("posenc_layer", family), ("nope_layer", "nope")):
        torch.manual_seed(0)
        pe = registry.build_for_model(name, dim=C, n_heads=H, max_len=T)
        out[label] = Attention(C, H, pe=pe, causal=True)
    x = torch.randn(1, T, C, generator=torch.Generator().manual_seed(1), requires_grad=grad)
    return out, x


class Largest(TorchDispatchMode):
    """Records the most elements any torch operation's output held while active."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, tuple | list) else (out,):
            if isinstance(x, torch.Tensor):
                self.numel = max(self.numel, x.numel())
        return out


def saved_for_backward_bytes(fn: Callable[[], torch.Tensor]) -> int:
    """Bytes of the distinct storages autograd saves for the backward of one call of ``fn``."""
    seen: dict[int, int] = {}

    def pack(x: torch.Tensor) -> torch.Tensor:
        storage = x.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        out = fn()
    del out
    return sum(seen.values())


def run_case(family: str, T: int, backward: bool, rounds: int) -> dict[str, Any]:
    """Time one family at length T (forward, or forward + backward) against fla's reference
    and a NoPE layer, and record the largest forward tensor and what the backward keeps."""
    a = inputs(T, backward)
    impls: dict[str, Callable[[], Any]] = dict(formulas(family, a))
    fla_state = "timed" if "fla_naive" in impls else "not installed"
    if backward and "fla_naive" in impls and T > FLA_BACKWARD_MAX_T.get(family, math.inf):
        del impls["fla_naive"]
        fla_state = f"skipped: backward past T = {FLA_BACKWARD_MAX_T[family]}"
    mods, x = layers(family, T, backward)
    for label, layer in mods.items():
        impls[label] = (lambda m: lambda: m(x))(layer)
    largest, saved = {}, {}
    with torch.no_grad():
        for name, f in impls.items():
            with Largest() as mode:
                f()
            largest[name] = mode.numel
    if backward:
        saved = {n: saved_for_backward_bytes(f) / 2**20 for n, f in impls.items()}
        leaves = [*a.values(), x, *(p for m in mods.values() for p in m.parameters())]

        def with_backward(f: Callable[[], Any]) -> Callable[[], None]:
            def step() -> None:
                for leaf in leaves:
                    leaf.grad = None
                f().sum().backward()

            return step

        timings = interleaved(
            {n: with_backward(f) for n, f in impls.items()}, rounds=rounds, warmup=1, calls=1
        )
    else:
        with torch.no_grad():
            timings = interleaved(impls, rounds=rounds, warmup=1, calls=1)
    med = {n: t.median for n, t in timings.items()}
    case: dict[str, Any] = {
        "family": family,
        "T": T,
        "shape_BHD": [1, H, D],
        "mode": "fwd+bwd" if backward else "fwd",
        "fla_naive": fla_state,
        "us": {n: as_json(t) for n, t in timings.items()},
        "posenc_over_fla": med["posenc"] / med["fla_naive"] if "fla_naive" in med else None,
        "layer_over_nope": med["posenc_layer"] / med["nope_layer"],
        "largest_tensor_elements_fwd": largest,
        "loadavg_after": list(os.getloadavg()),
    }
    if backward:
        case["saved_for_backward_MiB"] = saved
    return case


def decode_case(family: str, L: int, rounds: int) -> dict[str, Any]:
    """Time one decode step (one query over L cached keys) of ``family`` against NoPE SDPA."""
    a = inputs(L, False)
    q = a["q"][:, :, -1:]  # (1, H, 1, D): the newest token's query
    k, v, w, beta, log_f = a["k"], a["v"], a["w"], a["beta"], a["log_f"]
    impls: dict[str, Callable[[], Any]] = {}
    if family == "fox":
        impls["posenc"] = lambda: PF.forgetting_attention(q, k, v, log_f)
    elif family == "stick_breaking":
        impls["posenc"] = lambda: PF.stick_breaking_attention(q, k, v)
    else:
        carried = k[:, :, :-1]  # stands for the cached keys carried to token L - 2
        new = slice(L - 1, L)
        impls["posenc"] = lambda: PF.path_attention_cached(
            q, k[:, :, new], v, w[:, :, new], beta[:, :, new], carried=carried
        )
        impls["path_recompute"] = lambda: PF.path_attention(q, k, v, w, beta)
    impls["sdpa_nope"] = lambda: F.scaled_dot_product_attention(q, k, v)
    with torch.no_grad():
        timings = interleaved(impls, rounds=rounds, warmup=2)
    us = {n: as_json(t) for n, t in timings.items()}
    return {
        "family": family,
        "T": L,
        "shape_BHD": [1, H, D],
        "mode": "decode",
        "us": us,
        "us_per_key": {n: u["median"] / L for n, u in us.items()},
        "posenc_over_sdpa": us["posenc"]["median"] / us["sdpa_nope"]["median"],
        "loadavg_after": list(os.getloadavg()),
    }


def run(
    quick: bool = False, progress: Progress | None = None, *, decode_only: bool = False
) -> list[dict[str, Any]]:
    """Every family at T = 512 .. 4096 (``quick``: 128), forward and forward + backward,
    then a decode step over caches of those lengths, on the CPU (``decode_only``: the decode
    steps alone); ``progress(case, done, total)`` after each finished case."""
    lengths = QUICK_LENGTHS if quick else LENGTHS
    rounds = 1 if quick else 3
    specs: list[tuple[str, int, str]] = []
    if not decode_only:
        specs += [(f, T, m) for T in lengths for f in FAMILIES for m in ("fwd", "fwd+bwd")]
    specs += [(f, T, "decode") for T in lengths for f in FAMILIES]

    def one(spec: tuple[str, int, str]) -> dict[str, Any]:
        family, T, mode = spec
        if mode == "decode":
            return decode_case(family, T, 2 * rounds + 1)
        return run_case(family, T, mode == "fwd+bwd", rounds)

    return each(specs, one, progress)
