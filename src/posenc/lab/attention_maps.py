"""Attention weights of every layer of a trained model, and the mean attention distance.

Each layer's weights are recomputed from its input (captured by a forward pre-hook) with
``posenc.analysis.attention_weights``, which calls the encoding's hooks in ``Attention``'s
order. Mean attention distance: sum_j p_ij |i - j|, averaged over queries, heads and batch.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor

from ..analysis.subjects import attention_weights
from ..attention import Attention, TinyTransformer


@torch.no_grad()
def attention_maps(net: TinyTransformer, tokens: Tensor) -> list[Tensor]:
    """Per layer, weights (B, H, T, T) of ``net`` reading ``tokens`` (B, T)."""
    captured: list[tuple[Attention, Tensor, Tensor]] = []

    def grab(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # the model hands each layer the forward's position context
        captured.append((module, args[0], kwargs["ctx"].q_pos))

    layers = [cast(Attention, block.attn) for block in net.blocks]
    hooks = [attn.register_forward_pre_hook(grab, with_kwargs=True) for attn in layers]
    try:
        net(tokens)
    finally:
        for h in hooks:
            h.remove()
    return [attention_weights(attn, x, pos).float() for attn, x, pos in captured]


def mean_distance(probs: Tensor) -> float:
    """Mean |i - j| under the attention probabilities (B, H, T, T)."""
    T = probs.shape[-1]
    idx = torch.arange(T, device=probs.device, dtype=probs.dtype)
    dist = (idx[:, None] - idx[None, :]).abs()  # (T, T)
    return float((probs * dist).sum(-1).mean())
