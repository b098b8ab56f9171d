"""Flax randomized positional encodings (Ruoss et al. 2023, arXiv:2305.16843), as torch's
``posenc.encodings.randomized``: the base encoding sees positions drawn from a larger range."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
from flax import nnx, struct

from ..encodings import configs
from .base import (
    DType,
    Encoding,
    PositionalEncoding,
    PositionState,
    accepted_keys,
    batch_positions,
    bounds,
    build,
    check_positions,
    register,
)

Array = jax.Array


def sorted_subset_at(noise: Array, rows: Array) -> Array:
    """S[pos] for S the sorted set of the n = max(pos) + 1 indices with the smallest ``noise``
    per row: a uniform random n-subset of range(L) when noise is i.i.d. (the torch module's
    ``argsort(noise)[:, :n]``, sorted). Static shapes, so it runs under ``jax.jit``.

    Shapes: noise (B, L) float, rows (B, T) integer in [0, L) -> (B, T).
    """
    n = jnp.max(rows, axis=-1, keepdims=True) + 1  # (B, 1)
    rank = jnp.argsort(jnp.argsort(noise, axis=-1), axis=-1)  # (B, L) rank of each index
    count = jnp.cumsum(rank < n, axis=-1)  # (B, L) chosen indices up to each index
    # S[k] is the first index where the count reaches k + 1
    return jax.vmap(lambda c, p: jnp.searchsorted(c, p + 1, side="left"))(count, rows)


@struct.dataclass
class RandomizedState(PositionState):
    """The positions of one forward, their draws (``q_draw`` (B, T) at q_pos, ``k_draw`` at
    k_pos: the same array when k_pos is q_pos; the positions themselves when not sampling) and
    ``base``, the base encoding's state at the drawn positions."""

    q_draw: Array
    k_draw: Array
    base: PositionState  # the base encoding's own state (its subclass of PositionState)

    def new_keys(self) -> RandomizedState:
        """This forward's fresh keys sit at q_pos: their draw is the queries'."""
        return replace(self, k_pos=self.q_pos, k_draw=self.q_draw, base=self.base.new_keys())


@register(configs.RandomizedConfig)
class Randomized(PositionalEncoding[RandomizedState]):
    """As torch's ``Randomized``: the base encoding's hooks at sorted positions drawn
    uniformly from range(max_len), once per forward in ``prepare`` (the model's ``embed`` and
    every layer's ``rotate`` read it, also under ``nnx.remat`` given the state as an
    argument); a hook without a state draws afresh. ``.eval()`` stops sampling unless
    ``sample_in_eval``. Draws use the ``positions`` stream of ``nnx.Rngs(seed)`` (default: a
    key from ``rngs``) and run under ``jax.jit``.

    Raises: ValueError for negative positions or more than ``max_len`` of them (where their
    values are concrete)."""

    config: configs.RandomizedConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        c = self.config
        base_keys = c.base_keys(accepted_keys(c.base_encoding))
        self.base: Encoding = build(c.base_encoding, rngs=rngs, **base_keys)
        self.deterministic = False  # as torch's training mode; nnx's .eval() sets it True
        self.rngs = nnx.Rngs(positions=rngs.params() if c.seed is None else c.seed)

    @property
    def embeds(self) -> bool:  # type: ignore[override]
        """Additive where its base encoding is."""
        return self.base.embeds

    @property
    def sampling(self) -> bool:
        """True when positions are drawn at random (training, or ``sample_in_eval``)."""
        return not self.deterministic or self.config.sample_in_eval

    def draw(self, pos: Array, batch: int) -> Array:
        """A new draw for ``pos`` (T,) | (B, T) -> (B, T)."""
        low, high = bounds(pos) or (0, 0)  # traced or empty: nothing to check
        if low < 0:
            raise ValueError(f"positions must be >= 0 for randomized positions, got min {low}")
        self.config.check_draw(high + 1)
        noise = jax.random.uniform(self.rngs.positions(), (batch, self.config.max_len))  # (B, L)
        return sorted_subset_at(noise, batch_positions(pos, batch))  # (B, T)

    def transform(self, pos: Array, batch: int) -> Array:
        """Positions (T,) or (B, T) -> a fresh draw (B, T) (``pos`` checked, and as given when
        not ``sampling``)."""
        pos = check_positions(pos)
        return self.draw(pos, batch) if self.sampling else pos

    def prepare(
        self,
        q_pos: Array,
        k_pos: Array | None = None,
        *,
        dtype: DType = jnp.float32,
        batch: int | None = None,
    ) -> RandomizedState:
        k_pos = q_pos if k_pos is None else k_pos
        if self.sampling:
            B = batch if batch is not None else (q_pos.shape[0] if q_pos.ndim == 2 else 1)
            q_draw = self.draw(q_pos, B)
            k_draw = (
                q_draw
                if k_pos is q_pos
                else self.draw(k_pos, k_pos.shape[0] if k_pos.ndim == 2 else B)
            )
        else:
            q_draw, k_draw = q_pos, k_pos
        base = self.base.prepare(q_draw, k_draw, dtype=dtype, batch=batch)
        return RandomizedState(q_pos, k_pos, self.axes, q_draw, k_draw, base)

    def embed(self, x: Array, pos: Array, *, ctx: RandomizedState | None = None) -> Array:
        if ctx is None:
            return self.base.embed(x, self.transform(pos, x.shape[0]))
        return self.base.embed(x, ctx.q_draw, ctx=ctx.base)

    def rotate(
        self,
        q: Array,
        k: Array,
        q_pos: Array,
        k_pos: Array,
        *,
        ctx: RandomizedState | None = None,
    ) -> tuple[Array, Array]:
        if ctx is None:
            new_q = self.transform(q_pos, q.shape[0])
            new_k = new_q if k_pos is q_pos else self.transform(k_pos, k.shape[0])
            return self.base.rotate(q, k, new_q, new_k)
        return self.base.rotate(q, k, ctx.q_draw, ctx.k_draw, ctx=ctx.base)
