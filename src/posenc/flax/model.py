"""Flax nnx TinyTransformer: the torch ``posenc.attention.TinyTransformer``, same parameter names.

Token embedding ``tok`` -> ``pe.embed`` -> ``blocks`` (pre-norm: ``norm1``, ``attn``, ``norm2``,
``mlp``) -> ``norm`` -> ``head``. LayerNorm eps 1e-5 and exact (erf) GELU, as torch's defaults.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from .._forms import encoder_form
from .._validate import check_positive_int
from .attention import Attention, KVCache
from .base import (
    ENCODINGS,
    PositionalEncoding,
    build_for_model,
    check_ndim,
    check_positions,
    keyword_params,
)

Array = jax.Array
_INIT = nnx.initializers.normal(0.02)  # GPT-2's N(0, 0.02²), as the torch model


def _gelu(x: Array) -> Array:
    return jax.nn.gelu(x, approximate=False)


class Block(nnx.Module):
    """Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, attn: Attention, d_ff: int, *, dropout: float, rngs: nnx.Rngs) -> None:
        d = attn.d_model
        self.norm1, self.attn = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs), attn
        self.norm2 = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.mlp = nnx.Sequential(
            nnx.Linear(d, d_ff, kernel_init=_INIT, rngs=rngs),
            _gelu,
            nnx.Linear(d_ff, d, kernel_init=_INIT, rngs=rngs),
        )
        self.drop = nnx.Dropout(dropout, rngs=rngs)

    def __call__(self, x: Array, pos: Array, cache: KVCache | None, **masks: Any) -> Array:
        x = x + self.drop(self.attn(self.norm1(x), pos, cache=cache, **masks))
        return x + self.drop(self.mlp(self.norm2(x)))


class TinyTransformer(nnx.Module):
    """A small pre-norm decoder (``causal=True``) or encoder with one shared encoding ``pe`` (a
    Flax encoding, or a registered name built for this model's size with ``pe_config``; an
    encoder's takes its encoder form unless ``pe_config`` sets it, as the torch model's)."""

    def __init__(
        self,
        *,
        vocab_size: int,
        pe: PositionalEncoding | str,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        n_kv_heads: int | None = None,
        d_ff: int | None = None,
        causal: bool = True,
        dropout: float = 0.0,
        max_len: int = 1024,
        pe_config: dict[str, Any] | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        for value, what in ((vocab_size, "vocab_size"), (n_layers, "n_layers")):
            check_positive_int(value, what)
        rngs = rngs or nnx.Rngs(0)
        if isinstance(pe, str):
            config = pe_config or {}
            if not causal and pe in ENCODINGS:
                config = encoder_form(keyword_params(ENCODINGS[pe]), config)
            pe = build_for_model(
                pe, dim=d_model, n_heads=n_heads, max_len=max_len, rngs=rngs, **config
            )
        elif pe_config:
            raise ValueError("pe_config applies only when pe is given by name")
        self.pe, self.causal = pe, causal
        self.tok = nnx.Embed(vocab_size, d_model, embedding_init=_INIT, rngs=rngs)
        attn = [
            Attention(
                d_model,
                n_heads,
                pe=pe,
                causal=causal,
                n_kv_heads=n_kv_heads,
                dropout=dropout,
                rngs=rngs,
            )
            for _ in range(n_layers)
        ]
        for a in attn:  # torch's _init_weights: N(0, 0.02²) for every Linear
            for layer in (a.qkv, a.proj):
                layer.kernel.set_value(_INIT(rngs.params(), layer.kernel.shape, layer.kernel.dtype))
        self.blocks = nnx.List(
            [Block(a, d_ff or 4 * d_model, dropout=dropout, rngs=rngs) for a in attn]
        )
        self.norm = nnx.LayerNorm(d_model, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(d_model, vocab_size, use_bias=False, kernel_init=_INIT, rngs=rngs)

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty KV cache per layer for incremental decoding; ``capacity`` preallocates
        (fixed shapes: one ``jax.jit`` compile for every decoding step)."""
        return [KVCache(capacity) for _ in self.blocks]

    def features(
        self,
        idx: Array,
        pos: Array | None = None,
        *,
        padding_mask: Array | None = None,
        segment_ids: Array | None = None,
        cache: list[KVCache] | None = None,
    ) -> Array:
        """Hidden states (B, T, C) for tokens idx (B, T) at positions (T,) or (B, T)."""
        check_ndim(idx, 2, "idx", "(B, T)")
        if cache is not None and len(cache) != len(self.blocks):
            raise ValueError(f"cache must hold {len(self.blocks)} layers, got {len(cache)}")
        if pos is None:
            offset = 0 if cache is None else cache[0].offset()  # traced when preallocated
            pos = offset + jnp.arange(idx.shape[1])
        else:  # one JAX array for every hook (NumPy or unsigned input converted once)
            pos = check_positions(pos, "pos")
        x = self.pe.embed(self.tok(idx), pos)  # (B, T, C)
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else cache[i]
            x = block(x, pos, layer_cache, padding_mask=padding_mask, segment_ids=segment_ids)
        self.pe.clear_cache()  # no per-forward memo left in the state (one nnx.jit trace)
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
