"""Flax TinyTransformer, as torch's (same parameter names): ``tok`` -> ``pe.embed`` -> ``blocks``
(pre-norm: ``norm1``, ``attn``, ``norm2``, ``mlp``) -> ``norm`` -> ``head``; LayerNorm eps 1e-5
and exact (erf) GELU, as torch's defaults."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from .._models import BlockFlow, Limits, ModelHooks, TransformerFlow, layer_encodings, schedule_of
from .._schedule import LayerSchedule, Named
from ..encodings.capabilities import Capabilities
from ..models.config import TransformerConfig
from ..registry import info
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


class FlaxHooks(ModelHooks):
    """The Flax side of ``posenc._models``' hooks; ``__call__`` runs ``forward``."""

    def check_tokens(self, idx: Array, what: str) -> None:
        check_ndim(idx, 2, what, "(B, T)")

    def new_context(
        self, pe: PositionalEncoding, pos: Any, B: int, T: int, cache: Any, like: Array
    ) -> PositionContext:
        return context(pe, B, T, pos, cache)

    def default_positions(self, S: int, like: Array) -> Array:
        return jnp.arange(S)

    def pe_axes(self, pe: PositionalEncoding) -> int:
        return pe.axes

    def pe_capabilities(self, pe: PositionalEncoding) -> Capabilities:
        return info(pe.name).cls.capabilities  # the torch twin's declaration

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)  # type: ignore[attr-defined]


def registry(c: Any, rngs: nnx.Rngs) -> dict[str, Any]:
    """How ``posenc._models`` builds Flax encodings by name for a model of configuration ``c``
    (its sizes), seeded by ``rngs``."""
    size = {"dim": c.d_model, "n_heads": c.n_heads, "max_len": c.max_len}
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


class Block(BlockFlow, nnx.Module):
    """Pre-norm block (``posenc._models.BlockFlow``)."""

    def __init__(self, attn: Attention, d_ff: int, *, dropout: float, rngs: nnx.Rngs) -> None:
        d = attn.d_model
        self.norm1, self.attn = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs), attn
        self.norm2 = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.mlp = feed_forward(d, d_ff, rngs)
        self.drop = nnx.Dropout(dropout, rngs=rngs)

    __call__ = BlockFlow.forward


class TinyTransformer(FlaxHooks, TransformerFlow, nnx.Module):
    """As torch's ``TinyTransformer`` (``features``, ``__call__``:
    ``posenc._models.TransformerFlow``): ``config`` the ``TransformerConfig`` arguments
    (vocab_size, d_model=64, n_layers=2, n_heads=4, n_kv_heads, d_ff, causal=True, dropout,
    max_len=1024), ``pe`` a Flax encoding shared by every layer, or a registered name built
    for this size with ``pe_config`` (an encoder's in its encoder form unless ``pe_config`` sets
    it), or per layer as torch's (a list or pattern, a ``LayerSchedule``, with ``window`` and
    ``chunk``; a Flax cache keeps every key, the mask limits a local layer to its own);
    ``rngs`` seeds the parameters."""

    def __init__(
        self,
        *,
        pe: PositionalEncoding
        | str
        | Sequence[PositionalEncoding | Named]
        | LayerSchedule[PositionalEncoding],
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
            hooks=self,
            encoder=not c.causal,
            **registry(c, rngs),
        )
        self.pe: PositionalEncoding = layers[0].pe  # the embedding's (every layer's, unlisted)
        self.causal = c.causal
        self.tok = nnx.Embed(c.vocab_size, c.d_model, embedding_init=_INIT, rngs=rngs)
        each = [{"pe": p, "window": w, "chunk": k} for p, w, k in layers]
        attn = attention_layers(c.n_layers, rngs, each=each, **asdict(c.attention()))
        self.blocks = nnx.List([Block(a, c.d_ff or 0, dropout=c.dropout, rngs=rngs) for a in attn])
        self.norm = nnx.LayerNorm(c.d_model, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(
            c.d_model, c.vocab_size, use_bias=False, kernel_init=_INIT, rngs=rngs
        )

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty KV cache per layer for incremental decoding; ``capacity`` preallocates
        (fixed shapes: one ``jax.jit`` compile for every decoding step)."""
        return [KVCache(capacity) for _ in self.blocks]

    def loss(self, idx: Array, targets: Array, **kwargs: Any) -> Array:
        """Mean cross-entropy of next-token ``targets`` (B, T); -100 entries are ignored."""
        return cross_entropy(self(idx, **kwargs), targets)
