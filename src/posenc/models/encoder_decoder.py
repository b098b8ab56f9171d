"""EncoderDecoder: a pre-norm encoder-decoder transformer (Vaswani et al. 2017) with each
positional encoding placed where its paper places it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict, Unpack, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._models import check_layers, stack_layers
from .._schedule import BuiltLayer, LayerSchedule, Named, cache_keep
from .._validate import check_mask_tensor, check_positive_int, check_token_range
from ..attention.attention import Attention
from ..attention.cache import KeyValueCache
from ..attention.cross import CrossAttention
from ..attention.inputs import new_context
from ..attention.keys import Memory
from ..attention.positions import positions_from_padding
from ..encodings.base import PositionalEncoding, default_positions
from ..encodings.nope import NoPE
from ..encodings.state import PositionState
from .config import EncoderDecoderConfig
from .generate import DecodeOptions, Decoding, check_token_ids
from .kv_cache import KVCache
from .transformer import (
    TORCH_TRAITS,
    Block,
    build_encoding,
    encoding_parameters,
    feed_forward,
    init_weights,
)

#: One stack's encodings: a registered name, a built encoding for every layer, a list of them
#: per layer (a pattern; names may be (name, config)) or a ``LayerSchedule``.
Stack = (
    str | PositionalEncoding | list[PositionalEncoding | Named] | LayerSchedule[PositionalEncoding]
)


class ForwardOptions(TypedDict, total=False):
    """The keywords of ``EncoderDecoder.forward`` past the tokens (``loss`` passes them on)."""

    src_pos: Tensor | None
    tgt_pos: Tensor | None
    src_padding_mask: Tensor | None
    tgt_padding_mask: Tensor | None


class DecoderBlock(nn.Module):
    """Pre-norm decoder block: x + attn(norm1(x)) (causal self-attention), then
    x + cross_attn(norm_cross(x), memory), then x + mlp(norm2(x))."""

    def __init__(
        self, attn: Attention, cross_attn: CrossAttention, d_ff: int, dropout: float
    ) -> None:
        super().__init__()
        d = attn.d_model
        self.norm1, self.attn = nn.LayerNorm(d), attn
        self.norm_cross, self.cross_attn = nn.LayerNorm(d), cross_attn
        self.norm2 = nn.LayerNorm(d)
        self.mlp = feed_forward(d, d_ff)
        self.drop = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        ctx: PositionState,
        cache: KeyValueCache | None,
        memory: Memory,
        cross_ctx: PositionState,
        padding_mask: Tensor | None = None,
    ) -> Tensor:
        """x (B, T, C) -> (B, T, C): causal self-attention at ``ctx`` with this layer's
        ``cache``, cross-attention over ``memory`` at ``cross_ctx``, the MLP."""
        h = self.attn(self.norm1(x), cache=cache, ctx=ctx, padding_mask=padding_mask)
        x = x + self.drop(h)  # (B, T, C)
        x = x + self.drop(self.cross_attn.cross(self.norm_cross(x), memory, ctx=cross_ctx))
        out: Tensor = x + self.drop(self.mlp(self.norm2(x)))
        return out


class EncoderDecoder(nn.Module):
    """An encoder-decoder transformer: source tokens in, target logits out.

    Source tokens -> encoder (bidirectional self-attention) -> memory; target tokens ->
    decoder (causal self-attention, cross-attention over the memory) -> vocabulary logits
    (``encode``, ``memory``, ``decode``, ``forward``).

    Each encoding is placed as its paper does:

    - score biases and relative terms (T5, ALiBi, Kerple, FIRE, Shaw, Transformer-XL, CoPE) in
      self-attention only, the encoder's in its encoder form (``posenc._forms.ENCODER_FORM``:
      T5's bidirectional buckets, Raffel et al. 2020; ALiBi's -m|i - j|; FIRE's symmetric
      normaliser), the decoder's causal (T5: unidirectional buckets); cross-attention gets no
      position term (T5 has none);
    - additive tables (sinusoidal, learned) added to the source and to the target embeddings
      (Vaswani et al. 2017), each stack its own table where it is learned;
    - rotations (RoPE, xPos, PoPE) in self-attention. ``cross_rotation=True`` also rotates
      cross-attention with the decoder's encoding, queries at their target positions and keys
      at their source positions, so scores depend on target - source position (as
      x-transformers' cross-attention rotation given ``context_pos``); for encodings that only
      rotate (``rope``, ``xpos``, ``pope``).

    ``pe``: a registered name, built for each stack (the encoder in its encoder form) with
    ``pe_config``; one built encoding shared by both stacks as it is; a per-layer schedule
    for both stacks, a list of encodings (built, names, or (name, config)) repeated to each
    stack's depth, or a ``LayerSchedule`` (with sliding windows and chunks per layer: the
    encoder's bidirectional, the decoder's causal, its cache keeping only what a local layer
    sees), each distinct one built once per stack; or a pair (the encoder's, the decoder's)
    of any of these. Cross-attention keeps one encoding (NoPE, or the decoder's one rotation
    with ``cross_rotation``). ``share_embeddings``: one token table for source and target (one
    vocabulary). The other arguments as ``TinyTransformer``'s (``EncoderDecoderConfig``).
    Positions are explicit, default 0, 1, ... (the decoder's after its cache); an encoder of
    image or video grids (a pair with a 2-D/3-D encoding first) takes ``src_pos`` (S, A) or
    (B, S, A), the decoder a sequence encoding. Padding masks (B, S) / (B, T) bool, True for
    real tokens.

    Raises: TypeError/ValueError naming the argument (``EncoderDecoderConfig``), for
    ``cross_rotation`` with an encoding that does more than rotate or with several decoder
    encodings, a decoder encoding of more than one position axis, encoder layers of different
    position axes, or an additive encoding in a list (``TinyTransformer``'s rules).
    """

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pe: Stack | tuple[Stack, Stack],
        d_model: int = 64,
        n_encoder_layers: int = 2,
        n_decoder_layers: int = 2,
        n_heads: int = 4,
        n_kv_heads: int | None = None,
        d_ff: int | None = None,
        dropout: float = 0.0,
        max_len: int = 1024,
        share_embeddings: bool = False,
        cross_rotation: bool = False,
        pe_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        c = EncoderDecoderConfig(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            d_model=d_model,
            n_encoder_layers=n_encoder_layers,
            n_decoder_layers=n_decoder_layers,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            d_ff=d_ff,
            dropout=dropout,
            max_len=max_len,
            share_embeddings=share_embeddings,
            cross_rotation=cross_rotation,
        )
        self.config = c
        size = {"dim": c.d_model, "n_heads": c.n_heads, "max_len": c.max_len}
        if c.n_kv_heads is not None:  # (PaTH's transforms belong to key heads)
            size["n_kv_heads"] = c.n_kv_heads
        enc, dec = self.place_encodings(pe, pe_config, c, size=size)
        #: Each stack's layer encodings, and the entries each decoder layer's cache keeps
        #: (``cache_keep``); tuples: the modules are registered once, in the blocks.
        self.encoder_pes: tuple[PositionalEncoding, ...] = tuple(layer.pe for layer in enc)
        self.decoder_pes: tuple[PositionalEncoding, ...] = tuple(layer.pe for layer in dec)
        self.decoder_keeps = tuple(cache_keep(layer.window, layer.chunk) for layer in dec)
        self.src_tok = nn.Embedding(c.src_vocab_size, d_model)
        self.tgt_tok = self.src_tok if share_embeddings else nn.Embedding(tgt_vocab_size, d_model)
        d_ff = c.d_ff or 4 * d_model

        def attention(layer: BuiltLayer[PositionalEncoding], causal: bool) -> Attention:
            return Attention(  # embedded: ``encode``/``decode`` add each stack's pe.embed
                d_model,
                n_heads,
                pe=layer.pe,
                causal=causal,
                embedded=True,
                n_kv_heads=n_kv_heads,
                dropout=dropout,
                window=layer.window,
                chunk=layer.chunk,
            )

        self.encoder = nn.ModuleList(Block(attention(layer, False), d_ff, dropout) for layer in enc)
        self.encoder_norm = nn.LayerNorm(d_model)

        def cross_attention(pe: PositionalEncoding) -> CrossAttention:
            return CrossAttention(
                d_model, n_heads, pe=pe, embedded=True, n_kv_heads=n_kv_heads, dropout=dropout
            )

        self.decoder = nn.ModuleList(
            DecoderBlock(attention(layer, True), cross_attention(self.cross_pe), d_ff, dropout)
            for layer in dec
        )
        self.decoder_norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, tgt_vocab_size, bias=False)
        encodings = {id(p): p for p in (*self.encoder_pes, *self.decoder_pes)}
        init_weights(self, *encodings.values())

    def place_encodings(
        self,
        pe: Stack | tuple[Stack, Stack],
        pe_config: dict[str, Any] | None,
        c: EncoderDecoderConfig,
        *,
        size: dict[str, int],
    ) -> tuple[list[BuiltLayer[PositionalEncoding]], list[BuiltLayer[PositionalEncoding]]]:
        """Each stack's layers from ``pe`` (``posenc._models.stack_layers``, built for
        ``size``): ``encoder_pe`` and ``decoder_pe`` are their first layers' (the token
        embeddings'), every encoding checked to read the position axes its stack takes (an
        encoder's layers all read the same axes), and ``cross_pe``: ``NoPE()``, or with
        ``cross_rotation`` the decoder's one encoding (checked to only rotate).

        Raises: ValueError for encoder layers of different position axes, or
        ``cross_rotation`` with several decoder encodings; TypeError/ValueError as
        ``stack_layers``."""
        n_layers = (c.n_encoder_layers, c.n_decoder_layers)
        enc, dec = stack_layers(
            pe,
            pe_config,
            n_layers=n_layers,
            hooks=TORCH_TRAITS,
            size=size,
            base=PositionalEncoding,
            kind="PositionalEncoding",
            build=build_encoding,
            parameters=encoding_parameters,
        )
        self.encoder_pe: PositionalEncoding = enc[0].pe
        self.decoder_pe: PositionalEncoding = dec[0].pe

        def named(p: PositionalEncoding) -> tuple[int, str]:
            return p.capabilities.axes, p.name or type(p).__name__

        if len({layer.pe.capabilities.axes for layer in enc}) > 1:
            raise ValueError(
                "the encoder's layers must read the same position axes (one src_pos), got "
                + ", ".join(f"{name!r} ({axes})" for axes, name in map(named, (x.pe for x in enc)))
            )
        for layer in dec:
            c.check_axes(named(self.encoder_pe), named(layer.pe))
        decoders = {id(layer.pe): layer.pe for layer in dec}
        if c.cross_rotation and len(decoders) > 1:
            raise ValueError(
                "cross_rotation rotates cross-attention with the decoder's encoding; this "
                f"decoder has {len(decoders)} (give cross_rotation one decoder encoding)"
            )
        c.check_cross_rotation(self.decoder_pe.capabilities, named(self.decoder_pe)[1])
        self.cross_pe: PositionalEncoding = self.decoder_pe if c.cross_rotation else NoPE()
        return enc, dec

    def stack_pes(self, blocks: nn.ModuleList) -> tuple[PositionalEncoding, ...]:
        """Each layer's encoding of the ``encoder`` or ``decoder`` (kept here: wrapped blocks
        need not expose ``attn``)."""
        return self.encoder_pes if blocks is self.encoder else self.decoder_pes

    def encode(
        self, src: Tensor, src_pos: Tensor | None = None, *, src_padding_mask: Tensor | None = None
    ) -> Tensor:
        """Encoder states (B, S, C) of source tokens ``src`` (B, S) at ``src_pos`` (S,) or
        (B, S) (default 0..S-1).

        Raises: TypeError/ValueError for tokens that are not (B, S) ids of the source
        vocabulary, or bad positions or mask."""
        self.check_tokens(src, "src")
        B, S = src.shape
        contexts: dict[int, PositionState] = {}  # once per distinct encoding, for its layers

        def context(pe: PositionalEncoding) -> PositionState:
            if id(pe) not in contexts:
                contexts[id(pe)] = new_context(
                    pe, src_pos, B, S, None, src.device, dtype=self.src_tok.weight.dtype
                )
            return contexts[id(pe)]

        ctx = context(self.encoder_pe)
        x: Tensor = self.encoder_pe.embed(self.src_tok(src), ctx.q_pos, ctx=ctx)  # (B, S, C)
        for block, pe in zip(self.encoder, self.encoder_pes, strict=True):
            x = block(x, context(pe), None, padding_mask=src_padding_mask)
        out: Tensor = self.encoder_norm(x)
        return out

    def memory(
        self, src: Tensor, src_pos: Tensor | None = None, *, src_padding_mask: Tensor | None = None
    ) -> list[Memory]:
        """The source encoded once (``encode``) and projected to every decoder layer's
        cross-attention keys and values (``CrossAttention.project_memory``): what ``decode``
        reads at every step."""
        states = self.encode(src, src_pos, src_padding_mask=src_padding_mask)  # (B, S, C)
        pos = default_positions(src.shape[1], device=src.device) if src_pos is None else src_pos
        axes = self.encoder_pe.capabilities.axes
        blocks = [cast(DecoderBlock, b) for b in self.decoder]  # (nn.ModuleList is untyped)
        return [
            b.cross_attn.project_memory(states, pos, src_padding_mask, axes=axes) for b in blocks
        ]

    def decode(
        self,
        tgt: Tensor,
        memory: Sequence[Memory],
        tgt_pos: Tensor | None = None,
        *,
        padding_mask: Tensor | None = None,
        cache: Sequence[KeyValueCache] | None = None,
    ) -> Tensor:
        """Logits (B, T, V) of target tokens ``tgt`` (B, T) at ``tgt_pos`` (T,) or (B, T)
        (default: after the cache's entries) over ``memory`` (``memory(src)``); ``cache`` the
        decoder's self-attention caches (``new_cache``).

        Raises: TypeError/ValueError for tokens that are not (B, T) ids of the target
        vocabulary, a memory or cache of another length than the decoder, or bad positions or
        mask."""
        self.check_tokens(tgt, "tgt")
        n = len(self.decoder)
        check_layers(memory, n, "memory", " decoder layers (EncoderDecoder.memory)")
        check_layers(cache, n, "cache", " decoder layers")
        B, T = tgt.shape
        caches: Sequence[KeyValueCache | None] = cache or [None] * n
        contexts: dict[tuple[int | str, int | None], PositionState] = {}

        def context(pe: PositionalEncoding, layer_cache: KeyValueCache | None) -> PositionState:
            # as ``TinyTransformer.features``: once per encoding and cache layout
            owner: int | str = "data" if pe.capabilities.attention_form else id(pe)
            key = (owner, None if layer_cache is None else layer_cache.keep)
            if key not in contexts:
                contexts[key] = new_context(
                    pe, tgt_pos, B, T, layer_cache, tgt.device, dtype=self.tgt_tok.weight.dtype
                )
            return contexts[key]

        ctx = context(self.decoder_pe, caches[0])
        cross_ctx = self.cross_pe.prepare(  # once, every layer
            ctx.q_pos, memory[0].keys.pos, dtype=self.tgt_tok.weight.dtype
        )
        x: Tensor = self.decoder_pe.embed(self.tgt_tok(tgt), ctx.q_pos, ctx=ctx)  # (B, T, C)
        layers = zip(self.decoder, self.decoder_pes, memory, caches, strict=True)
        for block, pe, mem, layer_cache in layers:
            ctx = context(pe, layer_cache)
            x = block(x, ctx, layer_cache, mem, cross_ctx, padding_mask=padding_mask)
        logits: Tensor = self.head(self.decoder_norm(x))  # (B, T, V)
        return logits

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_pos: Tensor | None = None,
        tgt_pos: Tensor | None = None,
        *,
        src_padding_mask: Tensor | None = None,
        tgt_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Logits (B, T, V) of target tokens ``tgt`` (B, T) given source tokens ``src`` (B, S)."""
        memory = self.memory(src, src_pos, src_padding_mask=src_padding_mask)
        return self.decode(tgt, memory, tgt_pos, padding_mask=tgt_padding_mask)

    def new_cache(self) -> list[KVCache]:
        """One empty KV cache per decoder layer (its self-attention), for incremental decoding;
        a local layer's (sliding window W or chunk C) keeps only the W - 1 (C - 1) latest
        entries (``KVCache(keep=...)``)."""
        return [KVCache(keep=keep) for keep in self.decoder_keeps]

    def check_tokens(self, idx: Tensor, what: str) -> None:
        """Check ``idx`` (B, T) token ids of ``what`` ("src" or "tgt") against its vocabulary.

        Raises: TypeError/ValueError unless ``idx`` is a (B, T) integer tensor, T >= 1, with ids
        in 0..vocab_size-1 of that side's table."""
        check_token_ids(idx, what)  # (B, T) integer, T >= 1
        table = self.src_tok if what == "src" else self.tgt_tok
        check_token_range(idx, table.num_embeddings, what)

    def loss(
        self, src: Tensor, tgt: Tensor, targets: Tensor, **kwargs: Unpack[ForwardOptions]
    ) -> Tensor:
        """Mean cross-entropy of next-token ``targets`` (B, T) of decoder inputs ``tgt``
        (B, T); -100 entries are ignored."""
        logits = self(src, tgt, **kwargs)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    @torch.no_grad()
    def generate(
        self,
        src: Tensor,
        max_new_tokens: int,
        *,
        start_token: int,
        src_padding_mask: Tensor | None = None,
        **options: Unpack[DecodeOptions],
    ) -> Tensor:
        """Up to ``max_new_tokens`` target tokens (B, N) for source tokens ``src`` (B, S): the
        source encoded once (its cross-attention keys and values too), the decoder started
        from ``start_token`` at position 0 and run through its KV cache. ``src_padding_mask``
        (B, S) bool, True for real tokens: source positions count real tokens only
        (``positions_from_padding``), so left and right padding encode alike. The other
        options as ``TinyTransformer.generate``'s (greedy by default; ``end_token`` stops a
        row, later entries ``pad_token``; ``generator`` for the draws; ``progress``).

        Raises: TypeError/ValueError for a source that is not integer (B, S), a bad mask, a
        start token outside the target vocabulary, or bad options.
        """
        decoding = Decoding(max_new_tokens=max_new_tokens, **options)
        check_positive_int(start_token, "start_token", minimum=0)
        if start_token >= self.config.tgt_vocab_size:
            raise ValueError(
                f"start_token must be < tgt_vocab_size {self.config.tgt_vocab_size}, got "
                f"{start_token}"
            )
        check_token_ids(src, "src")
        B, S = src.shape
        src_pos = None
        if src_padding_mask is not None:
            check_mask_tensor(src_padding_mask, "src_padding_mask", "bool", (B, S))
            src_pos = positions_from_padding(src_padding_mask)
        memory = self.memory(src, src_pos, src_padding_mask=src_padding_mask)
        cache = self.new_cache()
        start = torch.full((B, 1), start_token, dtype=torch.long, device=src.device)
        first = self.decode(start, memory, cache=cache)[:, -1]  # (B, V)

        def step(tokens: Tensor, positions: Tensor) -> Tensor:
            return self.decode(tokens, memory, positions, cache=cache)[:, -1]  # (B, V)

        return decoding.run(first, step, torch.ones(B, dtype=torch.long, device=src.device))
