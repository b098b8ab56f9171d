"""Flax TinyTransformer, as torch's (same parameter names): ``tok`` -> ``pe.embed`` -> ``blocks``
(pre-norm: ``norm1``, ``attn``, ``norm2``, ``mlp``) -> ``norm`` -> ``head``; LayerNorm eps 1e-5
and exact (erf) GELU, as torch's defaults. The position state is made once per forward for
every layer of one encoding (``pe.prepare``) and handed to each block."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from .._models import Limits, check_layers, layer_encodings, schedule_of
from .._schedule import LayerSchedule, Named
from ..encodings.capabilities import Capabilities
from ..models.config import EncoderDecoderConfig, TransformerConfig
from ..registry import info
from .attention import Attention, MaskArray, position_state
from .base import Encoding, PositionState, accepted_keys, build_for_model, check_ndim
from .kv_cache import KVCache

Array = jax.Array
_INIT = nnx.initializers.normal(0.02)  # GPT-2's N(0, 0.02²), as the torch model


def feed_forward(d_model: int, d_ff: int, rngs: nnx.Rngs) -> nnx.Sequential:
    """As torch's: Linear(C, d_ff) -> exact GELU -> Linear(d_ff, C), kernels N(0, 0.02²)."""
    return nnx.Sequential(
        nnx.Linear(d_model, d_ff, kernel_init=_INIT, rngs=rngs),
        partial(jax.nn.gelu, approximate=False),
        nnx.Linear(d_ff, d_model, kernel_init=_INIT, rngs=rngs),
    )


class LayerQuestions:
    """What ``posenc._models.layer_encodings`` asks of a Flax encoding while it places them:
    its position axes and its torch twin's capabilities (``posenc._models.EncodingTraits``;
    not a base of the models: an argument of that shared helper)."""

    def pe_axes(self, pe: Encoding) -> int:
        return pe.axes

    def pe_capabilities(self, pe: Encoding) -> Capabilities:
        return info(pe.name).cls.capabilities  # the torch twin's declaration


def registry(c: TransformerConfig | EncoderDecoderConfig, rngs: nnx.Rngs) -> dict[str, Any]:
    """How ``posenc._models`` builds Flax encodings by name for a model of configuration ``c``
    (its sizes), seeded by ``rngs``: the ``build``, ``parameters`` and ``size`` keywords."""
    size = {"dim": c.d_model, "n_heads": c.n_heads, "max_len": c.max_len}
    if c.n_kv_heads is not None:  # (PaTH's transforms belong to key heads)
        size["n_kv_heads"] = c.n_kv_heads
    return {"build": partial(build_for_model, rngs=rngs), "parameters": accepted_keys, "size": size}


def cross_entropy(logits: Array, targets: Array) -> Array:
    """Mean cross-entropy of logits (B, T, V) at next-token ``targets`` (B, T); -100 entries
    are ignored."""
    keep = targets != -100
    losses = optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), jnp.where(keep, targets, 0)
    )
    return jnp.sum(jnp.where(keep, losses, 0.0)) / jnp.maximum(jnp.sum(keep), 1)


def attention_layers(
    n: int, rngs: nnx.Rngs, *, each: Sequence[dict[str, Any]] | None = None, **config: Any
) -> list[Attention]:
    """``n`` ``Attention`` layers of ``config`` (``pe``, ``AttentionConfig`` arguments), layer
    i's updated by ``each[i]`` (its ``pe``, ``window``, ``chunk``), then torch's init of their
    ``qkv`` and ``proj`` kernels: N(0, 0.02²). The models add ``pe.embed`` to the token
    embeddings themselves: the layers are built ``embedded``."""
    own = each or [{}] * n
    layers = [Attention(rngs=rngs, embedded=True, **(config | own[i])) for i in range(n)]
    for linear in (x for a in layers for x in (a.qkv, a.proj)):
        linear.kernel.set_value(_INIT(rngs.params(), linear.kernel.shape, linear.kernel.dtype))
    return layers


class Block(nnx.Module):
    """Pre-norm block (GPT-2 style): x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, attn: Attention, d_ff: int, *, dropout: float, rngs: nnx.Rngs) -> None:
        d = attn.d_model
        self.norm1, self.attn = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs), attn
        self.norm2 = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.mlp = feed_forward(d, d_ff, rngs)
        self.drop = nnx.Dropout(dropout, rngs=rngs)

    def __call__(
        self,
        x: Array,
        ctx: PositionState,
        cache: KVCache | None,
        *,
        padding_mask: MaskArray | None = None,
        segment_ids: MaskArray | None = None,
    ) -> Array:
        """x (B, T, C) -> (B, T, C), attention at the forward's position state ``ctx``."""
        h = self.attn(
            self.norm1(x), cache=cache, ctx=ctx, padding_mask=padding_mask, segment_ids=segment_ids
        )
        x = x + self.drop(h)
        return x + self.drop(self.mlp(self.norm2(x)))


