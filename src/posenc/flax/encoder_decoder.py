"""Flax EncoderDecoder, as torch's (same configuration, parameter names and encoding
placement): ``src_tok``/``tgt_tok`` -> ``encoder`` blocks -> ``encoder_norm`` -> each decoder
layer's cross-attention memory; ``decoder`` blocks (``norm1``, ``attn``, ``norm_cross``,
``cross_attn``, ``norm2``, ``mlp``) -> ``decoder_norm`` -> ``head``.

Shapes: tokens (B, S) | (B, T), hidden states (B, S|T, C), logits (B, T, V)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .._models import check_layers, stack_layers
from .._schedule import BuiltLayer, LayerSchedule, Named
from ..models.config import EncoderDecoderConfig
from .attention import Attention, MaskArray, position_state
from .base import Encoding, PositionalEncoding, PositionState, check_ndim
from .kv_cache import KVCache, Memory
from .model import (
    _INIT,
    Block,
    LayerQuestions,
    attention_layers,
    cross_entropy,
    feed_forward,
    registry,
)
from .nope import NoPE

Array = jax.Array
#: One stack's encodings, as torch's ``posenc.models.encoder_decoder.Stack``.
Stack = str | Encoding | list[Encoding | Named] | LayerSchedule[Encoding]


class DecoderBlock(nnx.Module):
    """As torch's: pre-norm decoder block, x + attn(norm1(x)) (causal self-attention), then
    x + cross_attn(norm_cross(x), memory), then x + mlp(norm2(x))."""

    def __init__(
        self, attn: Attention, cross_attn: Attention, d_ff: int, *, dropout: float, rngs: nnx.Rngs
    ) -> None:
        d = attn.d_model
        self.norm1, self.attn = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs), attn
        self.norm2 = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.mlp = feed_forward(d, d_ff, rngs)
        self.drop = nnx.Dropout(dropout, rngs=rngs)
        self.norm_cross = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.cross_attn = cross_attn

    def __call__(
        self,
        x: Array,
        ctx: PositionState,
        cache: KVCache | None,
        memory: Memory,
        cross_ctx: PositionState,
        padding_mask: MaskArray | None = None,
    ) -> Array:
        """x (B, T, C) -> (B, T, C): self-attention at ``ctx``, cross-attention over
        ``memory`` at ``cross_ctx``."""
        x = x + self.drop(self.attn(self.norm1(x), cache=cache, ctx=ctx, padding_mask=padding_mask))
        x = x + self.drop(self.cross_attn.cross(self.norm_cross(x), memory, ctx=cross_ctx))
        return x + self.drop(self.mlp(self.norm2(x)))


class EncoderDecoder(nnx.Module):
    """As torch's ``EncoderDecoder``: ``config`` the ``EncoderDecoderConfig`` arguments; ``pe``
    a registered name (built for each stack, the encoder's in its encoder form, with
    ``pe_config``), one Flax encoding shared by both stacks, a per-layer list or
    ``LayerSchedule``, or a pair of those (as torch's); cross-attention without a position
    term, or the decoder's rotation with ``cross_rotation``; ``rngs`` seeds the parameters.

    Raises: ValueError for encoder layers of different position axes, a decoder encoding of
    more than one axis, or ``cross_rotation`` with several decoder encodings or one that does
    more than rotate."""

    def __init__(
        self,
        *,
        pe: Stack | tuple[Stack, Stack],
        pe_config: dict[str, Any] | None = None,
        rngs: nnx.Rngs | None = None,
        **config: Any,
    ) -> None:
        c = EncoderDecoderConfig(**config)
        rngs = rngs or nnx.Rngs(0)
        enc, dec = self.place_encodings(pe, pe_config, c, rngs)
        self.config = c
        d, d_ff = c.d_model, c.d_ff or 4 * c.d_model
        self.src_tok = nnx.Embed(c.src_vocab_size, d, embedding_init=_INIT, rngs=rngs)
        self.tgt_tok = (
            self.src_tok
            if c.share_embeddings
            else nnx.Embed(c.tgt_vocab_size, d, embedding_init=_INIT, rngs=rngs)
        )

        def attention(layer: BuiltLayer[Encoding], causal: bool) -> Attention:
            own = {"pe": layer.pe, "window": layer.window, "chunk": layer.chunk}
            return attention_layers(1, rngs, **asdict(c.attention(causal=causal)) | own)[0]

        cross = BuiltLayer(self.cross_pe, None, None)
        self.encoder = nnx.List(
            [Block(attention(layer, False), d_ff, dropout=c.dropout, rngs=rngs) for layer in enc]
        )
        self.encoder_norm = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.decoder = nnx.List(
            [
                DecoderBlock(
                    attention(layer, True),
                    attention(cross, False),
                    d_ff,
                    dropout=c.dropout,
                    rngs=rngs,
                )
                for layer in dec
            ]
        )
        self.decoder_norm = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(d, c.tgt_vocab_size, use_bias=False, kernel_init=_INIT, rngs=rngs)

    def place_encodings(
        self,
        pe: Stack | tuple[Stack, Stack],
        pe_config: dict[str, Any] | None,
        c: EncoderDecoderConfig,
        rngs: nnx.Rngs,
    ) -> tuple[list[BuiltLayer[Encoding]], list[BuiltLayer[Encoding]]]:
        """Each stack's layers from ``pe`` (``posenc._models.stack_layers``): ``encoder_pe``
        and ``decoder_pe`` are their first layers' (the token embeddings'), every encoding
        checked to read the position axes its stack takes, and ``cross_pe``: NoPE, or with
        ``cross_rotation`` the decoder's one encoding (checked to only rotate)."""
        questions = LayerQuestions()
        enc, dec = stack_layers(
            pe,
            pe_config,
            n_layers=(c.n_encoder_layers, c.n_decoder_layers),
            hooks=questions,
            base=PositionalEncoding,
            kind="Flax PositionalEncoding",
            **registry(c, rngs),
        )
        self.encoder_pe: Encoding = enc[0].pe
        self.decoder_pe: Encoding = dec[0].pe

        def named(p: Encoding) -> tuple[int, str]:
            return p.axes, p.name or type(p).__name__

        if len({layer.pe.axes for layer in enc}) > 1:
            raise ValueError(
                "the encoder's layers must read the same position axes (one src_pos), got "
                + ", ".join(f"{name!r} ({axes})" for axes, name in (named(x.pe) for x in enc))
            )
        for layer in dec:
            c.check_axes(named(self.encoder_pe), named(layer.pe))
        decoders = {id(layer.pe): layer.pe for layer in dec}
        if c.cross_rotation and len(decoders) > 1:
            raise ValueError(
                "cross_rotation rotates cross-attention with the decoder's encoding; this "
                f"decoder has {len(decoders)} (give cross_rotation one decoder encoding)"
            )
        caps = questions.pe_capabilities(self.decoder_pe)
        c.check_cross_rotation(caps, named(self.decoder_pe)[1])
        self.cross_pe: Encoding = self.decoder_pe if c.cross_rotation else NoPE()
        return enc, dec

    def encode(
        self,
        src: Array | np.ndarray,
        src_pos: Array | np.ndarray | None = None,
        *,
        src_padding_mask: MaskArray | None = None,
    ) -> Array:
        """Encoder states (B, S, C) of source tokens ``src`` (B, S) at ``src_pos`` (S,) or
        (B, S) (default 0..S-1)."""
        check_ndim(src, 2, "src", "(B, S)")
        B, S = src.shape
        tokens = self.src_tok(jnp.asarray(src))  # (B, S, C)
        states: dict[int, PositionState] = {}  # one per distinct encoding object

        def state(pe: Encoding) -> PositionState:
            if id(pe) not in states:
                states[id(pe)] = position_state(pe, B, S, src_pos, None, tokens)
            return states[id(pe)]

        first = state(self.encoder_pe)
        x = self.encoder_pe.embed(tokens, first.q_pos, ctx=first)  # (B, S, C)
        for block in self.encoder:
            x = block(x, state(block.attn.pe), None, padding_mask=src_padding_mask)
        return self.encoder_norm(x)

    def memory(
        self,
        src: Array | np.ndarray,
        src_pos: Array | np.ndarray | None = None,
        *,
        src_padding_mask: MaskArray | None = None,
    ) -> list[Memory]:
        """The source encoded once (``encode``) and projected to every decoder layer's
        cross-attention keys and values (``Attention.project_memory``): what ``decode`` reads
        at every step."""
        states = self.encode(src, src_pos, src_padding_mask=src_padding_mask)  # (B, S, C)
        pos = jnp.arange(src.shape[1]) if src_pos is None else src_pos
        axes = self.encoder_pe.axes
        return [
            b.cross_attn.project_memory(states, pos, src_padding_mask, axes=axes)
            for b in self.decoder
        ]

    def decode(
        self,
        tgt: Array | np.ndarray,
        memory: Sequence[Memory],
        tgt_pos: Array | np.ndarray | None = None,
        *,
        padding_mask: MaskArray | None = None,
        cache: Sequence[KVCache] | None = None,
    ) -> Array:
        """Logits (B, T, V) of target tokens ``tgt`` (B, T) at ``tgt_pos`` (T,) or (B, T)
        (default: after the cache's entries) over ``memory`` (``memory(src)``); ``cache`` the
        decoder's self-attention caches (``new_cache``)."""
        check_ndim(tgt, 2, "tgt", "(B, T)")
        n = len(self.decoder)
        check_layers(memory, n, "memory", " decoder layers (EncoderDecoder.memory)")
        check_layers(cache, n, "cache", " decoder layers")
        B, T = tgt.shape
        caches: list[KVCache | None] = list(cache) if cache is not None else [None] * n
        tokens = self.tgt_tok(jnp.asarray(tgt))  # (B, T, C)
        states: dict[int, PositionState] = {}  # one per distinct encoding object

        def state(pe: Encoding, layer_cache: KVCache | None) -> PositionState:
            if id(pe) not in states:
                states[id(pe)] = position_state(pe, B, T, tgt_pos, layer_cache, tokens)
            return states[id(pe)]

        first = state(self.decoder_pe, caches[0])
        cross_ctx = self.cross_pe.prepare(  # once, for every layer
            first.q_pos, memory[0].keys.pos, dtype=tokens.dtype, batch=B
        )
        x = self.decoder_pe.embed(tokens, first.q_pos, ctx=first)  # (B, T, C)
        for block, mem, layer_cache in zip(self.decoder, memory, caches, strict=True):
            ctx = state(block.attn.pe, layer_cache)
            x = block(x, ctx, layer_cache, mem, cross_ctx, padding_mask=padding_mask)
        return self.head(self.decoder_norm(x))  # (B, T, V)

    def __call__(
        self,
        src: Array | np.ndarray,
        tgt: Array | np.ndarray,
        src_pos: Array | np.ndarray | None = None,
        tgt_pos: Array | np.ndarray | None = None,
        *,
        src_padding_mask: MaskArray | None = None,
        tgt_padding_mask: MaskArray | None = None,
    ) -> Array:
        """Logits (B, T, V) of target tokens ``tgt`` (B, T) given source tokens ``src`` (B, S)."""
        memory = self.memory(src, src_pos, src_padding_mask=src_padding_mask)
        return self.decode(tgt, memory, tgt_pos, padding_mask=tgt_padding_mask)

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty self-attention KV cache per decoder layer (``capacity`` preallocates)."""
        return [KVCache(capacity) for _ in self.decoder]

    def loss(self, src: Array, tgt: Array, targets: Array, **kwargs: Any) -> Array:
        """Mean cross-entropy of next-token ``targets`` (B, T); -100 entries are ignored."""
        return cross_entropy(self(src, tgt, **kwargs), targets)
