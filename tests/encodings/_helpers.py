"""Shared inputs for the family tests: float64 attention inputs and a reference-checked layer."""

from __future__ import annotations

import math

import numpy as np
import torch

from posenc import Attention


def qkv(B: int = 2, H: int = 3, Tq: int = 5, Tk: int = 5, D: int = 8, seed: int = 0):  # type: ignore[no-untyped-def]
    """Random float64 q (B, H, Tq, D), k and v (B, H, Tk, D)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Tq, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, H, Tk, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, Tk, D, generator=g, dtype=torch.float64)
    return q, k, v


def heads_of(attn: Attention, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The layer's own q, k, v (B, H, T, D) for x (B, T, C), as NumPy (no encoding applied)."""
    with torch.no_grad():
        q, k, v = attn._project(x)
    return q.numpy(), k.numpy(), v.numpy()


def merge_heads(attn: Attention, heads: np.ndarray) -> np.ndarray:
    """(B, H, T, D) attention output -> the layer's output projection (B, T, C)."""
    B, H, T, D = heads.shape
    merged = heads.transpose(0, 2, 1, 3).reshape(B, T, H * D)
    return merged @ attn.proj.weight.detach().numpy().T


def softmax_attention(logits: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax over keys of (B, H, Tq, Tk) logits (-inf allowed) times v (B, H, Tk, D)."""
    top = logits.max(axis=-1, keepdims=True)
    w = np.exp(logits - top)
    return (w / w.sum(axis=-1, keepdims=True)) @ v


def causal_mask(Tq: int, Tk: int) -> np.ndarray:
    """-inf above the causal diagonal of a (Tq, Tk) block ending at key Tk - 1."""
    allowed = np.tril(np.ones((Tq, Tk), dtype=bool), Tk - Tq)
    return np.where(allowed, 0.0, -math.inf)


def masked_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scaled scores (B, H, Tq, Tk) with keys after each query (by cache index) at -inf."""
    Tq, Tk = q.shape[2], k.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq), float("-inf"))
