"""TinyTransformer: a small pre-norm encoder or decoder with an injected positional encoding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict, Unpack

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._models import Limits, check_layers, layer_encodings, schedule_of
from .._schedule import LayerSchedule, Named, cache_keep
from .._validate import check_mask_tensor, check_ndim, check_token_range
from ..attention.attention import Attention
from ..attention.cache import KeyValueCache
from ..attention.inputs import new_context
from ..attention.positions import positions_from_padding
from ..encodings.base import PositionalEncoding
from ..encodings.capabilities import Capabilities
from ..encodings.state import PositionState
from .config import TransformerConfig
from .generate import DecodeOptions, Decoding, check_token_ids
from .kv_cache import KVCache


def feed_forward(d_model: int, d_ff: int) -> nn.Sequential:
    """The blocks' MLP: Linear(C, d_ff) -> GELU -> Linear(d_ff, C)."""
    return nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))


class ForwardOptions(TypedDict, total=False):
    """The keywords of ``TinyTransformer.forward`` past the tokens (``loss`` passes them on)."""

    pos: Tensor | None
    padding_mask: Tensor | None
    segment_ids: Tensor | None
    cache: Sequence[KeyValueCache] | None


class TorchTraits:
    """What ``posenc._models``' layer builders read of a torch encoding
    (``_models.EncodingTraits``)."""

    def pe_axes(self, pe: PositionalEncoding) -> int:
        """The position axes ``pe`` reads (1; 2 or 3 for grids)."""
        return pe.capabilities.axes

    def pe_capabilities(self, pe: PositionalEncoding) -> Capabilities:
        """What ``pe`` does (``Capabilities``)."""
        return pe.capabilities


#: The traits object the torch models hand ``posenc._models``.
TORCH_TRAITS = TorchTraits()


def build_encoding(name: str, **config: Any) -> PositionalEncoding:
    """The encoding registered as ``name``, built for a model (``registry.build_for_model``:
    ``config`` holds the model's sizes and the encoding's keys)."""
    from ..registry import build_for_model

    return build_for_model(name, **config)


def encoding_parameters(name: str) -> tuple[str, ...]:
    """The constructor arguments of the encoding registered as ``name``."""
    from ..registry import info

    return tuple(info(name).parameters)


def check_token_tensor(idx: Tensor, what: str) -> None:
    """Raise unless ``idx`` is an integer (B, T) tensor of token ids.

    Raises: TypeError for another type or dtype, ValueError for another rank."""
    check_ndim(idx, 2, what, "(B, T)")
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise TypeError(f"{what} must be an integer tensor of token ids, got {idx.dtype}")


class Block(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)) (GPT-2 style)."""

    def __init__(self, attn: Attention, d_ff: int, dropout: float) -> None:
        super().__init__()
        d = attn.d_model
        self.norm1, self.attn = nn.LayerNorm(d), attn
        self.norm2 = nn.LayerNorm(d)
        self.mlp = feed_forward(d, d_ff)
        self.drop = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        ctx: PositionState,
        cache: KeyValueCache | None,
        *,
        padding_mask: Tensor | None = None,
        segment_ids: Tensor | None = None,
    ) -> Tensor:
        """x (B, T, C) -> (B, T, C): its attention at the forward's context ``ctx``, with
        this layer's ``cache`` (or None) and the masks (``Attention.forward``)."""
        h = self.attn(
            self.norm1(x), cache=cache, ctx=ctx, padding_mask=padding_mask, segment_ids=segment_ids
        )  # (B, T, C)
        x = x + self.drop(h)
        out: Tensor = x + self.drop(self.mlp(self.norm2(x)))
        return out


