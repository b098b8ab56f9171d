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

from typing import Any

from .context import shared_for

#: A hook's ``ctx``: the framework's ``PositionContext`` or None.
Ctx = Any


class Hooks:
    """Every hook the identity (no position information), as in NoPE. An attention layer calls
    them in this order (``posenc.encodings.base``)."""

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
    """What a framework's encoding base supplies to every flow (see the module docstring)."""

    config: Any
    check_qk: Any
    shared_key: Any


class XPosFlow(Supplied):
    """xPos: queries scaled by ζ^(pos/γ_s), keys by ζ^(-pos/γ_s) (``rotate_scaled(x, pos,
    sign, ctx)``); the dtype range checked (``check_range(q, k, q_pos, k_pos)``) on the
    positions given, or once per forward and dtype through the context."""

    check_range: Any
    rotate_scaled: Any

    def rotate(self, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> tuple[Any, Any]:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
            self.check_range(q, k, q_pos, k_pos)
        else:  # once per forward and dtype: every layer meets the same positions
            key = self.shared_key("xpos_range", q.dtype, k.dtype)
            ctx.shared(key, lambda: self.check_range(q, k, ctx.q_pos, ctx.k_pos))
        return self.rotate_scaled(q, q_pos, 1, ctx), self.rotate_scaled(k, k_pos, -1, ctx)


class PoPEFlow(Supplied):
    """PoPE: queries at phases pos·θ - δ (``polar(x, pos, shift)``, ``phase_bias()``), keys
    at pos·θ; δ has a row per query head."""

    polar: Any
    phase_bias: Any

    def rotate(self, q: Any, k: Any, q_pos: Any, k_pos: Any, *, ctx: Ctx = None) -> tuple[Any, Any]:
        if ctx is None:
            q_pos, k_pos = self.check_qk(q, k, q_pos, k_pos)
        if q.shape[1] != self.config.n_heads:
            raise ValueError(f"q must have n_heads={self.config.n_heads} heads, got {q.shape[1]}")
        return self.polar(q, q_pos, self.phase_bias()), self.polar(k, k_pos, None)


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
