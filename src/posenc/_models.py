"""How posenc's models place their encodings, the same for the torch modules
(``posenc.models``) and their Flax twins (``posenc.flax``): plain functions, each model's
forward is its framework's own.

``sized_config``/``model_encoding`` build an encoding by name for a model's sizes;
``schedule_of``, ``layer_encodings`` and ``stack_layers`` turn a model's ``pe``, ``window``
and ``chunk`` arguments (one for every layer, a list or a pattern) into one encoding and
limits per layer, reading an encoding only through ``EncodingTraits``.
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
    TORCH_TRAITS``, Flax's ``posenc.flax.model.LayerQuestions``)."""

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
