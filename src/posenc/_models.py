"""The control flow of posenc's models, written once for the torch modules
(``posenc.models``) and their Flax twins (``posenc.flax``).

A framework's class inherits the flow first (``class TinyTransformer(TransformerFlow,
nn.Module)``), builds the layers (``tok``, ``blocks``, ``norm``, ``head``; ``src_tok``, ...)
and supplies the hooks: ``check_tokens(idx, what)``, ``new_context(pe, pos, B, T, cache,
like)`` (``pe.prepare`` of T new tokens, checked once per forward), ``default_positions(S,
like)`` and ``pe_axes(pe)``. Flax modules call ``forward`` from ``__call__``.
Shapes: tokens (B, T), hidden states (B, T, C), logits (B, T, V).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

from ._forms import encoder_form
from ._schedule import BuiltLayer, LayerSchedule, cache_keep, named_config, named_key
from ._validate import check_head_split

#: build(name, dim=, n_heads=, max_len=, **config) -> an encoding sized for the model.
Build = Callable[..., Any]
#: The constructor arguments of the encoding registered under a name.
Parameters = Callable[[str], Collection[str]]


def sized_config(
    accepted: Collection[str],
    config: dict[str, Any],
    *,
    dim: int,
    n_heads: int,
    max_len: int,
    n_kv_heads: int | None = None,
) -> dict[str, Any]:
    """``config`` with the model's sizes (dim, n_heads, head_dim = dim // n_heads, max_len,
    and n_kv_heads when given) where the encoding ``accepted`` them (``config``'s own keys
    win): what ``build_for_model`` passes, in torch and Flax.

    Raises: ValueError for n_heads < 1 or a ``dim`` that n_heads does not divide.
    """
    check_head_split(dim, n_heads)
    sizes = {"dim": dim, "n_heads": n_heads, "head_dim": dim // n_heads, "max_len": max_len}
    if n_kv_heads is not None:
        sizes["n_kv_heads"] = n_kv_heads
    return {k: v for k, v in sizes.items() if k in accepted} | config


def model_encoding(
    pe: Any,
    pe_config: dict[str, Any] | None,
    *,
    size: dict[str, int],
    encoder: bool,
    build: Build,
    parameters: Parameters,
) -> Any:
    """``pe`` as given, or by name built for the model's ``size`` (dim, n_heads, max_len) with
    ``pe_config``, in its encoder form for an ``encoder`` (``posenc._forms.encoder_form``).

    Raises: ValueError for ``pe_config`` with a built encoding, or holding a key of ``size``
    (the model passes those from its own arguments).
    """
    if not isinstance(pe, str):
        if pe_config:
            raise ValueError("pe_config applies only when pe is given by name")
        return pe
    config = pe_config or {}
    twice = sorted(set(config) & set(size))
    if twice:
        raise ValueError(
            f"pe_config must not set {', '.join(map(repr, twice))}: the model passes "
            f"{', '.join(f'{k}={size[k]}' for k in twice)} from its own arguments (give "
            "max_len, d_model or n_heads to the model instead)"
        )
    return build(pe, **size, **(encoder_form(parameters(pe), config) if encoder else config))


class EncodingTraits(Protocol):
    """What ``layer_encodings`` and ``stack_layers`` read of a framework's encoding: its
    position axes and its ``Capabilities`` (torch's models pass ``posenc.models.transformer.
    TORCH_TRAITS``; ``ModelHooks`` has both)."""

    def pe_axes(self, pe: Any) -> int: ...

    def pe_capabilities(self, pe: Any) -> Any: ...


#: A model's ``window`` or ``chunk`` argument: one for every layer, or a pattern.
Limits = int | Sequence[int | None] | None


def schedule_of(pe: Any, window: Limits, chunk: Limits) -> tuple[LayerSchedule[Any], bool]:
    """(the schedule, whether ``pe`` was a per-layer list) of a model's ``pe``, ``window`` and
    ``chunk`` arguments: a ``LayerSchedule`` as given (then window and chunk must be None), a
    list or tuple of encodings a pattern, anything else one encoding for every layer.

    Raises: ValueError for window or chunk with a ``LayerSchedule``."""
    if isinstance(pe, LayerSchedule):
        if window is not None or chunk is not None:
            raise ValueError(
                "a LayerSchedule carries its own window and chunk; give them to it, not the model"
            )
        return pe, True
    windows = tuple(window) if isinstance(window, Sequence) else (window,)
    chunks = tuple(chunk) if isinstance(chunk, Sequence) else (chunk,)
    listed = isinstance(pe, list | tuple)
    return LayerSchedule(tuple(pe) if listed else (pe,), windows, chunks), listed


def layer_encodings(
    schedule: LayerSchedule[Any],
    n_layers: int,
    pe_config: dict[str, Any] | None,
    *,
    listed: bool,
    hooks: EncodingTraits,
    size: dict[str, int],
    encoder: bool,
    build: Build,
    parameters: Parameters,
) -> list[BuiltLayer[Any]]:
    """Each layer's (built encoding, window, chunk): a name or (name, config) built once per
    distinct entry (``pe_config`` under each entry's own config; ``model_encoding``), a built
    encoding shared by the layers that list it. An encoding computing attention from the data
    (``capabilities.attention_form``: FoX, PaTH, stick-breaking) is built once per layer by
    name: its projections read that layer's input.

    An encoding added to the token embeddings (``capabilities.embeds``) acts once, before the
    first layer, so a per-layer list refuses it: give it as the model's one ``pe``. A sliding
    window or chunk reads positions of one axis.

    Raises: ValueError for an additive encoding in a list (``listed``), a local layer whose
    encoding reads A > 1 position axes, or ``pe_config`` with a built encoding.
    """
    built: dict[Any, Any] = {}
    layers = []
    for entry, window, chunk in schedule.layers(n_layers):
        if isinstance(entry, str | tuple):
            key = named_key(entry)
            # one per layer where the encoding projects its layer's input (FoX's gates)
            if key not in built or hooks.pe_capabilities(built[key]).attention_form:
                name, own = named_config(entry)
                config = (pe_config or {}) | own
                built[key] = model_encoding(
                    name,
                    config or None,
                    size=size,
                    encoder=encoder,
                    build=build,
                    parameters=parameters,
                )
            pe = built[key]
        else:
            pe = model_encoding(
                entry,
                None if listed else pe_config,
                size=size,
                encoder=encoder,
                build=build,
                parameters=parameters,
            )
        name = getattr(pe, "name", None) or type(pe).__name__
        if listed and hooks.pe_capabilities(pe).embeds:
            raise ValueError(
                f"encoding {name!r} adds positions to the token embeddings, once before the "
                "first layer: it has no per-layer form; give it as the model's one pe"
            )
        if cache_keep(window, chunk) is not None and hooks.pe_axes(pe) != 1:
            raise ValueError(
                f"a sliding window or chunk reads positions of one axis; encoding {name!r} "
                f"reads {hooks.pe_axes(pe)}"
            )
        layers.append(BuiltLayer(pe, window, chunk))
    return layers


def stack_layers(
    pe: Any,
    pe_config: dict[str, Any] | None,
    *,
    n_layers: tuple[int, int],
    hooks: EncodingTraits,
    size: dict[str, int],
    base: type,
    kind: str,
    build: Build,
    parameters: Parameters,
) -> tuple[list[BuiltLayer[Any]], list[BuiltLayer[Any]]]:
    """(encoder's, decoder's) layers (``layer_encodings``) of an encoder-decoder's ``pe``:
    one entry for both stacks, or a pair (encoder's, decoder's); an entry is a registered name
    (built per stack, the encoder's in its encoder form), a ``base`` encoding (shared as it
    is), a list of encodings per layer (a pattern) or a ``LayerSchedule`` (with its sliding
    windows and chunks). ``n_layers``: (encoder's, decoder's) depth; ``kind`` names ``base``
    in the error.

    Raises: TypeError for anything else; ValueError as ``layer_encodings``.
    """
    what = (
        f"pe must be a registered name, a {kind}, a list or LayerSchedule of them, or a pair "
        "(encoder's, decoder's) of those"
    )
    if isinstance(pe, tuple) and len(pe) != 2:
        raise TypeError(f"{what}; a tuple is the pair, got one of {len(pe)}")
    pair = pe if isinstance(pe, tuple) else (pe, pe)
    for entry in pair:
        entries = entry.pe if isinstance(entry, LayerSchedule) else entry
        each = entries if isinstance(entries, list | tuple) else [entries]
        if (
            isinstance(entry, tuple)  # a stack's pattern is a list ((name, config) inside it)
            or not each
            or not all(isinstance(e, str | tuple | base) for e in each)
        ):
            raise TypeError(f"{what}, got {type(entry).__name__} for a stack")
    stacks = []
    for entry, n, encoder in zip(pair, n_layers, (True, False), strict=True):
        schedule, listed = schedule_of(entry, None, None)
        stacks.append(
            layer_encodings(
                schedule,
                n,
                pe_config,
                listed=listed,
                hooks=hooks,
                size=size,
                encoder=encoder,
                build=build,
                parameters=parameters,
            )
        )
    return stacks[0], stacks[1]


def check_layers(given: Sequence[Any] | None, n: int, what: str, note: str = "") -> None:
    """Raise ValueError unless ``given`` (None: nothing) holds one entry per layer."""
    if given is not None and len(given) != n:
        raise ValueError(f"{what} must hold {n}{note}, got {len(given)}")


class BlockFlow:
    """Pre-norm block (GPT-2 style): x + attn(norm1(x)), then x + mlp(norm2(x))."""

    norm1: Any
    attn: Any
    norm2: Any
    mlp: Any
    drop: Any

    def forward(self, x: Any, ctx: Any, cache: Any, **masks: Any) -> Any:
        x = x + self.drop(self.attn(self.norm1(x), cache=cache, ctx=ctx, **masks))
        return x + self.drop(self.mlp(self.norm2(x)))


class DecoderBlockFlow(BlockFlow):
    """Pre-norm decoder block: x + attn(norm1(x)) (causal self-attention), then
    x + cross_attn(norm_cross(x), memory), then x + mlp(norm2(x))."""

    norm_cross: Any
    cross_attn: Any

    def forward(  # type: ignore[override]
        self,
        x: Any,
        ctx: Any,
        cache: Any,
        memory: Any,
        cross_ctx: Any,
        padding_mask: Any = None,
    ) -> Any:
        x = x + self.drop(self.attn(self.norm1(x), cache=cache, ctx=ctx, padding_mask=padding_mask))
        x = x + self.drop(self.cross_attn.cross(self.norm_cross(x), memory, ctx=cross_ctx))
        return x + self.drop(self.mlp(self.norm2(x)))


class ModelHooks:
    """What each framework supplies (see the module docstring)."""

    def check_tokens(self, idx: Any, what: str) -> None:
        raise NotImplementedError

    def new_context(self, pe: Any, pos: Any, B: int, T: int, cache: Any, like: Any) -> Any:
        raise NotImplementedError

    def default_positions(self, S: int, like: Any) -> Any:
        raise NotImplementedError

    def pe_axes(self, pe: Any) -> int:
        raise NotImplementedError

    def pe_capabilities(self, pe: Any) -> Any:
        raise NotImplementedError

    def cache_layout(self, cache: Any) -> Any:
        """What, besides the encoding, makes a layer's position context its own: caches of one
        layout hold the same keys (default: every cache holds every key)."""
        return None


class TransformerFlow(ModelHooks):
    """TinyTransformer: tokens -> ``pe.embed`` -> blocks -> norm -> head; ``pe`` is the first
    layer's encoding (each block's attention holds its own)."""

    pe: Any
    tok: Any
    blocks: Any
    norm: Any
    head: Any

    def features(
        self,
        idx: Any,
        pos: Any = None,
        *,
        padding_mask: Any = None,
        segment_ids: Any = None,
        cache: Sequence[Any] | None = None,
    ) -> Any:
        """Hidden states (B, T, C) for tokens idx (B, T) at positions pos (T,) or (B, T)
        (default: after the cache's entries); the position context is built once
        (``pe.prepare``) for every layer of one encoding (and cache layout: a local layer's
        cache keeps fewer keys)."""
        self.check_tokens(idx, "idx")
        check_layers(cache, len(self.blocks), "cache", " layers")
        B, T = idx.shape
        caches: Sequence[Any] = cache or [None] * len(self.blocks)
        contexts: dict[tuple[int | str, Any], Any] = {}

        def context(pe: Any, layer_cache: Any) -> Any:
            # encodings computing attention from the data (built one per layer) prepare
            # nothing of their own (the base ``prepare``): their layers share one context
            owner = "data" if self.pe_capabilities(pe).attention_form else id(pe)
            key = (owner, self.cache_layout(layer_cache))
            if key not in contexts:  # once, for every layer that shares the encoding
                contexts[key] = self.new_context(pe, pos, B, T, layer_cache, idx)
            return contexts[key]

        pes = self.encodings()
        ctx = context(pes[0], caches[0])
        x = self.pe.embed(self.tok(idx), ctx.q_pos, ctx=ctx)  # (B, T, C)
        for block, pe, layer_cache in zip(self.blocks, pes, caches, strict=True):
            ctx = context(pe, layer_cache)
            x = block(x, ctx, layer_cache, padding_mask=padding_mask, segment_ids=segment_ids)
        return self.norm(x)

    def encodings(self) -> Sequence[Any]:
        """Each layer's encoding (one object for the layers that share it): by default each
        block's attention's."""
        return [block.attn.pe for block in self.blocks]

    def forward(self, idx: Any, pos: Any = None, **kwargs: Any) -> Any:
        """Logits (B, T, V); keywords as ``features``."""
        return self.head(self.features(idx, pos, **kwargs))


class EncoderDecoderFlow(ModelHooks):
    """EncoderDecoder: source tokens -> encoder -> memory; target tokens -> decoder (causal
    self-attention, cross-attention over the memory) -> logits."""

    encoder_pe: Any
    decoder_pe: Any
    cross_pe: Any
    src_tok: Any
    tgt_tok: Any
    encoder: Any
    encoder_norm: Any
    decoder: Any
    decoder_norm: Any
    head: Any

    def place_encodings(
        self, pe: Any, pe_config: dict[str, Any] | None, c: Any, *, nope: Any, **stacks: Any
    ) -> tuple[list[BuiltLayer[Any]], list[BuiltLayer[Any]]]:
        """Each stack's layers from ``pe`` (``stack_layers``, keywords ``stacks``), returned
        for the framework to build its blocks from: ``encoder_pe`` and ``decoder_pe`` are
        their first layers' (the token embeddings'), every encoding checked to read the
        position axes its stack takes (``c``: the ``EncoderDecoderConfig``; an encoder's
        layers all read the same axes), and ``cross_pe``: ``nope()``, or with
        ``cross_rotation`` the decoder's one encoding (checked to only rotate).

        Raises: ValueError for encoder layers of different position axes, or
        ``cross_rotation`` with several decoder encodings."""
        n_layers = (c.n_encoder_layers, c.n_decoder_layers)
        enc, dec = stack_layers(pe, pe_config, n_layers=n_layers, hooks=self, **stacks)
        self.encoder_pe, self.decoder_pe = enc[0].pe, dec[0].pe

        def named(p: Any) -> tuple[int, str]:
            return self.pe_axes(p), p.name or type(p).__name__

        if len({self.pe_axes(layer.pe) for layer in enc}) > 1:
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
        c.check_cross_rotation(self.pe_capabilities(self.decoder_pe), named(self.decoder_pe)[1])
        self.cross_pe = self.decoder_pe if c.cross_rotation else nope()
        return enc, dec

    def stack_pes(self, blocks: Any) -> Sequence[Any]:
        """Each block's self-attention encoding (one object for the layers that share it)."""
        return [block.attn.pe for block in blocks]

    def encode(self, src: Any, src_pos: Any = None, *, src_padding_mask: Any = None) -> Any:
        """Encoder states (B, S, C) of source tokens ``src`` (B, S) at ``src_pos`` (S,) or
        (B, S) (default 0..S-1)."""
        self.check_tokens(src, "src")
        B, S = src.shape
        contexts: dict[int, Any] = {}  # once per distinct encoding, for its layers

        def context(pe: Any) -> Any:
            if id(pe) not in contexts:
                contexts[id(pe)] = self.new_context(pe, src_pos, B, S, None, src)
            return contexts[id(pe)]

        ctx = context(self.encoder_pe)
        x = self.encoder_pe.embed(self.src_tok(src), ctx.q_pos, ctx=ctx)  # (B, S, C)
        for block, pe in zip(self.encoder, self.stack_pes(self.encoder), strict=True):
            x = block(x, context(pe), None, padding_mask=src_padding_mask)
        return self.encoder_norm(x)

    def memory(self, src: Any, src_pos: Any = None, *, src_padding_mask: Any = None) -> list[Any]:
        """The source encoded once (``encode``) and projected to every decoder layer's
        cross-attention keys and values (``CrossAttention.project_memory``): what ``decode`` reads
        at every step."""
        states = self.encode(src, src_pos, src_padding_mask=src_padding_mask)  # (B, S, C)
        pos = self.default_positions(src.shape[1], src) if src_pos is None else src_pos
        axes = self.pe_axes(self.encoder_pe)
        return [
            b.cross_attn.project_memory(states, pos, src_padding_mask, axes=axes)
            for b in self.decoder
        ]

    def decode(
        self,
        tgt: Any,
        memory: Sequence[Any],
        tgt_pos: Any = None,
        *,
        padding_mask: Any = None,
        cache: Sequence[Any] | None = None,
    ) -> Any:
        """Logits (B, T, V) of target tokens ``tgt`` (B, T) at ``tgt_pos`` (T,) or (B, T)
        (default: after the cache's entries) over ``memory`` (``memory(src)``); ``cache`` the
        decoder's self-attention caches (``new_cache``)."""
        self.check_tokens(tgt, "tgt")
        n = len(self.decoder)
        check_layers(memory, n, "memory", " decoder layers (EncoderDecoder.memory)")
        check_layers(cache, n, "cache", " decoder layers")
        B, T = tgt.shape
        caches: Sequence[Any] = cache or [None] * n
        contexts: dict[tuple[int | str, Any], Any] = {}

        def context(pe: Any, layer_cache: Any) -> Any:  # as ``TransformerFlow.features``
            owner = "data" if self.pe_capabilities(pe).attention_form else id(pe)
            key = (owner, self.cache_layout(layer_cache))
            if key not in contexts:
                contexts[key] = self.new_context(pe, tgt_pos, B, T, layer_cache, tgt)
            return contexts[key]

        ctx = context(self.decoder_pe, caches[0])
        cross_ctx = self.cross_pe.prepare(ctx.q_pos, memory[0].keys.pos)  # once, every layer
        x = self.decoder_pe.embed(self.tgt_tok(tgt), ctx.q_pos, ctx=ctx)  # (B, T, C)
        layers = zip(self.decoder, self.stack_pes(self.decoder), memory, caches, strict=True)
        for block, pe, mem, layer_cache in layers:
            ctx = context(pe, layer_cache)
            x = block(x, ctx, layer_cache, mem, cross_ctx, padding_mask=padding_mask)
        return self.head(self.decoder_norm(x))  # (B, T, V)

    def forward(
        self,
        src: Any,
        tgt: Any,
        src_pos: Any = None,
        tgt_pos: Any = None,
        *,
        src_padding_mask: Any = None,
        tgt_padding_mask: Any = None,
    ) -> Any:
        """Logits (B, T, V) of target tokens ``tgt`` (B, T) given source tokens ``src`` (B, S)."""
        memory = self.memory(src, src_pos, src_padding_mask=src_padding_mask)
        return self.decode(tgt, memory, tgt_pos, padding_mask=tgt_padding_mask)
