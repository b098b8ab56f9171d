"""Inputs and one calling convention for the four chunked attention forms (forgetting,
stick-breaking, PaTH, sinks), so the shared properties run over all of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from posenc import functional as PF

Arrays = dict[str, np.ndarray]


def inputs(B: int, H: int, Hkv: int, T: int, D: int, *, seed: int = 0) -> Arrays:
    """float64 q (B, H, T, D), k, v, w (unit rows) (B, Hkv, T, D), beta in (0, 2) (B, Hkv, T),
    log_f <= 0 (B, H, T), sinks (H,)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(B, Hkv, T, D))
    return {
        "q": rng.normal(size=(B, H, T, D)),
        "k": rng.normal(size=(B, Hkv, T, D)),
        "v": rng.normal(size=(B, Hkv, T, D)),
        "w": w / np.linalg.norm(w, axis=-1, keepdims=True),
        "beta": 2.0 / (1.0 + np.exp(-rng.normal(size=(B, Hkv, T)))),
        "log_f": -np.log1p(np.exp(-rng.normal(loc=2.0, size=(B, H, T)))),
        "sinks": rng.normal(size=H),
    }


def _fox(a: Any, **kw: Any) -> Any:
    return PF.forgetting_attention(a["q"], a["k"], a["v"], a["log_f"], **kw)


def _stick(a: Any, **kw: Any) -> Any:
    return PF.stick_breaking_attention(a["q"], a["k"], a["v"], **kw)[0]


def _path(a: Any, **kw: Any) -> Any:
    return PF.path_attention(a["q"], a["k"], a["v"], a["w"], a["beta"], **kw)


def _path_fox(a: Any, **kw: Any) -> Any:
    return PF.path_attention(a["q"], a["k"], a["v"], a["w"], a["beta"], a["log_f"], **kw)


def _sinks(a: Any, **kw: Any) -> Any:
    return PF.attention_with_sinks(a["q"], a["k"], a["v"], a["sinks"], **kw)


#: name -> f(arrays, **keywords) -> (B, H, Tq, Dv); q may hold the last Tq rows only.
FORMS: dict[str, Callable[..., Any]] = {
    "forgetting": _fox,
    "stick_breaking": _stick,
    "path": _path,
    "path_fox": _path_fox,
    "sinks": _sinks,
}


def rows(a: Arrays, lo: int, hi: int) -> Arrays:
    """The tokens lo .. hi - 1 of every per-token input (sinks unchanged)."""
    out = {name: x[:, :, lo:hi] for name, x in a.items() if name != "sinks"}
    out["sinks"] = a["sinks"]
    return out


def batch_rows(a: Arrays, b: int) -> Arrays:
    """Batch entry b of every input, kept as a batch of one."""
    out = {name: x[b : b + 1] for name, x in a.items() if name != "sinks"}
    out["sinks"] = a["sinks"]
    return out


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
