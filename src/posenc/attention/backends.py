"""Attention backends: how one call's scores become outputs, chosen by what the encoding
declares (``PositionalEncoding.capabilities``), never by its type.

In order, the first that applies and does not decline (returns None) runs:

- ``explicit``: relative terms need the attention weights, or learned sink logits the softmax's
  denominator: scores, softmax and values by hand, one query block at a time;
- ``flex``: an offset-only bias fused into compiled FlexAttention (opt-in
  ``bias_backend="flex"``; GPUs only, ``flex.flex_runs_on``);
- ``toeplitz``: an offset-only bias read as a zero-copy Toeplitz view of its per-offset table
  (CPU, ``bias_backend`` "auto" or "flex", once the bias is worth sparing);
- ``fused``: the fused kernel the encoding names (``capabilities.fused``; FIRE's on CPU), for
  inference;
- ``sdpa``: ``F.scaled_dot_product_attention``, the bias (if any) one query block at a time.

The fused forms need the plain causal/bidirectional mask (no padding, segments or cache
offset: ``allowed`` is None). Their kernels (``posenc.kernels``: ``flex``, ``toeplitz``,
``fire_fused``) take tensors, never an encoding: this module reads what they need from it
(``offset_table``: the bias per offset; ``fire_attention``: FIRE's factored terms).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from ..encodings.bias import FIRE
from ..encodings.state import PositionState
from ..functional.sinks import softmax_with_sinks
from ..kernels.fire_fused import FireTerms, fire_fused_attention, fire_fused_takes
from ..kernels.flex import OffsetTable, check_attention_inputs, flex_bias_attention, flex_runs_on
from ..kernels.toeplitz import consecutive_starts, toeplitz_bias_attention
from .explicit import explicit_weights
from .keys import CachedKeys

if TYPE_CHECKING:
    from ..encodings.base import PositionalEncoding

#: Bias entries (H x block x Tk) per query block when ``block_size`` is not given: 16 MiB fp32.
BIAS_BLOCK_ENTRIES = 1 << 22
#: Smallest (Tq x L) bias that "auto" reads through the Toeplitz view (lab-size models below).
TOEPLITZ_MIN_ENTRIES = 1 << 16


class Layer(Protocol):
    """What the backends read of an attention layer (``Attention``, ``CrossAttention``)."""

    @property
    def pe(self) -> PositionalEncoding: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def n_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def causal(self) -> bool: ...
    @property
    def dropout(self) -> float: ...
    @property
    def training(self) -> bool: ...
    @property
    def block_size(self) -> int | None: ...
    @property
    def bias_backend(self) -> str: ...
    @property
    def sink_logits(self) -> Tensor | None: ...


class Call(NamedTuple):
    """One attention call: queries (B, H, T, D) after rotation, every key and value (cached
    ones first), the forward's position context, the (B, 1, T, L) mask or None (plain causal or
    bidirectional), and where the new queries start in the cache."""

    q: Tensor
    keys: CachedKeys
    ctx: PositionState
    allowed: Tensor | None
    offset: int


Run = Callable[[Layer, Call], Tensor | None]
#: (q, k, v, q_pos, k_pos, allowed) of one query block.
Block = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor | None]


def attend(layer: Layer, call: Call) -> Tensor:
    """Softmax attention of ``call`` through the first backend that applies: (B, H, T, D)."""
    for applies, run in BACKENDS:
        if applies(layer, call):
            out = run(layer, call)
            if out is not None:
                return out
    raise AssertionError("sdpa applies to every call")  # pragma: no cover


def _dropout(layer: Layer) -> float:
    return layer.dropout if layer.training else 0.0


def _scale(layer: Layer) -> float:
    return 1.0 / math.sqrt(layer.head_dim)  # not 1/sqrt(q's width): PoPE doubles it


def _offset_bias(layer: Layer, call: Call, *backends: str) -> bool:
    """An offset-only bias under the plain mask, with ``bias_backend`` among ``backends``."""
    return (
        layer.bias_backend in backends
        and layer.pe.capabilities.bias == "offset"
        and call.allowed is None
    )


def _eager_cpu(call: Call) -> bool:
    """The host-side fused paths read positions: eager CPU only."""
    return call.q.device.type == "cpu" and not torch.compiler.is_compiling()


def offset_table(pe: PositionalEncoding, lo: int, hi: int, n_heads: int) -> Tensor:
    """bias(i, j) for every offset i - j in lo..hi, from one query against shifted keys.

    Returns (H, hi - lo + 1); row h, column o - lo is the bias at offset o.

    Raises:
        ValueError: the encoding has no bias, or neither one head nor ``n_heads`` of them.
    """
    q_at = max(hi, 0)
    device = pe_device(pe)
    keys = q_at - torch.arange(lo, hi + 1, device=device)  # positions q_at - o >= 0
    query = torch.full((1,), q_at, device=device)  # (no host-to-device copy: no sync)
    bias = pe.bias(query, keys, ctx=pe.prepare(query, keys))  # (1, H|1, 1, n), made here
    if bias is None:
        raise ValueError(f"{pe.name!r} has no score bias to fuse")
    if bias.shape[1] not in (1, n_heads):
        raise ValueError(
            f"{pe.name!r} gives a bias for {bias.shape[1]} heads, attention has {n_heads}"
        )
    return bias[0, :, 0].expand(n_heads, keys.shape[0])


def pe_device(pe: PositionalEncoding) -> torch.device:
    tensors = [*pe.parameters(), *pe.buffers()]
    return tensors[0].device if tensors else torch.device("cpu")


def offset_table_for(
    pe: PositionalEncoding,
    q_pos: Tensor,
    k_pos: Tensor,
    n_heads: int,
    bounds: tuple[int, int] | None = None,
) -> OffsetTable | None:
    """The encoding's bias at every offset q_pos - k_pos can take (``offset_table``), or None
    when there are no positions (nothing to size it by).

    Shapes: q_pos (T,) | (B, T); k_pos (L,) | (B, L) -> values (H, n).
    ``bounds``: host-known (lo, hi) bounds of the offsets (``PositionState.offset_bounds``);
    without them the extremes are read (a host sync).
    """
    if q_pos.numel() == 0 or k_pos.numel() == 0:
        return None
    if bounds is None:
        bounds = int(q_pos.min() - k_pos.max()), int(q_pos.max() - k_pos.min())
    lo, hi = bounds
    return OffsetTable(offset_table(pe, lo, hi, n_heads), lo)


def fire_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pe: PositionalEncoding,
    q_pos: Tensor,
    k_pos: Tensor,
    *,
    causal: bool,
    scale: float,
    checked: bool = False,
) -> Tensor | None:
    """softmax(scale · q k^T + FIRE bias) v by FIRE's fused kernel
    (``kernels.fire_fused``) with the encoding's terms, or None when it does not apply
    (also for a FIRE subclass with its own ``bias``: the kernel computes FIRE's; gapped
    positions; an encoder-form normaliser the kernel does not compute, ``_query_normalised``).

    Shapes: q (B, H, T, D); k, v (B, Hkv, L, D); q_pos (T,) | (B, T); k_pos (L,) | (B, L).
    A one-head FIRE is shared by all H heads, as the (B|1, 1, T, L) bias broadcasts.

    Raises:
        TypeError / ValueError: inputs of the wrong kind or shape (``check_attention_inputs``),
            or a FIRE with neither one head nor H.
    """
    # FIRE's own formula only: a subclass rewriting ``bias`` takes the blocks
    if not isinstance(pe, FIRE) or type(pe).bias is not FIRE.bias or q.device.type != "cpu":
        return None
    if not checked:  # (``Attention`` checked its inputs once)
        check_attention_inputs(q, k, v, q_pos, k_pos, same_dtype=False)
    H = q.shape[1]
    if pe.n_heads not in (1, H):
        raise ValueError(f"FIRE has {pe.n_heads} heads, attention has {H}")
    if not fire_fused_takes(q, k, v, grads=any(p.requires_grad for p in pe.parameters())):
        return None  # before reading the positions
    starts = consecutive_starts(q_pos, k_pos, causal=causal)
    if starts is None:
        return None
    a, b = starts
    T, L = q.shape[2], k.shape[2]
    if not _query_normalised(pe, a, b, T, L, causal=causal):
        return None
    shift = a - b  # offset of query row r and key c: shift + r - c
    max_offset = max(abs(shift + T - 1), abs(shift - L + 1))  # largest |i - j|
    psi, norm = pe.distance_terms(torch.arange(a, a + T), max_offset)
    terms = FireTerms(psi, 1.0 / norm, *pe.mlp_pieces())
    return fire_fused_attention(
        q, k, v, terms, shift=shift, causal=causal, scale=scale, checked=True
    )


def _query_normalised(pe: FIRE, a: int, b: int, T: int, L: int, *, causal: bool) -> bool:
    """Whether every visible pair's normaliser is the query's, ψ(max(L, i)), as the kernel
    computes it: always for the causal form; for the bidirectional form's ψ(max(L, i, j)) when
    no visible key lies after its query (causal, keys b.. not ahead of queries a..) or past
    max(L, first query)."""
    if not pe.bidirectional or (causal and b + L - T <= a):
        return True
    return b + L - 1 <= max(float(pe.threshold), a)


def _offsets(layer: Layer, call: Call) -> OffsetTable | None:
    return offset_table_for(
        layer.pe, call.ctx.q_pos, call.ctx.k_pos, layer.n_heads, call.ctx.offset_bounds
    )


def _flex_applies(layer: Layer, call: Call) -> bool:
    return (
        _offset_bias(layer, call, "flex") and flex_runs_on(call.q.device) and _dropout(layer) == 0.0
    )


def _flex(layer: Layer, call: Call) -> Tensor | None:
    table = _offsets(layer, call)
    if table is None:
        return None
    q, k, v, ctx = call.q, call.keys.k, call.keys.v, call.ctx
    return flex_bias_attention(
        q, k, v, table, ctx.q_pos, ctx.k_pos, causal=layer.causal, checked=True
    )


def _toeplitz_applies(layer: Layer, call: Call) -> bool:
    """CPU SDPA reads the strided mask in place (GPU kernels would copy it); below
    ``TOEPLITZ_MIN_ENTRIES`` one small dense bias is as fast."""
    return (
        _offset_bias(layer, call, "auto", "flex")
        and _eager_cpu(call)
        and call.q.shape[2] * call.keys.k.shape[2] >= TOEPLITZ_MIN_ENTRIES
    )


def _toeplitz(layer: Layer, call: Call) -> Tensor | None:
    table = _offsets(layer, call)
    if table is None:
        return None
    q, k, v, ctx = call.q, call.keys.k, call.keys.v, call.ctx
    return toeplitz_bias_attention(
        q,
        k,
        v,
        table,
        ctx.q_pos,
        ctx.k_pos,
        causal=layer.causal,
        scale=_scale(layer),
        dropout=_dropout(layer),
        block=layer.block_size,
        checked=True,
    )


def _fused_applies(layer: Layer, call: Call) -> bool:
    return (
        layer.bias_backend == "auto"
        and layer.pe.capabilities.fused in FUSED
        and call.allowed is None
        and _eager_cpu(call)
        and _dropout(layer) == 0.0
    )


def _fused(layer: Layer, call: Call) -> Tensor | None:
    kernel = FUSED[layer.pe.capabilities.fused or ""]
    q, k, v, ctx = call.q, call.keys.k, call.keys.v, call.ctx
    return kernel(
        q,
        k,
        v,
        layer.pe,
        ctx.q_pos,
        ctx.k_pos,
        causal=layer.causal,
        scale=_scale(layer),
        checked=True,
    )


def query_blocks(layer: Layer, T: int, L: int, offset: int) -> list[tuple[int, int, int]]:
    """(start, end, keys) of each query block: ``block_size`` queries (default: about
    ``BIAS_BLOCK_ENTRIES`` scores per block over all heads, at least 64); a causal block
    sees the keys up to its last query, offset + end (cache order)."""
    block = layer.block_size or max(64, BIAS_BLOCK_ENTRIES // (layer.n_heads * max(L, 1)))
    if block >= T:
        return [(0, T, L)]
    return [
        (s, min(s + block, T), offset + min(s + block, T) if layer.causal else L)
        for s in range(0, T, block)
    ]


def _blocks(layer: Layer, call: Call, k: Tensor, v: Tensor) -> Iterator[Block]:
    """(q, k, v, q_pos, k_pos, allowed) of each query block (``query_blocks``), the call itself
    when it is one block: a causal block reads only the keys up to its last query (L_b =
    offset + block end), so masked blocks cost nothing."""
    q, ctx, allowed = call.q, call.ctx, call.allowed
    blocks = query_blocks(layer, q.shape[2], k.shape[2], call.offset)
    if len(blocks) == 1:
        yield q, k, v, ctx.q_pos, ctx.k_pos, allowed
        return
    for s, e, Lb in blocks:
        blk_allowed = None if allowed is None else allowed[..., s:e, :Lb]
        yield (
            q[:, :, s:e],
            k[:, :, :Lb],
            v[:, :, :Lb],
            ctx.q_pos[..., s:e],
            ctx.k_pos[..., :Lb],
            blk_allowed,
        )


def _cat(outs: list[Tensor]) -> Tensor:
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)  # (B, H, T, D)


def _sdpa_blocks(layer: Layer, call: Call) -> Tensor:
    """SDPA, one query block at a time when the encoding has a bias: only one block's bias
    (B|1, H|1, block, L_b) exists at once."""
    keys, ctx = call.keys, call.ctx
    if layer.pe.capabilities.bias == "none":
        return _sdpa(layer, call.q, keys.k, keys.v, None, call.allowed)
    outs = [
        _sdpa(layer, qb, kb, vb, layer.pe.bias(q_pos, k_pos, ctx=ctx), allowed)
        for qb, kb, vb, q_pos, k_pos, allowed in _blocks(layer, call, keys.k, keys.v)
    ]
    return _cat(outs)


def _sdpa(
    layer: Layer, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, allowed: Tensor | None
) -> Tensor:
    """SDPA of q (B, H, T, D) over k, v (B, Hkv, L, D) with ``bias`` (B|1, H|1, T, L)."""
    mask: Tensor | None = allowed
    is_causal = layer.causal and allowed is None
    if bias is not None:
        bias = bias.to(q.dtype)
        if is_causal:
            allowed = _causal(q.shape[2], k.shape[2], q.device)
        mask = bias if allowed is None else _masked(bias, allowed)
        is_causal = False
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        dropout_p=_dropout(layer),
        is_causal=is_causal,
        enable_gqa=layer.n_kv_heads != layer.n_heads,
        scale=_scale(layer),
    )


def _explicit_blocks(layer: Layer, call: Call) -> Tensor:
    """Explicit attention (relative terms need the weights) by query blocks (``_blocks``):
    (B, H, block, L_b) scores at once, half the work at T = L when causal. Work the blocks
    share (Transformer-XL's rows) is done once, through the context."""
    blocks = _blocks(layer, call, *_repeated_heads(layer, call))
    return _cat([_explicit_weights(layer, *block, call.ctx)[0] for block in blocks])


def _repeated_heads(layer: Layer, call: Call) -> tuple[Tensor, Tensor]:
    """The call's keys and values with each key/value head repeated for its query heads:
    (B, Hkv, L, D) -> (B, H, L, D)."""
    groups = layer.n_heads // layer.n_kv_heads
    k, v = call.keys.k, call.keys.v
    if groups == 1:
        return k, v
    return k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)


