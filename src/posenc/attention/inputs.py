"""What one attention forward is handed, checked once where it enters: the forward's position
state (``new_context``) and whether a streaming cache can take the encoding
(``check_streamable``); the keys' validity and segments: ``masking.mask_inputs``."""

from __future__ import annotations

import torch
from torch import Tensor

from .._validate import (
    check_positions,
    check_positions_given,
    check_positions_match,
)
from ..encodings.base import PositionalEncoding, batch_positions, default_positions
from ..encodings.state import PositionState
from .cache import KeyValueCache


def new_context(
    pe: PositionalEncoding,
    pos: Tensor | None,
    B: int,
    T: int,
    cache: KeyValueCache | None,
    device: torch.device,
    *,
    dtype: torch.dtype = torch.float32,
) -> PositionState:
    """``pe.prepare`` for T new tokens at ``pos`` (T,) | (B, T) (default: after the cache's
    entries), or (T, A) | (B, T, A) for an encoding of A position axes (given: grids have no
    default), validated to int64 once, and every key: the cached ones, then these (none but
    these without a cache). ``dtype``: the activations' (the state's tables follow it); the
    offsets' bounds go with default positions, known without reading a value."""
    axes = pe.capabilities.axes
    check_positions_given(pos, axes, pe.name)
    if pos is not None and cache is not None and cache.streams:
        raise ValueError(
            "a KVCache(window=...) assigns positions inside the cache; call without pos"
        )
    start = 0 if cache is None else cache.position_start
    # default positions after keys at 0..start-1: offsets are known without reading a value
    # (a streaming cache re-assigns its keys' positions: not known here)
    streams = cache is not None and cache.streams
    known = pos is None and not streams and (cache is None or start == 0 or cache.consecutive)
    if cache is not None:
        cache.consecutive = known
    if pos is None:
        pos = default_positions(T, offset=start, device=device)
    pos = check_positions(pos, "pos", axes)  # int64 once: every hook sees this one tensor
    check_positions_match(pos, B, T, "pos", axes)
    k_pos = None if cache is None else cache.key_positions(batch_positions(pos, B, axes))
    # q in start..start+T-1, keys in 0..start+T-1
    bounds = (1 - T, start + T - 1) if known and T else None
    return pe.prepare(pos, k_pos, dtype=dtype, offset_bounds=bounds)


def check_keep(cache: KeyValueCache, window: int | None, chunk: int | None) -> None:
    """Raise unless a ``KVCache(keep=N)`` holds every key its layer can still see: N >= W - 1
    for a sliding window of W, N >= C - 1 for a chunk of C (the fewer), every key for a layer
    that sees them all.

    Raises: ValueError naming the cache's N and what the layer needs."""
    if cache.keep is None:
        return
    needs = [n - 1 for n in (window, chunk) if n is not None]
    if not needs or cache.keep < min(needs):
        need = f"keep >= {min(needs)}" if needs else "every key (keep=None)"
        raise ValueError(
            f"a KVCache(keep={cache.keep}) forgets keys this layer (window={window}, "
            f"chunk={chunk}) still sees; it needs {need}"
        )


def check_streamable(pe: PositionalEncoding) -> None:
    """Raise unless ``pe``'s positions can be re-assigned inside a streaming cache: rotary
    encodings (keys re-rotated at their cache positions) and score biases of positions (ALiBi,
    T5, Kerple, FIRE) can; positions added to token embeddings are baked into the cached
    keys, and relative logit/value terms are not supported.

    Raises: ValueError naming the encoding and what it does that streaming cannot re-assign.
    """
    caps = pe.capabilities
    problem = (
        f"reads {caps.axes} position axes; a stream's positions are 1-D"
        if caps.axes > 1
        else "adds positions to the token embeddings, where a cache cannot re-assign them"
        if caps.embeds
        else "rewrites logits or values with relative terms, which streaming does not support"
        if caps.relative_terms
        else "computes attention from the data of every key since the first, which a stream evicts"
        if caps.attention_form
        else ""
    )
    if problem:
        raise ValueError(
            f"KVCache(window=...) re-assigns positions inside the cache; encoding {pe.name!r} "
            f"{problem}. Streaming supports rotary encodings and position score biases"
        )