class TinyTransformer(nnx.Module):
    """As torch's ``TinyTransformer``: ``config`` the ``TransformerConfig`` arguments
    (vocab_size, d_model=64, n_layers=2, n_heads=4, n_kv_heads, d_ff, causal=True, dropout,
    max_len=1024), ``pe`` a Flax encoding shared by every layer, or a registered name built
    for this size with ``pe_config`` (an encoder's in its encoder form unless ``pe_config`` sets
    it), or per layer as torch's (a list or pattern, a ``LayerSchedule``, with ``window`` and
    ``chunk``; a Flax cache keeps every key, the mask limits a local layer to its own);
    ``rngs`` seeds the parameters.

    Shapes: tokens (B, T), hidden states (B, T, C), logits (B, T, V)."""

    def __init__(
        self,
        *,
        pe: Encoding | str | Sequence[Encoding | Named] | LayerSchedule[Encoding],
        pe_config: dict[str, Any] | None = None,
        rngs: nnx.Rngs | None = None,
        window: Limits = None,
        chunk: Limits = None,
        **config: Any,
    ) -> None:
        c = TransformerConfig(**config)
        rngs = rngs or nnx.Rngs(0)
        schedule, listed = schedule_of(pe, window, chunk)
        layers = layer_encodings(
            schedule,
            c.n_layers,
            pe_config,
            listed=listed,
            hooks=LayerQuestions(),
            encoder=not c.causal,
            **registry(c, rngs),
        )
        self.pe: Encoding = layers[0].pe  # the embedding's (every layer's, unlisted)
        self.causal = c.causal
        self.tok = nnx.Embed(c.vocab_size, c.d_model, embedding_init=_INIT, rngs=rngs)
        each = [{"pe": p, "window": w, "chunk": k} for p, w, k in layers]
        attn = attention_layers(c.n_layers, rngs, each=each, **asdict(c.attention()))
        self.blocks = nnx.List([Block(a, c.d_ff or 0, dropout=c.dropout, rngs=rngs) for a in attn])
        self.norm = nnx.LayerNorm(c.d_model, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(
            c.d_model, c.vocab_size, use_bias=False, kernel_init=_INIT, rngs=rngs
        )

    def features(
        self,
        idx: Array | np.ndarray,
        pos: Array | np.ndarray | None = None,
        *,
        padding_mask: MaskArray | None = None,
        segment_ids: MaskArray | None = None,
        cache: Sequence[KVCache] | None = None,
    ) -> Array:
        """Hidden states (B, T, C) for tokens idx (B, T) at positions pos (T,) or (B, T)
        (default: after the cache's entries); the position state is made once (``pe.prepare``)
        for every layer of one encoding."""
        check_ndim(idx, 2, "idx", "(B, T)")
        check_layers(cache, len(self.blocks), "cache", " layers")
        B, T = idx.shape
        caches: list[KVCache | None] = (
            list(cache) if cache is not None else [None] * len(self.blocks)
        )
        tokens = self.tok(jnp.asarray(idx))  # (B, T, C)
        states: dict[int, PositionState] = {}  # one per distinct encoding object

        def state(pe: Encoding, layer_cache: KVCache | None) -> PositionState:
            if id(pe) not in states:
                states[id(pe)] = position_state(pe, B, T, pos, layer_cache, tokens)
            return states[id(pe)]

        first = state(self.pe, caches[0])
        x = self.pe.embed(tokens, first.q_pos, ctx=first)  # (B, T, C)
        for block, layer_cache in zip(self.blocks, caches, strict=True):
            ctx = state(block.attn.pe, layer_cache)
            x = block(x, ctx, layer_cache, padding_mask=padding_mask, segment_ids=segment_ids)
        return self.norm(x)

    def __call__(
        self,
        idx: Array | np.ndarray,
        pos: Array | np.ndarray | None = None,
        *,
        padding_mask: MaskArray | None = None,
        segment_ids: MaskArray | None = None,
        cache: Sequence[KVCache] | None = None,
    ) -> Array:
        """Logits (B, T, V); arguments as ``features``."""
        x = self.features(idx, pos, padding_mask=padding_mask, segment_ids=segment_ids, cache=cache)
        return self.head(x)

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty KV cache per layer for incremental decoding; ``capacity`` preallocates
        (fixed shapes: one ``jax.jit`` compile for every decoding step)."""
        return [KVCache(capacity) for _ in self.blocks]

    def loss(self, idx: Array, targets: Array, **kwargs: Any) -> Array:
        """Mean cross-entropy of next-token ``targets`` (B, T); -100 entries are ignored."""
        return cross_entropy(self(idx, **kwargs), targets)