def _explicit_weights(
    layer: Layer,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    allowed: Tensor | None,
    ctx: PositionState,
) -> tuple[Tensor, Tensor]:
    """``explicit_weights`` of one query block (causal: the block's own mask): output
    (B, H, T, D) and softmax weights (B, H, T, L).
    Shapes: q (B, H, T, D); k, v (B, H, L, D) (heads already repeated)."""
    if allowed is None and layer.causal:
        allowed = _causal(q.shape[2], k.shape[2], q.device)
    dropout = partial(F.dropout, p=layer.dropout, training=layer.training)
    sinks = layer.sink_logits
    softmax = (
        partial(torch.softmax, dim=-1)
        if sinks is None
        else partial(softmax_with_sinks, sinks=sinks)
    )
    return explicit_weights(
        layer.pe,
        q,
        k,
        v,
        allowed,
        ctx,
        (q_pos, k_pos),
        head_dim=layer.head_dim,
        softmax=softmax,
        dropout=dropout,
    )


def attend_weights(layer: Layer, call: Call) -> tuple[Tensor, Tensor]:
    """The explicit path over the whole call (no query blocks, no fused kernel), with the
    softmax weights: (B, H, T, D) and (B, H, T, L) (``Attention(..., return_weights=True)``)."""
    k, v = _repeated_heads(layer, call)  # (B, H, L, D)
    ctx = call.ctx
    return _explicit_weights(layer, call.q, k, v, ctx.q_pos, ctx.k_pos, call.allowed, ctx)


