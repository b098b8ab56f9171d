"""Flax EncoderDecoder, as torch's (same configuration, parameter names and encoding
placement): ``src_tok``/``tgt_tok`` -> ``encoder`` blocks -> ``encoder_norm`` -> each decoder
layer's cross-attention memory; ``decoder`` blocks (``norm1``, ``attn``, ``norm_cross``,
``cross_attn``, ``norm2``, ``mlp``) -> ``decoder_norm`` -> ``head``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from .._forms import encoder_form
from ..encodings.configs import EncoderDecoderConfig
from .attention import Attention, KVCache, Memory, context
from .base import PositionalEncoding, PositionContext, accepted_keys, build_for_model, check_ndim
from .encodings import NoPE
from .model import _INIT, Block, feed_forward

Array = jax.Array


class DecoderBlock(nnx.Module):
    """As torch's: x + attn(norm1(x)), x + cross_attn(norm_cross(x), memory), x + mlp(norm2(x))."""

    def __init__(
        self, attn: Attention, cross_attn: Attention, d_ff: int, *, dropout: float, rngs: nnx.Rngs
    ) -> None:
        d = attn.d_model
        self.norm1, self.attn = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs), attn
        self.norm_cross = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.cross_attn = cross_attn
        self.norm2 = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.mlp = feed_forward(d, d_ff, rngs)
        self.drop = nnx.Dropout(dropout, rngs=rngs)

    def __call__(
        self,
        x: Array,
        ctx: PositionContext,
        cache: KVCache | None,
        memory: Memory,
        cross_ctx: PositionContext,
        padding_mask: Array | None = None,
    ) -> Array:
        x = x + self.drop(self.attn(self.norm1(x), cache=cache, ctx=ctx, padding_mask=padding_mask))
        x = x + self.drop(self.cross_attn.cross(self.norm_cross(x), memory, ctx=cross_ctx))
        return x + self.drop(self.mlp(self.norm2(x)))


