"""Attention probabilities of a trained model, recomputed from each layer's input with the
encoding's hooks (the same order as ``Attention``: rotate, scale, bias, mask, relative terms),
and the mean attention distance per layer: sum_j p_ij |i - j|, averaged over queries and heads.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import Tensor

from ..attention import Attention, TinyTransformer


@torch.no_grad()
def attention_maps(net: TinyTransformer, tokens: Tensor) -> list[Tensor]:
    """Per layer, probabilities (B, H, T, T) of ``net`` reading ``tokens`` (B, T)."""
    captured: list[tuple[Attention, Tensor, Tensor]] = []

    def grab(module: Any, args: tuple[Any, ...]) -> None:
        captured.append((module, args[0], args[1]))

    layers = [cast(Attention, block.attn) for block in net.blocks]
    hooks = [attn.register_forward_pre_hook(grab) for attn in layers]
    try:
        net(tokens)
    finally:
        for h in hooks:
            h.remove()
    return [layer_probs(attn, x, pos) for attn, x, pos in captured]


def layer_probs(attn: Attention, x: Tensor, pos: Tensor) -> Tensor:
    """Softmax probabilities (B, H, T, T) of one attention layer for its input x (B, T, C)."""
    q, k, _ = attn._project(x)  # (B, H, T, D), (B, Hkv, T, D)
    q, k = attn.pe.rotate(q, k, pos, pos)
    k = k.repeat_interleave(attn.n_heads // attn.n_kv_heads, dim=1)  # (B, H, T, D)
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)  # (B, H, T, T)
    bias = attn.pe.bias(pos, pos)
    if bias is not None:
        scores = scores + bias
    if attn.causal:
        T = scores.shape[-1]
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    scores = attn.pe.relative_logits(scores, q, k, pos, pos)
    return torch.softmax(scores.float(), dim=-1)


def mean_distance(probs: Tensor) -> float:
    """Mean |i - j| under the attention probabilities (B, H, T, T)."""
    T = probs.shape[-1]
    idx = torch.arange(T, device=probs.device, dtype=probs.dtype)
    dist = (idx[:, None] - idx[None, :]).abs()  # (T, T)
    return float((probs * dist).sum(-1).mean())