def _causal(T: int, L: int, device: torch.device) -> Tensor:
    """(T, L) bool: query i (cache index L - T + i) sees keys up to its own index."""
    return torch.ones(T, L, dtype=torch.bool, device=device).tril(L - T)


def _masked(bias: Tensor, allowed: Tensor) -> Tensor:
    """bias with -inf where not allowed; in place when the hook's fresh output can take it."""
    grad = bias.requires_grad and torch.is_grad_enabled()
    if grad or torch.broadcast_shapes(bias.shape, allowed.shape) != bias.shape:
        return bias.masked_fill(~allowed, float("-inf"))
    return bias.masked_fill_(~allowed, float("-inf"))


#: Fused attention kernels by the name an encoding declares (``Capabilities.fused``).
FUSED: dict[str, Callable[..., Tensor | None]] = {"fire": fire_attention}

#: (applies, run) in order of preference; "sdpa" last, always applies.
BACKENDS: list[tuple[Callable[[Layer, Call], bool], Run]] = [
    (
        lambda layer, call: layer.pe.capabilities.relative_terms or layer.sink_logits is not None,
        _explicit_blocks,
    ),
    (_flex_applies, _flex),
    (_toeplitz_applies, _toeplitz),
    (_fused_applies, _fused),
    (lambda layer, call: True, _sdpa_blocks),
]