class TinyTransformer(nn.Module):
    """A small transformer (a decoder, or an encoder) with posenc's encodings in its layers.

    Token embedding -> encoding.embed -> n_layers blocks -> final norm -> vocabulary logits
    (``features``, ``forward``).

    ``pe`` is a built encoding, or a registered name built for this model's size with
    ``pe_config`` extra keys. The one encoding instance is shared by every layer (its cos/sin
    are computed once per forward). ``causal=True`` is a decoder, ``False`` an encoder, whose
    encoding by name takes its encoder form unless ``pe_config`` sets it (``bidirectional``:
    ALiBi's -m|i - j|, T5's bidirectional buckets, FIRE's ψ(max(L, i, j)) normaliser;
    ``posenc._forms.ENCODER_FORM``).

    Per-layer schedules: ``pe`` a list of encodings (built, names, or (name, config)), a
    pattern repeated to ``n_layers`` (``["rope", "rope", "rope", "nope"]``: NoPE every fourth
    layer), or a ``LayerSchedule`` (presets ``irope``, ``rnope_swa``, ``smollm3``, ``gemma2``,
    ``gemma3``: ``posenc._schedule``); ``window`` a sliding window W per layer (each query
    sees the keys less than W positions away) and ``chunk`` a chunk C per layer (Llama 4's
    chunked attention), each an int, None, or a pattern of them (``[None, 512]``). Each
    distinct encoding is built once and its position context made once per forward;
    ``new_cache`` gives a local layer a cache of only the keys it can still see. An encoding
    added to the token embeddings (sinusoidal, learned) acts once, before the first layer,
    so a list refuses it (give it as the one ``pe``); ``pe_config`` applies to each name
    under that entry's own config.
    NaN and inf are not checked for (no ``check_finite``: a host read per forward): they pass
    through as IEEE arithmetic carries them. One in a token's embedding makes every logit of
    its row NaN, earlier positions too (attention's P·V multiplies a masked key's value row by
    0, and 0·NaN is NaN); other rows of the batch are untouched.
    Raises: TypeError/ValueError naming the argument for a size that is not a positive int
    (``d_ff`` None means 4·d_model) or a d_model not divisible by n_heads; ValueError for an
    additive encoding in a list, a window or chunk that is not a positive int, one with an
    encoding of A > 1 position axes, or a ``pe_config`` key the model sets itself (dim,
    n_heads, max_len); at forward, ValueError for a token id outside 0..vocab_size-1.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        pe: PositionalEncoding
        | str
        | Sequence[PositionalEncoding | Named]
        | LayerSchedule[PositionalEncoding],
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        n_kv_heads: int | None = None,
        d_ff: int | None = None,
        causal: bool = True,
        dropout: float = 0.0,
        max_len: int = 1024,
        pe_config: dict[str, Any] | None = None,
        window: Limits = None,
        chunk: Limits = None,
    ) -> None:
        super().__init__()
        TransformerConfig(  # the checks
            vocab_size=vocab_size,
            d_model=d_model,
            n_layers=n_layers,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            d_ff=d_ff,
            causal=causal,
            dropout=dropout,
            max_len=max_len,
        )
        size = {"dim": d_model, "n_heads": n_heads, "max_len": max_len}
        if n_kv_heads is not None:  # (PaTH's transforms belong to key heads)
            size["n_kv_heads"] = n_kv_heads
        schedule, listed = schedule_of(pe, window, chunk)
        layers = layer_encodings(
            schedule,
            n_layers,
            pe_config,
            listed=listed,
            hooks=TORCH_TRAITS,
            size=size,
            encoder=not causal,
            build=build_encoding,
            parameters=encoding_parameters,
        )
        self.pe: PositionalEncoding = layers[0].pe  # the embedding's (every layer's, unlisted)
        #: Each layer's encoding and the entries its cache keeps (``cache_keep``), kept here
        #: too: wrapped blocks (checkpointing) need not expose ``attn`` (a tuple: the modules
        #: are registered once, in the blocks).
        self.layer_pes: tuple[PositionalEncoding, ...] = tuple(layer.pe for layer in layers)
        self.layer_keeps = tuple(cache_keep(layer.window, layer.chunk) for layer in layers)
        self.causal = causal
        self.tok = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(
            Block(
                Attention(
                    d_model,
                    n_heads,
                    pe=layer.pe,
                    causal=causal,
                    embedded=True,  # ``features`` adds pe.embed to the token embeddings
                    n_kv_heads=n_kv_heads,
                    dropout=dropout,
                    window=layer.window,
                    chunk=layer.chunk,
                ),
                4 * d_model if d_ff is None else d_ff,
                dropout,
            )
            for layer in layers
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        init_weights(self, *{id(p): p for p in self.encodings()}.values())

    def encodings(self) -> tuple[PositionalEncoding, ...]:
        """Each layer's encoding (one object for the layers that share it): ``pe`` for every
        block unless the model was built with several (blocks may then be appended)."""
        if len({id(p) for p in self.layer_pes}) > 1:
            return self.layer_pes
        return (self.pe,) * len(self.blocks)

    def check_tokens(self, idx: Tensor, what: str) -> None:
        """Check ``idx`` (B, T) integer token ids in 0..vocab_size-1.

        Raises: TypeError/ValueError naming what ``idx`` is instead."""
        check_token_tensor(idx, what)
        check_token_range(idx, self.tok.num_embeddings, what)

    def new_context(
        self,
        pe: PositionalEncoding,
        pos: Tensor | None,
        B: int,
        T: int,
        cache: KeyValueCache | None,
        like: Tensor,
    ) -> PositionState:
        """``pe``'s position context of T new tokens at ``pos`` (default: after ``cache``'s
        entries) on ``like``'s device (``attention.inputs.new_context``)."""
        return new_context(pe, pos, B, T, cache, like.device, dtype=self.tok.weight.dtype)

    def features(
        self,
        idx: Tensor,
        pos: Tensor | None = None,
        *,
        padding_mask: Tensor | None = None,
        segment_ids: Tensor | None = None,
        cache: Sequence[KeyValueCache] | None = None,
    ) -> Tensor:
        """Hidden states (B, T, C) for tokens idx (B, T) at positions pos (T,) or (B, T)
        (default: after the cache's entries); the position context is built once
        (``pe.prepare``) for every layer of one encoding (and cache layout: a local layer's
        cache keeps fewer keys).

        Raises: TypeError/ValueError for tokens that are not (B, T) integer ids of the
        vocabulary, a cache of another length than the layers, or bad positions or masks."""
        self.check_tokens(idx, "idx")
        check_layers(cache, len(self.blocks), "cache", " layers")
        B, T = idx.shape
        caches: Sequence[KeyValueCache | None] = cache or [None] * len(self.blocks)
        contexts: dict[tuple[int | str, int | None], PositionState] = {}

        def context(pe: PositionalEncoding, layer_cache: KeyValueCache | None) -> PositionState:
            # encodings computing attention from the data (built one per layer) prepare
            # nothing of their own (the base ``prepare``): their layers share one context;
            # caches of one ``keep`` hold the same keys
            owner: int | str = "data" if pe.capabilities.attention_form else id(pe)
            key = (owner, None if layer_cache is None else layer_cache.keep)
            if key not in contexts:  # once, for every layer that shares the encoding
                contexts[key] = new_context(
                    pe, pos, B, T, layer_cache, idx.device, dtype=self.tok.weight.dtype
                )
            return contexts[key]

        pes = self.encodings()
        ctx = context(pes[0], caches[0])
        x: Tensor = self.pe.embed(self.tok(idx), ctx.q_pos, ctx=ctx)  # (B, T, C)
        for block, pe, layer_cache in zip(self.blocks, pes, caches, strict=True):
            ctx = context(pe, layer_cache)
            x = block(x, ctx, layer_cache, padding_mask=padding_mask, segment_ids=segment_ids)
        out: Tensor = self.norm(x)
        return out

    def forward(
        self,
        idx: Tensor,
        pos: Tensor | None = None,
        *,
        padding_mask: Tensor | None = None,
        segment_ids: Tensor | None = None,
        cache: Sequence[KeyValueCache] | None = None,
    ) -> Tensor:
        """Logits (B, T, V); keywords as ``features``."""
        h = self.features(
            idx, pos, padding_mask=padding_mask, segment_ids=segment_ids, cache=cache
        )  # (B, T, C)
        logits: Tensor = self.head(h)
        return logits

    def new_cache(self, *, window: int | None = None, sinks: int = 0) -> list[KVCache]:
        """One empty KV cache per layer, for incremental decoding; with ``window`` (and
        ``sinks``) a streaming cache (``KVCache``: attention sinks, StreamingLLM). A local
        layer's (sliding window W or chunk C) keeps only the W - 1 (C - 1) latest entries
        (``KVCache(keep=...)``), unless streaming."""
        if window is not None:
            return [KVCache(window=window, sinks=sinks) for _ in self.blocks]
        local = any(keep is not None for keep in self.layer_keeps)
        keeps = self.layer_keeps if local else (None,) * len(self.blocks)
        return [KVCache(sinks=sinks, keep=keep) for keep in keeps]

    def loss(self, idx: Tensor, targets: Tensor, **kwargs: Unpack[ForwardOptions]) -> Tensor:
        """Mean cross-entropy of next-token ``targets`` (B, T); -100 entries are ignored."""
        logits = self(idx, **kwargs)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    @torch.no_grad()
    def generate(
        self,
        prompt: Tensor,
        max_new_tokens: int,
        *,
        padding_mask: Tensor | None = None,
        **options: Unpack[DecodeOptions],
    ) -> Tensor:
        """Continue ``prompt`` (B, P) by up to ``max_new_tokens`` tokens (B, N) through the KV
        cache (the prompt itself is not returned). A decoder only (``causal=True``).

        ``padding_mask`` (B, P) bool, True for real tokens: a left-padded batch, each row's
        tokens at positions 0, 1, ... from its first real token (``positions_from_padding``),
        its new tokens after them. Choice of each token (``generate.Sampling``): greedy at
        ``temperature=0`` (the default), else a draw from softmax(logits / temperature)
        restricted to the ``top_k`` most probable tokens and the ``top_p`` nucleus, with
        ``generator`` (reproducible draws). A row that emits ``end_token`` stops: its later
        entries are ``pad_token``; generation ends when every row has (N < max_new_tokens).
        ``progress``: a rich bar on stderr (None: on a terminal, from 256 tokens on). The
        model's mode is kept: call ``eval()`` first unless dropout is wanted.

        Raises: TypeError/ValueError for a prompt that is not integer (B, P), a mask not
        (B, P) bool or not left-padded (each row's last token real), an encoder, or bad
        options (``generate.Decoding``).
        """
        if not self.causal:
            raise ValueError("generate needs a decoder (causal=True); this model is an encoder")
        decoding = Decoding(max_new_tokens=max_new_tokens, **options)
        check_token_ids(prompt, "prompt")
        B, P = prompt.shape
        pos, start = None, torch.full((B,), P, dtype=torch.long, device=prompt.device)
        if padding_mask is not None:
            check_mask_tensor(padding_mask, "padding_mask", "bool", (B, P))
            if not bool(padding_mask[:, -1].all()):
                raise ValueError(
                    "generate needs left padding: each row's last prompt token must be real "
                    "(padding_mask[:, -1] all True)"
                )
            pos, start = positions_from_padding(padding_mask), padding_mask.sum(-1)
        cache = self.new_cache()
        prefill = self.features(prompt, pos, padding_mask=padding_mask, cache=cache)  # (B, P, C)
        first = self.head(prefill[:, -1])  # (B, V): the last prompt token's logits only

        def step(tokens: Tensor, positions: Tensor) -> Tensor:
            return self(tokens, positions, cache=cache)[:, -1]  # (B, V)

        return decoding.run(first, step, start)


def init_weights(model: nn.Module, *encodings: PositionalEncoding) -> None:
    """GPT-2's N(0, 0.02²) for every Linear and Embedding of ``model`` outside ``encodings``
    (encodings initialise themselves), zero Linear biases."""
    owned_by_pe = {id(m) for pe in encodings for m in pe.modules()}
    for m in model.modules():
        if id(m) not in owned_by_pe:
            _init_weights(m)


def _init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear | nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)
