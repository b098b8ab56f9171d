"""Opt-in compiled RoPE: one Inductor kernel rotates q and k, cached per shape and dtype.

``enable_compiled_rope()`` switches ``RoPE.rotate`` (and ``apply_rope_pair``) to a
``torch.compile``d form of the same formula as ``functional.rotary.apply_rope``: read x once,
rotate in float32 registers, write x's dtype once. The first call per shape/dtype compiles
(seconds on CPU); later calls reuse the cached kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

_state = {"enabled": False}
#: Kernels kept per layout (one per shape/dtype/grad combination seen).
RECOMPILE_LIMIT = 256


def enable_compiled_rope(enabled: bool = True) -> None:
    """Turn the compiled RoPE path on (or off) for this process."""
    _state["enabled"] = bool(enabled)


def compiled_rope_enabled() -> bool:
    """Whether ``enable_compiled_rope`` is on (and we are not already inside a compile)."""
    return _state["enabled"] and not torch.compiler.is_compiling()


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    P = cos.shape[-1]
    rot = x[..., : 2 * P].float()
    if layout == "half":
        a, b = rot[..., :P], rot[..., P:]  # (..., T, P)
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]  # (..., T, P)
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    out = out.to(x.dtype)
    return out if x.shape[-1] == 2 * P else torch.cat([out, x[..., 2 * P :]], dim=-1)


def _pair(
    q: Tensor, k: Tensor, cq: Tensor, sq: Tensor, ck: Tensor, sk: Tensor, layout: str
) -> tuple[Tensor, Tensor]:
    return _rotate(q, cq, sq, layout), _rotate(k, ck, sk, layout)


@functools.cache
def _compiled(layout: str) -> Callable[..., tuple[Tensor, Tensor]]:
    fn = functools.partial(_pair, layout=layout)
    return torch.compile(fn, dynamic=False, fullgraph=True)


def compiled_rope_pair(
    q: Tensor, k: Tensor, cos_q: Tensor, sin_q: Tensor, cos_k: Tensor, sin_k: Tensor, layout: str
) -> tuple[Tensor, Tensor]:
    """Rotate q (..., Tq, D) and k (..., Tk, D) in one compiled graph (float32 cos/sin).

    Each shape/dtype/grad combination is its own cached kernel; dynamo's default limit of 8
    recompiles per function would stop a model that sees more sequence lengths than that.
    """
    import torch._dynamo.config as dynamo_config

    with dynamo_config.patch(recompile_limit=RECOMPILE_LIMIT):
        return _compiled(layout)(q, k, cos_q.float(), sin_q.float(), cos_k.float(), sin_k.float())
