"""The control flow of one attention call, written once for torch's ``posenc.attention.Attention``
and Flax's ``posenc.flax.Attention`` (as ``flows`` is for the encodings' hooks and
``posenc._models`` for the models): inputs checked, the forward's position context, the
projection, the encoding's rotation, the KV cache, the mask of allowed keys, then the
framework's softmax attention and the output projection.

A framework's self-attention class inherits ``AttentionFlow`` first, its cross-attention class
``CrossAttentionFlow`` (torch's are the siblings ``Attention`` and ``CrossAttention``; Flax's
one ``Attention`` inherits both), and each supplies what its flow calls:

- ``check_ndim(x, ndim, what, layout)``, ``check_positions(pos, what, axes)``: its array checks;
- ``new_context(pos, B, T, cache, x)``: ``pe.prepare`` of T new tokens at ``pos`` (checked;
  default after the cache's entries) and of every key's position with the cache;
  ``default_positions(T, x)``: 0..T-1;
- ``cache_offset(cache)``: entries cached so far (an int, or a traced scalar);
  ``key_count(cache, offset, T)``: the keys a call sees with its cache; ``streams(cache)``:
  whether keys are rotated at their positions inside the cache (raises for an encoding a
  streaming cache cannot take);
- ``_project(x)`` -> q (B, H, T, D), k, v (B, Hkv, T, D); cross-attention's
  ``project_queries(x)`` -> q and ``project_keys(memory)`` -> k, v (B, Hkv, S, D) (the query
  and the key/value rows of ``qkv``);
- ``batch_positions(pos, B, axes)``;
- ``plain(padding_mask, segment_ids, offset)``: True where the causal or bidirectional mask
  alone applies, so ``attend`` is given no mask (None);
- ``attend(q, keys, ctx, allowed, offset)`` -> (B, H, T, D); ``attend_weights(...)`` (same
  arguments) -> (B, H, T, D) and the softmax weights (B, H, T, L), by the explicit path;
- optionally ``rotate_new(q, k, pos, ctx)``: the rotation of the fresh projections (default:
  ``pe.rotate``; torch's rotates them in place in inference);
- ``cache_type``, the framework's KV cache.

An encoding that computes attention from the data (``capabilities.attention_form``: FoX,
stick-breaking, PaTH) gets the call whole after the cache (``attend_form``): no rotation, mask
or softmax here; its cache keeps the terms it returns (torch's ``KVCache.terms``).

Shapes: x (B, T, C); q (B, H, T, D); keys (B, Hkv, L, D) (L = cached + new); masks (B, 1, T, L).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from torch import Tensor

from .._validate import (
    check_context,
    check_cross,
    check_cross_context,
    check_mask_tensor,
    check_memory,
    check_positions_match,
    check_real_floating,
)
from ..encodings.base import AttentionInputs
from ..encodings.flows import AbsoluteFlow, RandomizedFlow
from ..functional import masks
from ..functional._xp import astype, at_least_float32, device_of, fill_outside, namespace
from ..functional.masks import allowed_keys, local_keys


class CachedKeys(NamedTuple):
    """Everything attention needs about the L keys seen so far (torch tensors or JAX arrays)."""

    k: Any  # (B, Hkv, L, D), as the encoding left them (rotated for rotary encodings)
    v: Any  # (B, Hkv, L, Dv)
    pos: Any  # (B, L) integer, the position each key was encoded at ((B, L, A): A axes)
    valid: Any  # (B, L) bool, False for padding (and a Flax cache's unwritten slots)
    segment: Any  # (B, L) integer (the widest), packed-sequence id


#: The time axis of each ``CachedKeys`` field.
TIME_AXIS: tuple[int, ...] = (2, 2, 1, 1, 1)


class Memory(NamedTuple):
    """An encoder output as one cross-attention layer reads it.

    An encoder output as one cross-attention layer reads it (``project_memory``): its keys
    and values (B, Hkv, S, D) computed once, with the source positions and validity, and the
    source padding mask (B, S) or None (no padding: nothing to mask)."""

    keys: CachedKeys
    padding_mask: Any


class AttentionFlow:
    """``forward``: self-attention with an optional KV cache; see the module docstring for the
    hooks."""

    d_model: int
    head_dim: int
    causal: bool
    window: int | None
    chunk: int | None
    pe: Any
    proj: Any
    cache_type: type[Any]
    check_ndim: Any
    new_context: Any
    cache_offset: Any
    key_count: Any
    streams: Any
    _project: Any
    batch_positions: Any
    plain: Any
    attend: Any
    attend_weights: Any

    def forward(
        self,
        x: Any,
        pos: Any = None,
        *,
        padding_mask: Any = None,
        segment_ids: Any = None,
        cache: Any = None,
        ctx: Any = None,
        return_weights: bool = False,
    ) -> Any:
        """x (B, T, C) at positions ``pos`` (T,) or (B, T) (default: cache length + 0..T-1), or
        (T, A) or (B, T, A) for an encoding of A position axes (given: grids have no default),
        or those of ``ctx``, the forward's position context (its q_pos this call's positions,
        its k_pos the cached keys' then these). ``padding_mask`` (B, T) bool, True for real
        tokens; ``segment_ids`` (B, T) integer, tokens attend within their segment (default
        one, or after cached entries each row's latest). Returns (B, T, C).

        ``return_weights=True`` returns (y (B, T, C), weights (B, H, T, L)): the softmax
        weights of every query over the L keys it sees (cached ones first), 0 where masked,
        before dropout. They come from the explicit path (``explicit_weights``: the whole
        (B, H, T, L) scores at once, no fused kernel, no query blocks), so it is slower and
        takes O(B·H·T·L) memory; y equals the default call's output up to rounding."""
        self.check_ndim(x, 3, "x", "(B, T, C)")
        check_real_floating(x, "x")  # token ids go through an embedding first
        B, T, C = x.shape
        if self.d_model != C:
            raise ValueError(f"x must have C = d_model = {self.d_model} features, got {C}")
        if cache is not None and not isinstance(cache, self.cache_type):
            raise TypeError(f"cache must be a KVCache (one layer's), got {type(cache).__name__}")
        if return_weights and computes_attention(self.pe):
            raise ValueError(
                f"encoding {self.pe.name!r} computes attention itself, blockwise: it has no "
                "softmax weights to return"
            )
        offset = self.cache_offset(cache)
        if ctx is None:
            ctx = self.new_context(pos, B, T, cache, x)
        else:
            check_context(ctx, pos, T, self.key_count(cache, offset, T))
        pos = ctx.q_pos
        q, k, v = self._project(x)  # (B, H, T, D), (B, Hkv, T, D) x2
        # unrotated keys in the cache, all rotated at their current positions: dynamic
        # frequencies, or a streaming cache's positions (they move as entries are evicted)
        rerotate = cache is not None and (self.streams(cache) or self.pe.kv_policy == "rerotate")
        if not rerotate:
            q, k = self.rotate_new(q, k, pos, ctx)
        valid, segment = mask_inputs(B, T, x, padding_mask, segment_ids, cache)
        new = CachedKeys(k, v, self.batch_positions(pos, B, ctx.axes), valid, segment)
        keys = new if cache is None else cache.append(new)
        if computes_attention(self.pe):  # the encoding's own causal attention (FoX, PaTH, ...)
            out = self.attend_form(x, q, keys, ctx, cache)  # (B, H, T, D)
            return self.proj(out.swapaxes(1, 2).reshape(B, T, C))
        if rerotate:  # the cache holds unrotated keys: rotate all with the current frequencies
            q, k_all = self.pe.rotate(q, keys.k, pos, ctx.k_pos, ctx=ctx)  # (B, Hkv, L, D)
            keys = keys._replace(k=k_all)
        allowed = None  # nothing masked beyond the causal or bidirectional mask
        local = None  # a sliding window or chunk: the keys near each query, by position
        if self.window is not None or self.chunk is not None:
            local = local_keys(new.pos, keys.pos, window=self.window, chunk=self.chunk)
        if local is not None or not self.plain(padding_mask, segment_ids, offset):
            allowed = allowed_keys(
                keys.valid,
                new.segment,
                keys.segment,
                causal=self.causal,
                offset=offset,
                local=local,
            )  # (B, 1, T, L)
        if return_weights:
            out, weights = self.attend_weights(q, keys, ctx, allowed, offset)  # (B,H,T,D|L)
            return self.proj(out.swapaxes(1, 2).reshape(B, T, C)), weights
        out = self.attend(q, keys, ctx, allowed, offset)  # (B, H, T, D)
        return self.proj(out.swapaxes(1, 2).reshape(B, T, C))  # (B, T, C)

    def attend_form(self, x: Any, q: Any, keys: CachedKeys, ctx: Any, cache: Any) -> Any:
        """``pe.attention_form`` of this call: x (B, T, C), q (B, H, T, D) and every key
        (``keys``, cached first), padding put in a segment of its own below every other
        (so no real query sees it), the cache's terms of its keys as ``past``; the terms it
        returns go back into the cache. Returns (B, H, T, D)."""
        if q.shape[2] == 0:  # no new token: nothing to attend, nothing to cache
            return q
        xp = namespace(keys.segment)
        apart = xp.min(keys.segment) - 1  # a segment id no real key has
        segment_ids = xp.where(keys.valid, keys.segment, apart)  # (B, L)
        past = None if cache is None else cache.terms
        inputs = AttentionInputs(
            x,
            q,
            keys.k,
            keys.v,
            ctx.q_pos,
            ctx.k_pos,
            keys.valid,
            segment_ids,
            past,
            1.0 / math.sqrt(self.head_dim),
        )
        out, terms = self.pe.attention_form(inputs)
        if cache is not None:
            cache.terms = terms  # (B, L, E)
        return out

    def rotate_new(self, q: Any, k: Any, pos: Any, ctx: Any) -> tuple[Any, Any]:
        """The encoding's rotation of this call's own projections q (B, H, T, D) and k
        (B, Hkv, T, D) at ``pos``: nothing else holds them, so a framework may overwrite them
        (torch's ``Attention``, in inference)."""
        return self.pe.rotate(q, k, pos, pos, ctx=ctx)


class CrossAttentionFlow:
    """``project_memory`` and ``cross``: cross-attention over an encoder's output; see the
    module docstring for the hooks."""

    d_model: int
    causal: bool
    pe: Any
    proj: Any
    check_ndim: Any
    check_positions: Any
    default_positions: Any
    project_queries: Any
    project_keys: Any
    batch_positions: Any
    plain: Any
    attend: Any

    def project_memory(
        self, memory: Any, pos: Any, padding_mask: Any = None, *, axes: int = 1
    ) -> Any:
        """Cross-attention keys and values of an encoder output ``memory`` (B, S, C), projected
        once per source by the key/value rows of ``qkv`` (the query rows project the decoder's
        states in ``cross``), at source positions ``pos`` (S,) | (B, S) (an encoder of
        ``axes`` A > 1 position axes: (S, A) | (B, S, A)); ``padding_mask`` (B, S) bool, True
        for real tokens. Keys are kept unrotated: ``cross`` rotates them (only when its
        encoding rotates) together with the queries."""
        pos = check_memory(
            memory,
            pos,
            self.d_model,
            axes=axes,
            ndim=self.check_ndim,
            positions=self.check_positions,
        )
        B, S, _ = memory.shape
        k, v = self.project_keys(memory)  # (B, Hkv, S, D) x2
        valid, segment = mask_inputs(B, S, memory, padding_mask, None)
        keys = CachedKeys(k, v, self.batch_positions(pos, B, axes), valid, segment)
        return Memory(keys, padding_mask)

    def cross(self, x: Any, memory: Any, pos: Any = None, *, ctx: Any = None) -> Any:
        """Cross-attention of decoder states x (B, T, C) over an encoder's ``memory``: queries
        projected by the query rows of ``qkv``, keys and values those of ``memory``; no
        causal mask, padded source tokens masked. The encoding's hooks see the queries at their
        positions ``pos`` (T,) | (B, T) (default 0..T-1) and the keys at their source positions
        (the context's q_pos and k_pos; ``ctx`` = ``pe.prepare(pos, memory positions)``, made
        here when not given): an ``EncoderDecoder`` gives its cross-attention NoPE, or its
        decoder's rotation when asked (``cross_rotation``). Returns (B, T, C)."""
        check_cross(x, memory, Memory, self.d_model, self.causal, ndim=self.check_ndim)
        B, T, C = x.shape
        keys = memory.keys
        if ctx is None:
            pos = self.default_positions(T, x) if pos is None else pos
            pos = self.check_positions(pos, "pos")
            check_positions_match(pos, B, T, "pos")
            ctx = self.pe.prepare(pos, keys.pos)
        else:
            check_cross_context(ctx, pos, T, keys.pos)
        q = self.project_queries(x)  # (B, H, T, D)
        q, k = self.pe.rotate(q, keys.k, ctx.q_pos, ctx.k_pos, ctx=ctx)  # (B, H|Hkv, T|S, D)
        allowed = None
        if memory.padding_mask is not None or not self.plain(None, None, 0):
            xp = namespace(keys.segment)
            q_segment = xp.zeros((B, T), dtype=keys.segment.dtype, device=device_of(x))
            allowed = allowed_keys(keys.valid, q_segment, keys.segment, causal=False)  # (B,1,T,S)
        out = self.attend(q, keys._replace(k=k), ctx, allowed, 0)  # (B, H, T, D)
        return self.proj(out.swapaxes(1, 2).reshape(B, T, C))  # (B, T, C)


def mask_inputs(
    B: int, T: int, like: Any, padding_mask: Any, segment_ids: Any, cache: Any = None
) -> tuple[Any, Any]:
    """``functional.masks.mask_inputs`` of the masks given, checked (``padding_mask`` (B, T)
    bool, ``segment_ids`` (B, T) integer: torch tensors where ``like`` is one, else any array,
    taken into ``like``'s namespace), or the defaults, on ``like``'s device, after the entries
    of ``cache`` (None: nothing cached): validity (B, T) bool and segment ids (B, T) int64 (the
    widest int)."""
    xp, arrays = namespace(like), not isinstance(like, Tensor)
    if padding_mask is not None:
        check_mask_tensor(padding_mask, "padding_mask", "bool", (B, T), arrays=arrays)
    if segment_ids is not None:
        check_mask_tensor(segment_ids, "segment_ids", "integer", (B, T), arrays=arrays)
    if arrays:  # NumPy masks for JAX inputs
        padding_mask, segment_ids = (
            None if m is None else xp.asarray(m) for m in (padding_mask, segment_ids)
        )
    last = None if cache is None else cache.last_segment()  # (B, 1) or None
    return masks.mask_inputs(B, T, padding_mask, segment_ids, last, xp=xp, device=device_of(like))


def explicit_weights(
    pe: Any,
    q: Any,
    k: Any,
    v: Any,
    allowed: Any,
    ctx: Any,
    positions: tuple[Any, Any],
    *,
    head_dim: int,
    softmax: Callable[[Any], Any],
    dropout: Callable[[Any], Any],
) -> tuple[Any, Any]:
    """softmax(q kᵀ / √D + bias, masked, then the relative terms) v + relative values: the
    encoding ``pe``'s hooks at ``positions`` (q_pos, k_pos) in the order of
    ``posenc.encodings.base``, with the softmax weights.

    Shapes: q (B, H, T, D); k, v (B, H, L, D) (key heads repeated); ``allowed`` bool,
    broadcastable to (B, H, T, L), or None (nothing masked) -> output (B, H, T, D) and weights
    (B, H, T, L) (before ``dropout``, which the output's weights go through). ``softmax`` runs
    over the last axis of float32 (or wider) scores; the weights return to q's dtype. D =
    ``head_dim``, not q's width (PoPE doubles it).
    """
    q_pos, k_pos = positions
    scores = (q / math.sqrt(head_dim)) @ k.swapaxes(-2, -1)  # (B, H, T, L)
    bias = pe.bias(q_pos, k_pos, ctx=ctx)  # (B|1, H|1, T, L) or None
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = fill_outside(scores, allowed, -math.inf)
    scores = pe.relative_logits(scores, q, k, q_pos, k_pos, ctx=ctx)
    work = at_least_float32(scores)  # float64 stays float64
    weights = astype(softmax(astype(scores, work)), q.dtype)
    probs = dropout(weights)
    out = probs @ v  # (B, H, T, D)
    extra = pe.relative_values(probs, q_pos, k_pos, ctx=ctx)
    return (out if extra is None else out + extra), weights


def adds_to_embeddings(pe: Any) -> bool:
    """True for an encoding whose ``embed`` adds to token embeddings: an additive table
    (``AbsoluteFlow``: sinusoidal, learned, their grid forms), randomized positions around one,
    or a torch encoding declaring ``capabilities.embeds`` (its own ``embed``)."""
    from ..encodings.randomized import Randomized  # (torch's, no flow mixin)

    if isinstance(pe, RandomizedFlow | Randomized):
        return adds_to_embeddings(pe.base)
    if isinstance(pe, AbsoluteFlow):
        return True
    return bool(getattr(getattr(pe, "capabilities", None), "embeds", False))


def computes_attention(pe: Any) -> bool:
    """True for an encoding that computes the whole attention from the data
    (``capabilities.attention_form``: FoX, stick-breaking, PaTH)."""
    return bool(getattr(getattr(pe, "capabilities", None), "attention_form", False))


def check_attention_form(
    pe: Any, *, causal: bool, window: Any, chunk: Any, sink_logits: bool, dropout: float
) -> None:
    """Refuse a layer an encoding computing its own attention (``computes_attention``) cannot
    be: its forms are causal self-attention over every key, with no mask of positions, no
    extra softmax logit and no dropout on weights it never materialises.

    Raises: ValueError naming the encoding and the option."""
    if not computes_attention(pe):
        return
    problem = (
        "a bidirectional layer (causal=False): its forms are causal"
        if not causal
        else "a sliding window or chunk: it attends to every key of its segment"
        if window is not None or chunk is not None
        else "learned sink logits: it has no softmax to add them to"
        if sink_logits
        else f"attention dropout ({dropout}): it never materialises the weights"
        if dropout
        else ""
    )
    if problem:
        raise ValueError(
            f"encoding {pe.name!r} computes attention itself; it cannot take {problem}"
        )


def check_embedded(pe: Any, embedded: Any) -> None:
    """Refuse to build an attention layer around an additive encoding unless the caller says
    its input already holds the embedding (``embedded=True``): the layer calls rotate, bias and
    the relative terms, never ``embed``, which belongs on the token embeddings before the first
    layer; built without it, the encoding would do nothing, silently.

    Raises: TypeError for an ``embedded`` that is not a bool; ValueError for an additive
    encoding with ``embedded=False``.
    """
    if not isinstance(embedded, bool):
        raise TypeError(f"embedded must be a bool, got {type(embedded).__name__}")
    if adds_to_embeddings(pe) and not embedded:
        raise ValueError(
            f"encoding {pe.name!r} is additive: an additive encoding is applied to token "
            "embeddings, not inside attention: call pe.embed(x, pos) on the layer's input and "
            "build the layer with embedded=True, or use TinyTransformer (which does both)"
        )
