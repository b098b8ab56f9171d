"""Multi-head attention that calls the positional-encoding hooks, with explicit positions."""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import (
    check_bool,
    check_encoding_heads,
    check_mask_tensor,
    check_ndim,
    check_positions,
    check_positions_match,
    check_positive_int,
)
from ..encodings.base import PositionalEncoding, batch_positions, default_positions
from ..encodings.bias import FIRE
from ..encodings.context import PositionContext
from .fire_fused import fire_fused_attention
from .flex import flex_bias_attention, flex_runs_on
from .kv_cache import CachedKeys, KVCache
from .toeplitz import toeplitz_bias_attention

#: Bias entries (H x block x Tk) per query block when ``block_size`` is not given: 16 MiB fp32.
BIAS_BLOCK_ENTRIES = 1 << 22
BIAS_BACKENDS = ("auto", "blocks", "flex")
#: Smallest (Tq x L) bias that "auto" reads through the Toeplitz view (lab-size models below).
TOEPLITZ_MIN_ENTRIES = 1 << 16


class Attention(nn.Module):
    """Multi-head self-attention with grouped-query heads and a pluggable positional encoding.

    scores = (rotate(q) · rotate(k)) / sqrt(D) + bias(q_pos, k_pos), then the encoding's relative
    terms; softmax over allowed keys; output projection. Runs through
    ``F.scaled_dot_product_attention`` (bias as ``attn_mask``) unless the encoding rewrites
    logits or values, where an explicit path is used.

    Args:
        d_model: model width C; must be divisible by ``n_heads``.
        n_heads: query heads H. ``n_kv_heads`` (default H) key/value heads, dividing H.
        pe: the encoding whose hooks are called (shared across layers if the caller wishes).
        causal: mask keys after the query (by order in the sequence/cache, not by position id).
        block_size: queries per block when the encoding has a ``bias``, so the (Tq, Tk) bias
            is never materialised whole; default: about 4M bias entries per block (16 MiB).
        bias_backend: how a score bias reaches SDPA. "auto" (default): on CPU, offset-only
            biases (ALiBi, T5, Kerple) at consecutive positions are a zero-copy Toeplitz view
            of a per-offset table (``toeplitz``); FIRE in inference runs one fused kernel
            (``fire_fused``); anything else goes by blocks. "blocks": the
            bias of one query block at a time. "flex": offset-only biases fused into compiled
            FlexAttention on GPUs (on CPU, where PyTorch's compiled flex kernel is wrong on
            AVX2 machines, "flex" runs as "auto"). The fused forms fall back to blocks when
            padding, segments or a cache offset are involved (flex also under dropout in
            training); learned tables (T5, Kerple) keep their gradients through the Toeplitz
            view and flex.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        pe: PositionalEncoding,
        causal: bool,
        n_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = False,
        block_size: int | None = None,
        bias_backend: Literal["auto", "blocks", "flex"] = "auto",
    ) -> None:
        super().__init__()
        check_positive_int(d_model, "d_model")
        check_positive_int(n_heads, "n_heads")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_positive_int(n_kv_heads, "n_kv_heads")
        if d_model % n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got {d_model} and {n_heads}")
        if n_heads % n_kv_heads:
            raise ValueError(
                f"n_heads must be divisible by n_kv_heads, got {n_heads}, {n_kv_heads}"
            )
        if not isinstance(pe, PositionalEncoding):
            raise TypeError(f"pe must be a PositionalEncoding, got {type(pe).__name__}")
        check_encoding_heads(pe, n_heads, d_model // n_heads)
        check_bool(causal, "causal")
        check_bool(bias, "bias")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        if block_size is not None:
            check_positive_int(block_size, "block_size")
        self.causal, self.dropout, self.pe = causal, dropout, pe
        self.block_size = block_size  # query block for score-bias encodings (memory O(H·block·T))
        if bias_backend not in BIAS_BACKENDS:
            raise ValueError(f"bias_backend must be one of {BIAS_BACKENDS}, got {bias_backend!r}")
        self.bias_backend = bias_backend
        kv_width = n_kv_heads * self.head_dim
        self.qkv = nn.Linear(d_model, d_model + 2 * kv_width, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: Tensor,
        pos: Tensor | None = None,
        *,
        padding_mask: Tensor | None = None,
        segment_ids: Tensor | None = None,
        cache: KVCache | None = None,
        ctx: PositionContext | None = None,
    ) -> Tensor:
        """x (B, T, C) at positions ``pos`` (T,) or (B, T) (default: cache length + 0..T-1).

        ``padding_mask`` (B, T) bool, True for real tokens; ``segment_ids`` (B, T) int, tokens
        attend only within their segment (packed sequences; default one segment, or after
        cached entries each row's latest: a decode step continues its document). ``ctx``: the
        forward's position context (``pe.prepare``, built by the model once for all layers:
        its q_pos are this call's positions, its k_pos the cached keys' then these); made here
        when not given. Returns (B, T, C).
        """
        check_ndim(x, 3, "x", "(B, T, C)")
        B, T, C = x.shape
        if self.d_model != C:
            raise ValueError(f"x must have C = d_model = {self.d_model} features, got {C}")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (one layer's), got {type(cache).__name__}")
        offset = 0 if cache is None else len(cache)
        ctx = self._context(x, pos, cache, ctx)
        pos = ctx.q_pos
        q, k, v = self._project(x)  # (B, H, T, D), (B, Hkv, T, D) x2
        rerotate = cache is not None and self.pe.kv_policy == "rerotate"
        if not rerotate:
            q, k = self.pe.rotate(q, k, pos, pos, ctx=ctx)
        new = CachedKeys(
            k, v, batch_positions(pos, B), *_mask_inputs(B, T, x, padding_mask, segment_ids, cache)
        )
        keys = new if cache is None else cache.append(new)
        k_pos = ctx.k_pos  # (T,) | (B, T) or (B, L): equal to keys.pos
        if rerotate:  # the cache holds unrotated keys: rotate all with the current frequencies
            q, k_all = self.pe.rotate(q, keys.k, pos, k_pos, ctx=ctx)  # k_all (B, Hkv, L, D)
            keys = keys._replace(k=k_all)
        allowed = self._allowed(
            new, keys, offset, plain=padding_mask is None and segment_ids is None
        )
        if self.pe.needs_explicit_attention:
            out = self._explicit_blocks(q, keys.k, keys.v, ctx, allowed, offset)
        else:
            out = self._sdpa_blocks(q, keys, ctx, allowed, offset)
        return self.proj(out.transpose(1, 2).reshape(B, T, C))  # (B, T, C)

    def _context(
        self, x: Tensor, pos: Tensor | None, cache: KVCache | None, ctx: PositionContext | None
    ) -> PositionContext:
        """The given context (its positions must fit x and the cache), or one for ``pos``."""
        B, T, _ = x.shape
        L = T + (0 if cache is None else len(cache))
        if ctx is None:
            offset = L - T
            pos = default_positions(T, offset=offset, device=x.device) if pos is None else pos
            pos = check_positions(pos, "pos")
            check_positions_match(pos, B, T, "pos")
            k_pos = pos if cache is None else cache.key_positions(batch_positions(pos, B))
            return self.pe.prepare(pos, k_pos)
        if pos is not None and pos is not ctx.q_pos:
            raise ValueError("pass positions either as pos or in ctx, not both")
        if ctx.q_pos.shape[-1] != T or ctx.k_pos.shape[-1] != L:
            raise ValueError(
                f"ctx holds {ctx.q_pos.shape[-1]} query and {ctx.k_pos.shape[-1]} key positions;"
                f" this call has {T} new tokens and {L} keys with its cache"
            )
        return ctx

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, T, _ = x.shape
        D, Hkv = self.head_dim, self.n_kv_heads
        q, k, v = self.qkv(x).split([self.d_model, Hkv * D, Hkv * D], dim=-1)
        q = q.view(B, T, self.n_heads, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        return q, k, v

    def _allowed(
        self, new: CachedKeys, keys: CachedKeys, offset: int, *, plain: bool
    ) -> Tensor | None:
        """Boolean (B, 1, T, L) mask of keys each query may see; None when nothing is masked
        beyond what ``is_causal`` expresses (no padding, no segments, no cache offset)."""
        T, L = new.pos.shape[1], keys.pos.shape[1]
        if plain and offset == 0:
            return None
        allowed = keys.valid[:, None, None, :] & (
            new.segment[:, None, :, None] == keys.segment[:, None, None, :]
        )  # (B, 1, T, L)
        if self.causal:
            q_idx = torch.arange(offset, offset + T, device=keys.pos.device)
            k_idx = torch.arange(L, device=keys.pos.device)
            allowed = allowed & (k_idx[None, :] <= q_idx[:, None])  # (T, L) by cache order
        # A query with no visible key (e.g. a padding query) attends everywhere instead of NaN.
        return allowed | ~allowed.any(dim=-1, keepdim=True)

    def _sdpa_blocks(
        self,
        q: Tensor,
        keys: CachedKeys,
        ctx: PositionContext,
        allowed: Tensor | None,
        offset: int,
    ) -> Tensor:
        """SDPA one query block at a time when the encoding has a bias: only one block's bias
        (B|1, H|1, block, L_b) exists at once, and a causal block reads only the keys up to its
        last query (L_b = offset + block end), so masked blocks cost nothing."""
        T, L = q.shape[2], keys.k.shape[2]
        q_pos, k_pos = ctx.q_pos, ctx.k_pos
        has_bias = type(self.pe).bias is not PositionalEncoding.bias
        if has_bias and allowed is None and self._fusable(q):
            out = flex_bias_attention(
                q, keys.k, keys.v, self.pe, q_pos, k_pos, causal=self.causal, checked=True
            )
            if out is not None:
                return out
        if has_bias and allowed is None and self._toeplitz(q, L):
            out = toeplitz_bias_attention(
                q,
                keys.k,
                keys.v,
                self.pe,
                q_pos,
                k_pos,
                causal=self.causal,
                scale=1.0 / math.sqrt(self.head_dim),
                dropout=self.dropout if self.training else 0.0,
                block=self.block_size,
                checked=True,
            )
            if out is not None:
                return out
        if has_bias and allowed is None and self._fused_fire(q):
            scale = 1.0 / math.sqrt(self.head_dim)
            out = fire_fused_attention(
                q, keys.k, keys.v, self.pe, q_pos, k_pos, causal=self.causal, scale=scale,
                checked=True,
            )
            if out is not None:
                return out
        blocks = self._query_blocks(T, L, offset)
        if not has_bias or len(blocks) == 1:
            return self._sdpa(q, keys.k, keys.v, self.pe.bias(q_pos, k_pos, ctx=ctx), allowed)
        outs = []
        for s, e, Lb in blocks:
            bias = self.pe.bias(q_pos[..., s:e], k_pos[..., :Lb], ctx=ctx)  # (B|1, H|1, e-s, Lb)
            blk_allowed = None if allowed is None else allowed[..., s:e, :Lb]
            k, v = keys.k[:, :, :Lb], keys.v[:, :, :Lb]
            outs.append(self._sdpa(q[:, :, s:e], k, v, bias, blk_allowed))
        return torch.cat(outs, dim=2)  # (B, H, T, D)

    def _query_blocks(self, T: int, L: int, offset: int) -> list[tuple[int, int, int]]:
        """(start, end, keys) of each query block: ``block_size`` queries (default: about
        ``BIAS_BLOCK_ENTRIES`` scores per block over all heads, at least 64); a causal block
        sees the keys up to its last query, offset + end (cache order)."""
        block = self.block_size or max(64, BIAS_BLOCK_ENTRIES // (self.n_heads * max(L, 1)))
        if block >= T:
            return [(0, T, L)]
        blocks = []
        for s in range(0, T, block):
            e = min(s + block, T)
            blocks.append((s, e, offset + e if self.causal else L))
        return blocks

    def _fusable(self, q: Tensor) -> bool:
        """Flex path: opted in, offset-only bias, no dropout (flex has none), not on CPU, where
        compiled flex is wrong on AVX2 (``flex``'s docstring): there "flex" runs as "auto"."""
        fusable = self.bias_backend == "flex" and self.pe.bias_is_relative
        fusable = fusable and flex_runs_on(q.device)
        return fusable and not (self.training and self.dropout > 0)

    def _toeplitz(self, q: Tensor, L: int) -> bool:
        """Toeplitz view: the default for offset-only biases on CPU (CPU SDPA reads the
        strided mask in place; GPU kernels would copy it) once the bias is worth sparing;
        below ``TOEPLITZ_MIN_ENTRIES`` one small dense bias is as fast."""
        auto = self.bias_backend in ("auto", "flex") and q.device.type == "cpu"
        auto = auto and not torch.compiler.is_compiling()  # positions are read on the host
        return auto and self.pe.bias_is_relative and q.shape[2] * L >= TOEPLITZ_MIN_ENTRIES

    def _fused_fire(self, q: Tensor) -> bool:
        """FIRE's fused CPU kernel: the default on CPU for inference (no dropout), eager only
        (under ``torch.compile`` the blocks path traces; the kernel reads positions on the host)."""
        auto = self.bias_backend == "auto" and q.device.type == "cpu"
        auto = auto and not torch.compiler.is_compiling()
        return auto and isinstance(self.pe, FIRE) and not (self.training and self.dropout > 0)

    def _sdpa(
        self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, allowed: Tensor | None
    ) -> Tensor:
        mask: Tensor | None = allowed
        is_causal = self.causal and allowed is None
        if bias is not None:
            bias = bias.to(q.dtype)
            if is_causal:
                T, L = q.shape[2], k.shape[2]
                allowed = torch.ones(T, L, dtype=torch.bool, device=q.device).tril(L - T)
            mask = bias if allowed is None else _masked(bias, allowed)
            is_causal = False
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal,
            enable_gqa=self.n_kv_heads != self.n_heads,
            scale=1.0 / math.sqrt(self.head_dim),  # not 1/sqrt(q's width): PoPE doubles it
        )

    def _explicit_blocks(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        ctx: PositionContext,
        allowed: Tensor | None,
        offset: int,
    ) -> Tensor:
        """Explicit attention (relative terms need the weights) one query block at a time, as
        ``_sdpa_blocks``: (B, H, block, L_b) scores at once, and a causal block stops at the
        keys its last query sees (L_b = offset + block end), which halves the work at T = L."""
        groups = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(groups, dim=1) if groups > 1 else k  # (B, H, L, D)
        v = v.repeat_interleave(groups, dim=1) if groups > 1 else v
        q_pos, k_pos = ctx.q_pos, ctx.k_pos
        blocks = self._query_blocks(q.shape[2], k.shape[2], offset)
        if len(blocks) == 1:
            return self._explicit(q, k, v, q_pos, k_pos, allowed, ctx)
        outs = []
        for s, e, Lb in blocks:  # work the blocks share is done once, through ctx
            blk_allowed = None if allowed is None else allowed[..., s:e, :Lb]
            qb, kb, vb = q[:, :, s:e], k[:, :, :Lb], v[:, :, :Lb]
            outs.append(
                self._explicit(qb, kb, vb, q_pos[..., s:e], k_pos[..., :Lb], blk_allowed, ctx)
            )
        return torch.cat(outs, dim=2)  # (B, H, T, D)

    def _explicit(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        allowed: Tensor | None,
        ctx: PositionContext,
    ) -> Tensor:
        """softmax(q kᵀ/√D + bias + relative terms) v (+ relative values) for one query block.
        Shapes: q (B, H, T, D); k, v (B, H, L, D) (heads already repeated) -> (B, H, T, D)."""
        bias = self.pe.bias(q_pos, k_pos, ctx=ctx)  # (B|1, H|1, T, L) or None
        scores = (q / math.sqrt(self.head_dim)) @ k.transpose(-2, -1)  # (B, H, T, L)
        if bias is not None:
            scores = scores + bias
        if allowed is None and self.causal:
            T, L = q.shape[2], k.shape[2]
            allowed = torch.ones(T, L, dtype=torch.bool, device=q.device).tril(L - T)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        scores = self.pe.relative_logits(scores, q, k, q_pos, k_pos, ctx=ctx)
        work = torch.promote_types(scores.dtype, torch.float32)  # float64 stays float64
        probs = torch.softmax(scores.to(work), dim=-1).to(q.dtype)
        probs = F.dropout(probs, self.dropout, self.training)
        out = probs @ v  # (B, H, T, D)
        extra = self.pe.relative_values(probs, q_pos, k_pos, ctx=ctx)
        return out if extra is None else out + extra