class EncoderDecoder(nnx.Module):
    """As torch's ``EncoderDecoder``: ``config`` the ``EncoderDecoderConfig`` arguments;
    ``pe`` a registered name (built for each stack, the encoder's in its encoder form, with
    ``pe_config``), one Flax encoding shared by both stacks, or a pair; cross-attention without
    a position term, or the decoder's rotation with ``cross_rotation``; ``rngs`` seeds the
    parameters."""

    def __init__(
        self,
        *,
        pe: PositionalEncoding | str | tuple[PositionalEncoding, PositionalEncoding],
        pe_config: dict[str, Any] | None = None,
        rngs: nnx.Rngs | None = None,
        **config: Any,
    ) -> None:
        c = EncoderDecoderConfig(**config)
        rngs = rngs or nnx.Rngs(0)
        self.encoder_pe, self.decoder_pe = _encodings(pe, pe_config, c, rngs)
        from ..registry import info

        c.check_axes(*((p.axes, p.name) for p in (self.encoder_pe, self.decoder_pe)))
        c.check_cross_rotation(info(self.decoder_pe.name).cls.capabilities, self.decoder_pe.name)
        self.cross_pe = self.decoder_pe if c.cross_rotation else NoPE()
        self.config = c
        d, d_ff = c.d_model, c.d_ff or 4 * c.d_model
        self.src_tok = nnx.Embed(c.src_vocab_size, d, embedding_init=_INIT, rngs=rngs)
        self.tgt_tok = (
            self.src_tok
            if c.share_embeddings
            else nnx.Embed(c.tgt_vocab_size, d, embedding_init=_INIT, rngs=rngs)
        )

        def attention(pe: PositionalEncoding, causal: bool) -> Attention:
            a = Attention(
                d,
                c.n_heads,
                pe=pe,
                rngs=rngs,
                causal=causal,
                n_kv_heads=c.n_kv_heads,
                dropout=c.dropout,
            )
            for layer in (a.qkv, a.proj):  # torch's init: N(0, 0.02²) for every Linear
                layer.kernel.set_value(_INIT(rngs.params(), layer.kernel.shape, layer.kernel.dtype))
            return a

        self.encoder = nnx.List(
            [
                Block(attention(self.encoder_pe, False), d_ff, dropout=c.dropout, rngs=rngs)
                for _ in range(c.n_encoder_layers)
            ]
        )
        self.encoder_norm = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.decoder = nnx.List(
            [
                DecoderBlock(
                    attention(self.decoder_pe, True),
                    attention(self.cross_pe, False),
                    d_ff,
                    dropout=c.dropout,
                    rngs=rngs,
                )
                for _ in range(c.n_decoder_layers)
            ]
        )
        self.decoder_norm = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(d, c.tgt_vocab_size, use_bias=False, kernel_init=_INIT, rngs=rngs)

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty self-attention KV cache per decoder layer (``capacity`` preallocates)."""
        return [KVCache(capacity) for _ in self.decoder]

    def encode(
        self, src: Array, src_pos: Array | None = None, *, src_padding_mask: Array | None = None
    ) -> Array:
        """Encoder states (B, S, C) of source tokens (B, S) at ``src_pos`` (default 0..S-1)."""
        check_ndim(src, 2, "src", "(B, S)")
        B, S = src.shape
        ctx = context(self.encoder_pe, B, S, src_pos, None)  # once, for every layer
        x = self.encoder_pe.embed(self.src_tok(src), ctx.q_pos, ctx=ctx)  # (B, S, C)
        for block in self.encoder:
            x = block(x, ctx, None, padding_mask=src_padding_mask)
        return self.encoder_norm(x)

    def memory(
        self, src: Array, src_pos: Array | None = None, *, src_padding_mask: Array | None = None
    ) -> list[Memory]:
        """The source encoded once and projected to each decoder layer's cross-attention keys
        and values."""
        states = self.encode(src, src_pos, src_padding_mask=src_padding_mask)
        pos = jnp.arange(src.shape[1]) if src_pos is None else src_pos
        axes = self.encoder_pe.axes
        return [
            b.cross_attn.project_memory(states, pos, src_padding_mask, axes=axes)
            for b in self.decoder
        ]

    def decode(
        self,
        tgt: Array,
        memory: Sequence[Memory],
        tgt_pos: Array | None = None,
        *,
        padding_mask: Array | None = None,
        cache: list[KVCache] | None = None,
    ) -> Array:
        """Logits (B, T, V) of target tokens (B, T) at ``tgt_pos`` (default: after the cache's
        entries) over ``memory``."""
        check_ndim(tgt, 2, "tgt", "(B, T)")
        n = len(self.decoder)
        if len(memory) != n:
            raise ValueError(f"memory must hold {n} decoder layers, got {len(memory)}")
        if cache is not None and len(cache) != n:
            raise ValueError(f"cache must hold {n} decoder layers, got {len(cache)}")
        B, T = tgt.shape
        caches: Sequence[KVCache | None] = cache or [None] * n
        ctx = context(self.decoder_pe, B, T, tgt_pos, caches[0])
        cross_ctx = self.cross_pe.prepare(ctx.q_pos, memory[0].keys.pos)
        x = self.decoder_pe.embed(self.tgt_tok(tgt), ctx.q_pos, ctx=ctx)  # (B, T, C)
        for block, mem, layer_cache in zip(self.decoder, memory, caches, strict=True):
            x = block(x, ctx, layer_cache, mem, cross_ctx, padding_mask=padding_mask)
        return self.head(self.decoder_norm(x))

    def __call__(
        self,
        src: Array,
        tgt: Array,
        src_pos: Array | None = None,
        tgt_pos: Array | None = None,
        *,
        src_padding_mask: Array | None = None,
        tgt_padding_mask: Array | None = None,
    ) -> Array:
        """Logits (B, T, V) of target tokens given source tokens."""
        memory = self.memory(src, src_pos, src_padding_mask=src_padding_mask)
        return self.decode(tgt, memory, tgt_pos, padding_mask=tgt_padding_mask)

    def loss(self, src: Array, tgt: Array, targets: Array, **kwargs: Any) -> Array:
        """Mean cross-entropy of next-token ``targets`` (B, T); -100 entries are ignored."""
        logits = self(src, tgt, **kwargs).astype(jnp.float32)
        keep = targets != -100
        losses = optax.softmax_cross_entropy_with_integer_labels(
            logits, jnp.where(keep, targets, 0)
        )
        return jnp.sum(jnp.where(keep, losses, 0.0)) / jnp.maximum(jnp.sum(keep), 1)


def _encodings(
    pe: PositionalEncoding | str | tuple[PositionalEncoding, PositionalEncoding],
    pe_config: dict[str, Any] | None,
    c: EncoderDecoderConfig,
    rngs: nnx.Rngs,
) -> tuple[PositionalEncoding, PositionalEncoding]:
    """As torch's: (encoder's, decoder's) encoding."""
    if isinstance(pe, str):
        config = pe_config or {}
        size = {"dim": c.d_model, "n_heads": c.n_heads, "max_len": c.max_len}
        encoder_config = encoder_form(accepted_keys(pe), config)
        encoder = build_for_model(pe, rngs=rngs, **size, **encoder_config)
        return encoder, build_for_model(pe, rngs=rngs, **size, **config)
    if pe_config:
        raise ValueError("pe_config applies only when pe is given by name")
    pair = (pe, pe) if isinstance(pe, PositionalEncoding) else pe
    if not (
        isinstance(pair, tuple)
        and len(pair) == 2
        and all(isinstance(p, PositionalEncoding) for p in pair)
    ):
        raise TypeError(
            "pe must be a registered name, a Flax PositionalEncoding or a pair (encoder's, "
            f"decoder's) of them, got {type(pe).__name__}"
        )
    return pair
