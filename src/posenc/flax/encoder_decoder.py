"""Flax EncoderDecoder, as torch's (same configuration, parameter names and encoding
placement): ``src_tok``/``tgt_tok`` -> ``encoder`` blocks -> ``encoder_norm`` -> each decoder
layer's cross-attention memory; ``decoder`` blocks (``norm1``, ``attn``, ``norm_cross``,
``cross_attn``, ``norm2``, ``mlp``) -> ``decoder_norm`` -> ``head``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import jax
from flax import nnx

from .._models import DecoderBlockFlow, EncoderDecoderFlow
from .._schedule import BuiltLayer, LayerSchedule, Named
from ..models.config import EncoderDecoderConfig
from .attention import Attention, KVCache
from .base import PositionalEncoding
from .encodings import NoPE
from .model import _INIT, Block, FlaxHooks, attention_layers, cross_entropy, registry

Array = jax.Array
#: One stack's encodings, as torch's ``posenc.models.encoder_decoder.Stack``.
Stack = (
    str | PositionalEncoding | list[PositionalEncoding | Named] | LayerSchedule[PositionalEncoding]
)


class DecoderBlock(DecoderBlockFlow, Block):
    """As torch's (``posenc._models.DecoderBlockFlow``): a ``Block`` with ``norm_cross`` and
    ``cross_attn``."""

    def __init__(
        self, attn: Attention, cross_attn: Attention, d_ff: int, *, dropout: float, rngs: nnx.Rngs
    ) -> None:
        super().__init__(attn, d_ff, dropout=dropout, rngs=rngs)
        self.norm_cross = nnx.LayerNorm(attn.d_model, epsilon=1e-5, rngs=rngs)
        self.cross_attn = cross_attn

    __call__ = DecoderBlockFlow.forward  # type: ignore[assignment]


class EncoderDecoder(FlaxHooks, EncoderDecoderFlow, nnx.Module):
    """As torch's ``EncoderDecoder`` (``encode``, ``memory``, ``decode``, ``__call__``:
    ``posenc._models.EncoderDecoderFlow``): ``config`` the ``EncoderDecoderConfig`` arguments;
    ``pe`` a registered name (built for each stack, the encoder's in its encoder form, with
    ``pe_config``), one Flax encoding shared by both stacks, a per-layer list or
    ``LayerSchedule``, or a pair of those (as torch's); cross-attention without
    a position term, or the decoder's rotation with ``cross_rotation``; ``rngs`` seeds the
    parameters."""

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
        kind = "Flax PositionalEncoding"
        enc, dec = self.place_encodings(
            pe, pe_config, c, nope=NoPE, base=PositionalEncoding, kind=kind, **registry(c, rngs)
        )
        self.config = c
        d, d_ff = c.d_model, c.d_ff or 4 * c.d_model
        self.src_tok = nnx.Embed(c.src_vocab_size, d, embedding_init=_INIT, rngs=rngs)
        self.tgt_tok = (
            self.src_tok
            if c.share_embeddings
            else nnx.Embed(c.tgt_vocab_size, d, embedding_init=_INIT, rngs=rngs)
        )

        def attention(layer: BuiltLayer[PositionalEncoding], causal: bool) -> Attention:
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

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty self-attention KV cache per decoder layer (``capacity`` preallocates)."""
        return [KVCache(capacity) for _ in self.decoder]

    def loss(self, src: Array, tgt: Array, targets: Array, **kwargs: Any) -> Array:
        """Mean cross-entropy of next-token ``targets`` (B, T); -100 entries are ignored."""
        return cross_entropy(self(src, tgt, **kwargs), targets)