def _masked(bias: Tensor, allowed: Tensor) -> Tensor:
    """bias with -inf where not allowed; in place when the hook's fresh output can take it."""
    grad = bias.requires_grad and torch.is_grad_enabled()
    if grad or torch.broadcast_shapes(bias.shape, allowed.shape) != bias.shape:
        return bias.masked_fill(~allowed, float("-inf"))
    return bias.masked_fill_(~allowed, float("-inf"))


def _mask_inputs(
    B: int,
    T: int,
    x: Tensor,
    padding_mask: Tensor | None,
    segment_ids: Tensor | None,
    cache: KVCache | None = None,
) -> tuple[Tensor, Tensor]:
    """Validity (B, T) bool and segment ids (B, T) int64, defaults all-valid / one segment:
    segment 0, or after cached entries each row's latest segment (a decode step continues the
    document it follows, also after a packed prefill)."""
    if padding_mask is None:
        valid = torch.ones(B, T, dtype=torch.bool, device=x.device)
    else:
        check_mask_tensor(padding_mask, "padding_mask", "bool", (B, T))
        valid = padding_mask
    last = None if cache is None else cache.last_segment()  # (B, 1) or None
    if segment_ids is None and last is not None and last.shape[0] == B:
        segment = last.expand(B, T)
    elif segment_ids is None:  # (another batch size: the cache's append says so)
        segment = torch.zeros(B, T, dtype=torch.long, device=x.device)
    else:
        check_mask_tensor(segment_ids, "segment_ids", "integer", (B, T))
        segment = segment_ids.long()
    return valid, segment
