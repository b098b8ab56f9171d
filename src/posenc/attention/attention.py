"""Multi-head attention that calls the positional-encoding hooks, with explicit positions."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._validate import check_bool, check_ndim
from ..encodings.base import PositionalEncoding, batch_positions
from ..encodings.state import PositionState as PositionContext
from . import projections
from .backends import Call, attend, attend_weights
from .cache import CacheCheck, KeyValueCache
from .config import AttentionConfig
from .flow import AttentionFlow, CachedKeys, Memory, check_attention_form
from .inputs import check_keep, check_streamable, new_context
from .projections import BIAS_BACKENDS, BiasBackend, check_layer, new_weights

__all__ = ["BIAS_BACKENDS", "Attention", "Memory"]


class Attention(AttentionFlow, nn.Module):
    """Multi-head self-attention with grouped-query heads and a pluggable positional encoding.

    scores = (rotate(q) · rotate(k)) / sqrt(D) + bias(q_pos, k_pos), then the encoding's relative
    terms; softmax over allowed keys; output projection. Runs through
    ``F.scaled_dot_product_attention`` (bias as ``attn_mask``) unless the encoding rewrites
    logits or values, where an explicit path is used. ``layer(x, pos, return_weights=True)``
    also returns the softmax weights (B, H, T, L), computed on the explicit path (slower:
    ``AttentionFlow.forward``). Cross-attention over an encoder's output is its sibling
    ``CrossAttention``.

    The layer never calls ``embed``: an additive encoding (sinusoidal, learned) belongs on the
    token embeddings before the first layer, ``x = pe.embed(tok(idx), pos)``. Built around one,
    the layer would change nothing, so it refuses unless told ``embedded=True`` (the models
    pass it: ``TinyTransformer`` embeds, then hands the same encoding to every layer).

    Args:
        d_model: model width C; must be divisible by ``n_heads``.
        n_heads: query heads H. ``n_kv_heads`` (default H) key/value heads, dividing H.
        pe: the encoding whose hooks are called (shared across layers if the caller wishes).
        embedded: the caller applies ``pe.embed`` to the input (required for an additive
            encoding, else ValueError; harmless for the others).
        causal: mask keys after the query (by order in the sequence/cache, not by position id).
        block_size: queries per block when the encoding has a ``bias``, so the (Tq, Tk) bias
            is never materialised whole; default: about 4M bias entries per block (16 MiB).
        bias_backend: how a score bias reaches SDPA (``backends``). "auto" (default): on CPU,
            offset-only biases (ALiBi, T5, Kerple) at consecutive positions as a zero-copy
            Toeplitz view (``toeplitz``), FIRE in inference by one fused kernel
            (``fire_fused``), anything else by query blocks. "blocks": always by query blocks.
            "flex": offset-only biases fused into compiled FlexAttention on GPUs (as "auto" on
            CPU, where PyTorch's compiled flex kernel is wrong on AVX2). The fused forms fall
            back to blocks for padding, segments or a cache offset (flex also for dropout);
            learned tables (T5, Kerple) keep their gradients through the Toeplitz view.
        window: a sliding window of W keys: each query sees the keys less than W positions
            away (a causal one: itself and the W - 1 before it), in the full forward and with
            a cache (``functional.masks.local_keys``; give the layer a ``KVCache(keep=W - 1)``
            to hold only those). ``chunk``: each query sees the keys of its chunk of C
            positions (Llama 4's chunked attention; ``KVCache(keep=C - 1)``). Both run on
            an explicit mask (no fused backend).
        sink_logits: one learned logit per head in the softmax's denominator, as gpt-oss
            (``posenc.functional.softmax_with_sinks``): ``self.sink_logits`` (H,), zeros at
            start; the scores then run on the explicit path. Not the streaming cache's sink
            tokens (``KVCache(sinks=...)``), which keep the first keys.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        pe: PositionalEncoding,
        causal: bool,
        embedded: bool = False,
        n_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = False,
        block_size: int | None = None,
        bias_backend: BiasBackend = "auto",
        sink_logits: bool = False,
        window: int | None = None,
        chunk: int | None = None,
    ) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        cfg = AttentionConfig(
            d_model=d_model,
            n_heads=n_heads,
            causal=causal,
            n_kv_heads=n_kv_heads,
            dropout=dropout,
            bias=bias,
            window=window,
            chunk=chunk,
        )
        check_layer(
            pe,
            n_heads,
            cfg.head_dim,
            embedded=embedded,
            block_size=block_size,
            bias_backend=bias_backend,
        )
        check_bool(sink_logits, "sink_logits")
        check_attention_form(
            pe, causal=causal, window=window, chunk=chunk, sink_logits=sink_logits, dropout=dropout
        )
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = cfg.head_dim
        self.causal, self.dropout = causal, dropout
        self.pe: PositionalEncoding = pe
        self.embedded = embedded
        self.window, self.chunk = cfg.window, cfg.chunk
        self.block_size = block_size  # query block for score-bias encodings (memory O(H·block·T))
        self.bias_backend = bias_backend
        self.qkv, self.proj = new_weights(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.sink_logits: nn.Parameter | None = (
            nn.Parameter(torch.zeros(n_heads)) if sink_logits else None
        )  # (H,)

    cache_type = CacheCheck  # a KeyValueCache (checked by its class's members)
    check_ndim = staticmethod(check_ndim)
    batch_positions = staticmethod(batch_positions)
    plain = staticmethod(projections.plain)

    def new_context(
        self, pos: Tensor | None, B: int, T: int, cache: KeyValueCache | None, x: Tensor
    ) -> PositionContext:
        """This call's position context (``attention.flow.new_context``): positions ``pos``
        (T,) | (B, T), or the next ones after ``cache``, for input ``x`` (B, T, C)."""
        return new_context(self.pe, pos, B, T, cache, x.device, dtype=x.dtype)

    def cache_offset(self, cache: KeyValueCache | None) -> int:
        """Keys before this call's: the entries ``cache`` holds (0 without one)."""
        return 0 if cache is None else len(cache)

    def key_count(self, cache: KeyValueCache | None, offset: int, T: int) -> int:
        """Keys this call attends to: the ``offset`` cached ones and its own ``T``."""
        return offset + T

    def streams(self, cache: KeyValueCache) -> bool:
        """Whether ``cache`` streams (sinks and a window: positions assigned in the cache).

        Raises: ValueError when the cache keeps fewer keys than this layer's window or chunk
        sees, or streams an encoding whose positions cannot be re-assigned."""
        check_keep(cache, self.window, self.chunk)
        if cache.streams:
            check_streamable(self.pe)
        return cache.streams

    def rotate_new(
        self, q: Tensor, k: Tensor, pos: Tensor, ctx: PositionContext
    ) -> tuple[Tensor, Tensor]:
        """The encoding's rotation of this call's projections q (B, H, T, D) and k
        (B, Hkv, T, D), views of the ``qkv`` output that nothing else holds: written into
        them (no new q and k: at (1, 32, 2048, 128) that is two 16-32 MiB tensors a layer) where
        nobody can tell, i.e. the encoding rotates by tables (``rotates_in_place``: its
        ``rotate`` takes ``inplace``; not xPos), autograd is off (``torch.no_grad``, inference mode:
        nothing records q, k or the tables), and torch.compile is not tracing. In place and
        out of place give the same bits (every RoPE kernel)."""
        pe = self.pe
        if (
            pe.rotates_in_place
            and not torch.is_grad_enabled()
            and not torch.compiler.is_compiling()
        ):
            rotated: tuple[Tensor, Tensor] = pe.rotate(  # type: ignore[call-arg]  # (rotates_in_place)
                q, k, pos, pos, ctx=ctx.new_keys(), inplace=True
            )
            return rotated
        fresh: tuple[Tensor, Tensor] = pe.rotate(q, k, pos, pos, ctx=ctx.new_keys())
        return fresh

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, T, _ = x.shape
        D, Hkv = self.head_dim, self.n_kv_heads
        q, k, v = self.qkv(x).split([self.d_model, Hkv * D, Hkv * D], dim=-1)
        q = q.view(B, T, self.n_heads, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        return q, k, v

    def attend(
        self,
        q: Tensor,
        keys: CachedKeys,
        ctx: PositionContext,
        allowed: Tensor | None,
        offset: int,
    ) -> Tensor:
        """Softmax attention through the first backend that applies (``backends``)."""
        return attend(self, Call(q, keys, ctx, allowed, offset))

    def attend_weights(
        self,
        q: Tensor,
        keys: CachedKeys,
        ctx: PositionContext,
        allowed: Tensor | None,
        offset: int,
    ) -> tuple[Tensor, Tensor]:
        """Softmax attention by the explicit path, with its weights (``backends``)."""
        return attend_weights(self, Call(q, keys, ctx, allowed, offset))
