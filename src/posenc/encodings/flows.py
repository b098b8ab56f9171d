"""The control flow of the hooks, written once for the torch encodings (``posenc.encodings``)
and their Flax twins (``posenc.flax``), as ``posenc._models`` does for the models.

An encoding class inherits its flow first (``class XPos(XPosFlow, PositionalEncoding)``) and
its framework's base supplies the arithmetic: ``check_qk(q, k, q_pos, k_pos)`` (its input
checks against ``head_dim``; positions back as its integer arrays) and ``shared_key(name,
*parts)`` (the context key of the module's shared work: torch's hold the module, Flax's only
hashable values, as a pytree's keys must), plus the methods each flow names. Contexts are the
framework's ``PositionContext`` (``type(ctx)`` makes another of the same kind).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from .. import functional as PF
from .._validate import (
    as_4d,
    check_embed,
    check_position_batches,
    check_positions_match,
    check_qk,
    check_real_floating,
    check_scores,
)
from ..functional._xp import (
    as_array_of,
    astype,
    at_least_float32,
    clip,
    move_axis,
    namespace,
    widest_int,
)
from .context import shared_for

#: A hook's ``ctx``: the framework's ``PositionContext`` or None.
Ctx = Any


class Hooks:
    """Every hook the identity (no position information), as in NoPE. An attention layer calls
    them in this order (``posenc.encodings.base``). The input checks of a hook called without
    a context (``check_qk``, ``check_embed``) use the framework's array checks."""

    config: Any
    check_ndim: Any
    check_positions: Any

    def check_qk(self, q: Any, k: Any, q_pos: Any, k_pos: Any) -> tuple[Any, Any]:
        """``_validate.check_qk`` with this encoding's head_dim and axes: positions back as the
        framework's integer arrays."""
        c, checks = self.config, {"ndim": self.check_ndim, "positions": self.check_positions}
        return check_qk(q, k, q_pos, k_pos, c.head_dim, axes=c.axes, **checks)

    def check_embed(self, x: Any, pos: Any) -> Any:
        """``_validate.check_embed`` with this encoding's dim and axes: positions back as the
        framework's integer arrays."""
        c, checks = self.config, {"ndim": self.check_ndim, "positions": self.check_positions}
        return check_embed(x, pos, c.dim, axes=c.axes, **checks)

    def embed(self, x: Any, pos: Any, *, ctx: Ctx = None) -> Any:
        """Add position information to token embeddings. x (B, T, C), pos (B, T) or (T,)."""
        return x

    def rotate(self, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> tuple[Any, Any]:
        """Rotate queries (B, H, Tq, D) and keys (B, Hkv, Tk, D) by their positions."""
        return q, k

    def bias(self, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> Any:
        """Additive logit bias (B or 1, H or 1, Tq, Tk) from positions alone, or None.

        The result must be an array the caller owns (attention may mask it in place), finite
        everywhere; causal masking is the attention layer's job. With query blocks, q_pos/k_pos
        are the block's and ``ctx`` the whole call's.
        """
        return None

    def relative_logits(
        self, scores: Any, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None
    ) -> Any:
        """Rewrite scaled logits (B, H, Tq, Tk), masked entries already -inf. q (B, H, Tq, D),
        k (B, H, Tk, D) with key heads repeated to H. With query blocks, q_pos/k_pos are the
        block's and ``ctx`` the whole call's."""
        return scores

    def relative_values(self, probs: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> Any:
        """Term added to the attention output (B, H, Tq, D) from probs (B, H, Tq, Tk), or None."""
        return None


class Supplied:
    """What a framework's encoding base supplies to every flow (see the module docstring),
    and ``check_positions(pos, what, axes)`` and ``check_ndim(x, ndim, what, layout)`` (its
    array checks), ``param(name, dtype=None)`` (the parameter ``name`` as an array, cast to
    ``dtype`` if given)."""

    config: Any
    check_qk: Any
    check_embed: Any
    shared_key: Any
    check_positions: Any
    check_ndim: Any
    param: Any
    prepare: Any


class QueryTemperatureFlow(Supplied):
    """Queries at position p scaled by Llama 4's temperature τ(p)
    (``PF.query_temperature``), keys unchanged: q_i·k_j becomes τ(i) q_i·k_j. The product runs
    in float32 (float64 for float64 queries) and returns in q's dtype, as transformers'."""

    def rotate(self, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> tuple[Any, Any]:
        if ctx is None:
            self.check_ndim(q, 4, "q", "(B, H, T, D)")
            q_pos = self.check_positions(q_pos, "q_pos")
            check_positions_match(q_pos, q.shape[0], q.shape[2], "q_pos")
        c = self.config
        wide = at_least_float32(q)
        tau = PF.query_temperature(
            q_pos, floor_scale=c.floor_scale, attn_scale=c.attn_scale, dtype=wide
        )  # (T,) | (B, T)
        tau = tau[:, None, :, None] if tau.ndim == 2 else tau[None, None, :, None]  # (B|1,1,T,1)
        return astype(astype(q, wide) * tau, q.dtype), k


class AbsoluteFlow(Supplied):
    """An additive table: ``embed`` adds ``rows(pos)`` (..., C) in x's dtype. Unless a context
    comes with them, x and the positions are checked (``check_embed(x, pos)``) and their values
    (``check_values(pos)``: the table has a row for each); ``prepare`` checks the values once
    per forward (every key was a query once)."""

    def prepare(self, q_pos: Any, k_pos: Any = None) -> Any:
        self.check_values(q_pos)
        return super().prepare(q_pos, k_pos)

    def check_values(self, pos: Any) -> None:
        """Raise for positions the table has no row for (default: every position has one)."""

    def embed(self, x: Any, pos: Any, *, ctx: Ctx = None) -> Any:
        if ctx is None:
            pos = self.check_embed(x, pos)
            self.check_values(pos)
        return x + astype(self.rows(pos), x.dtype)  # (B, T, C)

    def rows(self, pos: Any) -> Any:
        """The table's rows for positions (...,) | (..., A) -> (..., C)."""
        raise NotImplementedError


class SinusoidalFlow(AbsoluteFlow):
    """x + scale·PE[p] for the fixed table ``table(pos)`` (float64, or the widest float)."""

    def table(self, pos: Any) -> Any:
        """PE rows for positions (...,) -> (..., C) (``PF.sinusoidal_table``)."""
        return PF.sinusoidal_table(pos, self.config.dim, base=self.config.base)

    def rows(self, pos: Any) -> Any:
        pe, scale = self.table(pos), self.config.scale
        return pe if scale == 1.0 else scale * pe


class Sincos2DFlow(SinusoidalFlow):
    """As ``SinusoidalFlow``, MAE's 2-D table at grid positions (..., 2)."""

    def table(self, pos: Any) -> Any:
        """PE rows for positions (..., 2) -> (..., C) (``PF.sincos_2d_table``)."""
        return PF.sincos_2d_table(pos, self.config.dim, base=self.config.base)


def in_dtype(dtype: Any, *arrays: Any) -> tuple[Any, ...]:
    """``arrays`` in ``dtype`` (None: float32)."""
    xp = namespace(*arrays)
    return tuple(astype(a, xp.float32 if dtype is None else dtype) for a in arrays)


class RotaryFlow(Supplied):
    """Rotations by cos/sin tables: ``rotate`` checks its inputs unless a context comes with
    them and turns q and k by their ``pair_tables(q, k, q_pos, k_pos, ctx)`` through the
    framework's ``rotate_pair(q, k, tq, tk, inplace)`` (torch's RoPEs: their kernel);
    ``apply_tables(x, tables, inplace)`` rotates one array. ``tables(x, pos, ctx, key,
    cos_sin)``: ``cos_sin()`` in float32 or x's wider dtype, broadcastable to x ((B, T, P) as
    (B, 1, T, P) unless ``per_head``), made once per forward through the context and held as
    the framework's ``wrap_tables(cos, sin)``."""

    name: str
    per_head = False
    rotate_pair: Any
    apply_tables: Any
    wrap_tables: Any

    def rotate(
        self, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None, inplace: bool = False
    ) -> tuple[Any, Any]:
        """R(q_pos) q, R(k_pos) k for q (B, H, Tq, D), k (B, Hkv, Tk, D); ``inplace=True``
        (torch, inference) overwrites q and k instead of allocating."""
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
        tq, tk = self.pair_tables(q, k, q_pos, k_pos, ctx)
        return self.rotate_pair(q, k, tq, tk, inplace)

    def pair_tables(self, q: Any, k: Any, q_pos: Any, k_pos: Any, ctx: Ctx) -> tuple[Any, Any]:
        """The tables of q at ``q_pos`` and of k at ``k_pos`` (``tables``)."""
        raise NotImplementedError

    def tables(self, x: Any, pos: Any, ctx: Ctx, key: tuple[Any, ...], cos_sin: Any) -> Any:
        work = at_least_float32(x)

        def make() -> Any:
            cos, sin = in_dtype(work, *cos_sin())
            if cos.ndim == 3 and not self.per_head:  # (B, T, P) -> (B, 1, T, P)
                cos, sin = cos[:, None], sin[:, None]
            return self.wrap_tables(cos, sin)

        return shared_for(ctx, pos, self.shared_key(*key, work), make)


class RoPEFlow(RotaryFlow):
    """RoPE: tables cos, sin of pos·θ (θ ``inv_freq64`` (P,) float64) times the scaling's
    ``attention_scaling``; dynamic scaling (``config.dynamic``) takes θ from
    ``default_inv_freq64`` at the current length max(positions) + 1 (``max_position(
    *positions)``: the framework's host read), read once per forward through the context."""

    inv_freq64: Any
    default_inv_freq64: Any
    attention_scaling: float
    max_position: Any

    def frequencies(self, seq_len: int | None = None) -> tuple[Any, float]:
        """(inv_freq (P,) float64, attention_scaling) at the current length ``seq_len``."""
        if not self.config.dynamic or seq_len is None:
            return self.inv_freq64, self.attention_scaling
        return self.config.scaling.apply(self.default_inv_freq64, seq_len)

    def seq_len(self, *positions: Any) -> int | None:
        """max(positions) + 1 for dynamic scaling (what transformers uses), else None."""
        if not self.config.dynamic:
            return None
        return int(self.max_position(*positions)) + 1

    def cos_sin(self, pos: Any, dtype: Any = None, seq_len: int | None = None) -> tuple[Any, Any]:
        """cos, sin (..., P) in ``dtype`` (default float32) for integer positions (...,), from
        float64 angles, times the scaling's attention factor. ``seq_len`` (dynamic scaling)
        defaults to max(pos) + 1."""
        seq_len = self.seq_len(pos) if seq_len is None else seq_len
        inv_freq, scale = self.frequencies(seq_len)
        cos, sin = PF.rope_cos_sin(pos, as_array_of(inv_freq, pos))  # float64
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        return in_dtype(dtype, cos, sin)

    def rope_tables(self, x: Any, pos: Any, seq_len: int | None = None, ctx: Ctx = None) -> Any:
        """The tables of x (B, H, T, D) at positions (T,) or (B, T) (``tables``)."""
        make = partial(self.cos_sin, pos, at_least_float32(x), seq_len)
        return self.tables(x, pos, ctx, ("rope", seq_len), make)

    def rotate_one(self, x: Any, pos: Any, seq_len: int | None = None, ctx: Ctx = None) -> Any:
        """Rotate x (B, H, T, D) at positions (T,) or (B, T) (dynamic scaling at ``seq_len``)."""
        return self.apply_tables(x, self.rope_tables(x, pos, seq_len, ctx))

    def pair_tables(self, q: Any, k: Any, q_pos: Any, k_pos: Any, ctx: Ctx) -> tuple[Any, Any]:
        seq_len = self.current_length(q_pos, k_pos, ctx)
        return self.rope_tables(q, q_pos, seq_len, ctx), self.rope_tables(k, k_pos, seq_len, ctx)

    def current_length(self, q_pos: Any, k_pos: Any, ctx: Ctx) -> int | None:
        """The dynamic length of a call: of the whole context (read once per forward), or of
        these positions; None without dynamic scaling."""
        if not self.config.dynamic:
            return None
        roles = (None, None) if ctx is None else (ctx.role(q_pos), ctx.role(k_pos))
        if ctx is None or None in roles:
            return self.seq_len(q_pos, k_pos)
        key = self.shared_key("rope_seq_len", *roles)
        return ctx.shared(key, lambda: self.seq_len(q_pos, k_pos))


class GridFlow(RotaryFlow):
    """RoPE on grids: ``angles(pos)`` of positions (..., T, A), (..., T, P) per pair or
    (..., H, T, P) per head (``per_head``: keys need the queries' heads, ``check_heads``), in
    float64; cos/sin once per forward through the context."""

    def angles(self, pos: Any) -> Any:
        """Angles of every pair at positions (..., T, A): (..., T, P), or (..., H, T, P)."""
        raise NotImplementedError

    def cos_sin(self, pos: Any, dtype: Any = None) -> tuple[Any, Any]:
        """cos, sin of ``angles(pos)`` in ``dtype`` (default float32), from float64 angles."""
        angles = self.angles(pos)
        xp = namespace(angles)
        return in_dtype(dtype, xp.cos(angles), xp.sin(angles))

    def pair_tables(self, q: Any, k: Any, q_pos: Any, k_pos: Any, ctx: Ctx) -> tuple[Any, Any]:
        if self.per_head:
            self.config.check_heads(q, k)
        return self.grid_tables(q, q_pos, ctx), self.grid_tables(k, k_pos, ctx)

    def grid_tables(self, x: Any, pos: Any, ctx: Ctx) -> Any:
        make = partial(self.cos_sin, pos, at_least_float32(x))
        return self.tables(x, pos, ctx, (self.name,), make)


class AxialFlow(GridFlow):
    """Axial RoPE: pair p turns by its axis's coordinate, pos[a(p)]·θ_p (θ ``inv_freq64`` (P,)
    float64, a ``axis_of_pair`` (P,), from the config's ``inv_freq()`` and ``pair_axes()``)."""

    inv_freq64: Any
    axis_of_pair: Any

    def angles(self, pos: Any) -> Any:
        axes = as_array_of(self.axis_of_pair, pos)
        return PF.axis_angles(pos, as_array_of(self.inv_freq64, pos), axes)  # (..., T, P)


class XPosFlow(RotaryFlow):
    """xPos: queries scaled by ζ^(pos/γ_s), keys by ζ^(-pos/γ_s) (``rotate_scaled``, θ
    ``inv_freq`` (P,) float64); the dtype range checked (``check_range(q, k, q_pos, k_pos)``)
    on the positions given, or once per forward and dtype through the context."""

    inv_freq: Any
    check_range: Any

    def rotate(  # type: ignore[override]
        self, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None
    ) -> tuple[Any, Any]:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            self.check_range(q, k, q_pos, k_pos)
        else:  # once per forward and dtype: every layer meets the same positions
            key = self.shared_key("xpos_range", q.dtype, k.dtype)
            ctx.shared(key, lambda: self.check_range(q, k, ctx.q_pos, ctx.k_pos))
        return self.rotate_scaled(q, q_pos, 1, ctx), self.rotate_scaled(k, k_pos, -1, ctx)

    def rotate_scaled(self, x: Any, pos: Any, sign: int, ctx: Ctx = None) -> Any:
        """Rotate x (B, H, T, D) at positions (T,) or (B, T), scaled by ζ^(sign·pos/γ_s)."""
        make = partial(self.scaled_cos_sin, pos, sign)
        return self.apply_tables(x, self.tables(x, pos, ctx, ("xpos", sign), make))

    def scaled_cos_sin(self, pos: Any, sign: int) -> tuple[Any, Any]:
        """ζ^(sign·pos/γ_s) cos, sin (..., P) of pos·θ, float64."""
        c = self.config
        cos, sin = PF.rope_cos_sin(pos, as_array_of(self.inv_freq, pos))
        scale = PF.xpos_scale(sign * pos, c.rotary_dim, scale_base=c.scale_base, gamma=c.gamma)
        return cos * scale, sin * scale


class PoPEFlow(Supplied):
    """PoPE: queries at phases pos·θ - δ (``phase_bias()``: a row per query head), keys at
    pos·θ, θ ``inv_freq`` (D,) (the framework's array); cos and sin of pos·θ made once per
    forward through the context, δ applied by each layer."""

    inv_freq: Any
    phase_bias: Any

    def rotate(self, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> tuple[Any, Any]:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
        if q.shape[1] != self.config.n_heads:
            raise ValueError(f"q must have n_heads={self.config.n_heads} heads, got {q.shape[1]}")
        return self.polar(q, q_pos, self.phase_bias(), ctx), self.polar(k, k_pos, None, ctx)

    def polar(self, x: Any, pos: Any, shift: Any, ctx: Ctx = None) -> Any:
        """x (B, H, T, D) at positions (T,) or (B, T) -> (B, H, T, 2D), phases pos·θ - shift
        (``PF.pope_features``)."""
        inv_freq = as_array_of(self.inv_freq, pos)
        key = self.shared_key("pope")
        cos_sin = shared_for(ctx, pos, key, lambda: PF.rope_cos_sin(pos, inv_freq))
        return PF.pope_features(x, pos, inv_freq, shift, cos_sin=cos_sin)


class RandomizedFlow(Supplied):
    """Randomized positions: the ``base`` encoding's hooks at the drawn positions
    (``transform``, one draw per forward through the context); the base's
    rotation shares its own context over the drawn positions, so its tables are made once."""

    base: Any
    check_positions: Any
    draw: Any

    @property
    def sampling(self) -> bool:
        """True when positions are drawn at random (the framework's training mode or
        ``sample_in_eval``)."""
        raise NotImplementedError

    def transform(self, pos: Any, batch: int, ctx: Ctx = None) -> Any:
        """Positions (T,) or (B, T) -> sampled positions (B, T) (``pos`` when not ``sampling``):
        one draw per forward for the context's positions (the keys' draw is the queries' when
        they are one array), a fresh one (``draw(pos, batch)``) otherwise.

        Raises: ValueError for negative positions or more than ``max_len`` of them (where
        their values are checked).
        """
        if ctx is None:
            pos = self.check_positions(pos)
        if not self.sampling:
            return pos
        key = self.shared_key("randomized", batch)
        return shared_for(ctx, pos, key, lambda: self.draw(pos, batch))

    def embed(self, x: Any, pos: Any, *, ctx: Ctx = None) -> Any:
        return self.base.embed(x, self.transform(pos, x.shape[0], ctx))

    def rotate(self, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> tuple[Any, Any]:
        new_q = self.transform(q_pos, q.shape[0], ctx)
        new_k = new_q if k_pos is q_pos else self.transform(k_pos, k.shape[0], ctx)
        base_ctx = None
        if ctx is not None and None not in (roles := (ctx.role(q_pos), ctx.role(k_pos))):
            # the base's context over the drawn positions, once per forward
            key = self.shared_key("randomized_base", *roles)
            base_ctx = ctx.shared(key, lambda: type(ctx)(new_q, new_k))
        return self.base.rotate(q, k, new_q, new_k, ctx=base_ctx)


class BiasFlow(Supplied):
    """A score bias of positions alone: ``bias`` checks them unless a context comes with them
    (whoever built it checked them) and calls ``formula(q_pos, k_pos)`` -> (H, Tq, Tk) or
    (B, H, Tq, Tk) with them as the widest signed int (i - j cannot wrap: uint8 0 - 1 = 255)."""

    def bias(self, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> Any:
        if ctx is None:
            q_pos = self.check_positions(q_pos, "q_pos")
            k_pos = self.check_positions(k_pos, "k_pos")
            check_position_batches(q_pos, k_pos)
        wide = widest_int(namespace(q_pos, k_pos))
        return as_4d(self.formula(astype(q_pos, wide), astype(k_pos, wide)))  # (B|1, H, Tq, Tk)

    def formula(self, q_pos: Any, k_pos: Any) -> Any:
        """The bias (H, Tq, Tk) or (B, H, Tq, Tk) of checked positions."""
        raise NotImplementedError


class T5Flow(BiasFlow):
    """T5's bias W[bucket(j - i), h] from the table ``weight`` W (num_buckets, H), read in
    float32 or wider by ``lookup(table, index)`` -> table[index] (index (..., Tq, Tk) ->
    (..., Tq, Tk, H))."""

    lookup: Any

    def buckets(self, q_pos: Any, k_pos: Any) -> Any:
        """Integer bucket (..., Tq, Tk) of each key-minus-query offset."""
        c = self.config
        return PF.t5_relative_bucket(
            -PF.relative_offsets(q_pos, k_pos),  # key - query, T5's sign
            bidirectional=c.bidirectional,
            num_buckets=c.num_buckets,
            max_distance=c.max_distance,
        )

    def formula(self, q_pos: Any, k_pos: Any) -> Any:
        table = self.param("weight")
        values = self.lookup(astype(table, at_least_float32(table)), self.buckets(q_pos, k_pos))
        return move_axis(values, -1, -3)  # (..., Tq, Tk, H) -> (H, Tq, Tk) | (B, H, Tq, Tk)


class KerpleFlow(BiasFlow):
    """Kerple's bias of r1, r2 (H,) learned, clamped to their ranges with a straight-through
    gradient (``stop_gradient(x)``: x cut from the gradient)."""

    stop_gradient: Any

    def clamp_straight_through(self, x: Any, low: float, high: float | None = None) -> Any:
        """clamp(x, low, high) in value, identity in gradient, so a clamped parameter can
        recover."""
        return x + self.stop_gradient(clip(x, low, high) - x)

    def kernel_parameters(self) -> tuple[Any, Any]:
        """r1, r2 (H,) clamped to their ranges, in float32 or wider."""
        c, r1, r2 = self.config, self.param("r1"), self.param("r2")
        dtype = at_least_float32(r1)
        r1 = self.clamp_straight_through(astype(r1, dtype), c.eps)
        r2 = self.clamp_straight_through(astype(r2, dtype), c.eps, c.r2_max)
        return r1, r2

    def formula(self, q_pos: Any, k_pos: Any) -> Any:
        r1, r2 = self.kernel_parameters()
        return PF.kerple_bias(q_pos, k_pos, r1, r2, variant=self.config.variant)


class RelativeFlow(Supplied):
    """Relative logit terms: ``relative_logits`` = scores + ``extra_logits(scores, q, k, q_pos,
    k_pos, ctx)`` (B, H, Tq, Tk), inputs checked unless a context comes with them (the term is
    added to the scores, never broadcast)."""

    def relative_logits(
        self, scores: Any, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None
    ) -> Any:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            check_scores(scores, q, k)
        return scores + self.extra_logits(scores, q, k, q_pos, k_pos, ctx)

    def extra_logits(self, scores: Any, q: Any, k: Any, q_pos: Any, k_pos: Any, ctx: Ctx) -> Any:
        """The term (B, H, Tq, Tk) added to the scaled, masked logits ``scores``."""
        raise NotImplementedError


class ShawFlow(RelativeFlow):
    """Shaw et al. 2018: e_ij += q_i·a^K_ij / sqrt(D) and z_i += Σ_j α_ij a^V_ij, a_ij the row
    clip(j - i, -K, K) + K of the tables ``key_table``, ``value_table`` (2K+1, D) (None:
    no value term)."""

    value_table: Any

    def index(self, q_pos: Any, k_pos: Any) -> Any:
        """Table rows clip(j - i, -K, K) + K: (Tq, Tk) or (B, Tq, Tk)."""
        return PF.shaw_relative_index(q_pos, k_pos, max_distance=self.config.max_distance)

    def extra_logits(self, scores: Any, q: Any, k: Any, q_pos: Any, k_pos: Any, ctx: Ctx) -> Any:
        scaled = q / math.sqrt(self.config.head_dim)  # scale the (B, H, Tq, D) factor
        table = self.param("key_table", q.dtype)
        return PF.relative_key_logits(scaled, table, self.index(q_pos, k_pos))  # (B, H, Tq, Tk)

    def relative_values(self, probs: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> Any:
        if self.value_table is None:
            return None
        if ctx is None:  # a context's positions were checked by whoever built it
            self.check_ndim(probs, 4, "probs", "(B, H, Tq, Tk)")
            check_real_floating(probs, "probs")
            q_pos, k_pos = (
                self.check_positions(q_pos, "q_pos"),
                self.check_positions(k_pos, "k_pos"),
            )
            check_positions_match(q_pos, probs.shape[0], probs.shape[2], "q_pos")
            check_positions_match(k_pos, probs.shape[0], probs.shape[3], "k_pos")
        table = self.param("value_table")
        return PF.relative_value_output(probs, table, self.index(q_pos, k_pos))  # (B, H, Tq, D)


class TransformerXLFlow(RelativeFlow):
    """Transformer-XL: A_ij += (q_i·W_R R_(i-j) + u·k_j + v·W_R R_(i-j)) / sqrt(D), parameters
    ``r_proj`` W_R (H·D, C), ``u``, ``v`` (H, D); ``position_rows(q_pos, k_pos, dtype, ctx)``
    the W_R R rows the framework shares through the context (``PF.transformer_xl_terms``'s
    ``rows``), or None to make them here."""

    position_rows: Any

    def extra_logits(self, scores: Any, q: Any, k: Any, q_pos: Any, k_pos: Any, ctx: Ctx) -> Any:
        n_heads = self.config.n_heads
        for what, x in (("q", q), ("k (key heads repeated)", k)):
            if x.shape[1] != n_heads:
                raise ValueError(f"{what} must have n_heads={n_heads} heads, got {x.shape[1]}")
        scale = 1.0 / math.sqrt(self.config.head_dim)  # on the factors q, u, v, not the terms
        return PF.transformer_xl_terms(
            q * scale,
            k,
            q_pos,
            k_pos,
            r_proj=self.param("r_proj", q.dtype),
            u=self.param("u", q.dtype) * scale,
            v=self.param("v", q.dtype) * scale,
            base=self.config.base,
            rows=self.position_rows(q_pos, k_pos, q.dtype, ctx),
        )  # (B, H, Tq, Tk), already divided by sqrt(D)


class CoPEFlow(RelativeFlow):
    """CoPE: z_ij += (1 - w) q_i·e[⌊p_ij⌋] + w q_i·e[⌈p_ij⌉] for the contextual positions
    p_ij of the scores (``PF.cope_positions``), e ``pos_emb`` (n_positions, D), in float32 or
    the scores' wider dtype."""

    def extra_logits(self, scores: Any, q: Any, k: Any, q_pos: Any, k_pos: Any, ctx: Ctx) -> Any:
        work = at_least_float32(scores)  # fractional counts need >= fp32
        positions = PF.cope_positions(astype(scores, work), n_positions=self.config.n_positions)
        per_position = astype(q, work) @ self.param("pos_emb", work).T  # (B, H, Tq, P)
        return astype(PF.cope_interpolate(positions, per_position), scores.dtype)
