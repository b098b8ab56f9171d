"""Flax TinyTransformer, as torch's (same parameter names): ``tok`` -> ``pe.embed`` -> ``blocks``
(pre-norm: ``norm1``, ``attn``, ``norm2``, ``mlp``) -> ``norm`` -> ``head``; LayerNorm eps 1e-5
and exact (erf) GELU, as torch's defaults."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from .._forms import encoder_form
from ..encodings.configs import TransformerConfig
from .attention import Attention, KVCache, context
from .base import PositionalEncoding, PositionContext, accepted_keys, build_for_model, check_ndim

Array = jax.Array
_INIT = nnx.initializers.normal(0.02)  # GPT-2's N(0, 0.02²), as the torch model


def feed_forward(d_model: int, d_ff: int, rngs: nnx.Rngs) -> nnx.Sequential:
    """As torch's: Linear(C, d_ff) -> exact GELU -> Linear(d_ff, C), kernels N(0, 0.02²)."""
    return nnx.Sequential(
        nnx.Linear(d_model, d_ff, kernel_init=_INIT, rngs=rngs),
        partial(jax.nn.gelu, approximate=False),
        nnx.Linear(d_ff, d_model, kernel_init=_INIT, rngs=rngs),
    )


class Block(nnx.Module):
    """Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, attn: Attention, d_ff: int, *, dropout: float, rngs: nnx.Rngs) -> None:
        d = attn.d_model
        self.norm1, self.attn = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs), attn
        self.norm2 = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.mlp = feed_forward(d, d_ff, rngs)
        self.drop = nnx.Dropout(dropout, rngs=rngs)

    def __call__(
        self, x: Array, ctx: PositionContext, cache: KVCache | None, **masks: Array | None
    ) -> Array:
        x = x + self.drop(self.attn(self.norm1(x), cache=cache, ctx=ctx, **masks))
        return x + self.drop(self.mlp(self.norm2(x)))


class TinyTransformer(nnx.Module):
    """As torch's ``TinyTransformer``: ``config`` the ``TransformerConfig`` arguments
    (vocab_size, d_model=64, n_layers=2, n_heads=4, n_kv_heads, d_ff, causal=True, dropout,
    max_len=1024), ``pe`` a Flax encoding shared by every layer, or a registered name built
    for this size with ``pe_config`` (an encoder's in its encoder form unless ``pe_config`` sets
    it); ``rngs`` seeds the parameters."""

    def __init__(
        self,
        *,
        pe: PositionalEncoding | str,
        pe_config: dict[str, Any] | None = None,
        rngs: nnx.Rngs | None = None,
        **config: Any,
    ) -> None:
        c = TransformerConfig(**config)
        rngs = rngs or nnx.Rngs(0)
        if isinstance(pe, str):
            pe_config = pe_config or {}
            if not c.causal:
                pe_config = encoder_form(accepted_keys(pe), pe_config)
            size = {"dim": c.d_model, "n_heads": c.n_heads, "max_len": c.max_len}
            pe = build_for_model(pe, rngs=rngs, **size, **pe_config)
        elif pe_config:
            raise ValueError("pe_config applies only when pe is given by name")
        self.pe, self.causal = pe, c.causal
        self.tok = nnx.Embed(c.vocab_size, c.d_model, embedding_init=_INIT, rngs=rngs)
        attn = [Attention(pe=pe, rngs=rngs, **asdict(c.attention())) for _ in range(c.n_layers)]
        for a in attn:  # torch's _init_weights: N(0, 0.02²) for every Linear
            for layer in (a.qkv, a.proj):
                layer.kernel.set_value(_INIT(rngs.params(), layer.kernel.shape, layer.kernel.dtype))
        self.blocks = nnx.List([Block(a, c.d_ff or 0, dropout=c.dropout, rngs=rngs) for a in attn])
        self.norm = nnx.LayerNorm(c.d_model, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(
            c.d_model, c.vocab_size, use_bias=False, kernel_init=_INIT, rngs=rngs
        )

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty KV cache per layer for incremental decoding; ``capacity`` preallocates
        (fixed shapes: one ``jax.jit`` compile for every decoding step)."""
        return [KVCache(capacity) for _ in self.blocks]

    def features(
        self,
        idx: Array,
        pos: Array | None = None,
        *,
        cache: list[KVCache] | None = None,
        **masks: Array | None,
    ) -> Array:
        """Hidden states (B, T, C) for tokens idx (B, T) at positions (T,) or (B, T); ``masks``
        (``padding_mask``, ``segment_ids``) as ``Attention``'s. The position context is built
        once (``pe.prepare``) for every layer."""
        check_ndim(idx, 2, "idx", "(B, T)")
        if cache is not None and len(cache) != len(self.blocks):
            raise ValueError(f"cache must hold {len(self.blocks)} layers, got {len(cache)}")
        B, T = idx.shape
        ctx = context(self.pe, B, T, pos, None if cache is None else cache[0])
        x = self.pe.embed(self.tok(idx), ctx.q_pos, ctx=ctx)  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, ctx, None if cache is None else cache[i], **masks)
        return self.norm(x)

    def __call__(self, idx: Array, pos: Array | None = None, **kwargs: Any) -> Array:
        """Logits (B, T, V); keywords as ``features``."""
        return self.head(self.features(idx, pos, **kwargs))

    def loss(self, idx: Array, targets: Array, **kwargs: Any) -> Array:
        """Mean cross-entropy of next-token ``targets`` (B, T); -100 entries are ignored."""
        logits = self(idx, **kwargs).astype(jnp.float32)  # (B, T, V)
        keep = targets != -100
        losses = optax.softmax_cross_entropy_with_integer_labels(
            logits, jnp.where(keep, targets, 0)
        )
        return jnp.sum(jnp.where(keep, losses, 0.0)) / jnp.maximum(jnp.sum(keep), 1)
