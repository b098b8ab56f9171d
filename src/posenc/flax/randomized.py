"""Flax nnx randomized positional encodings (Ruoss et al. 2023, arXiv:2305.16843), as
``posenc.encodings.randomized``: the base encoding sees positions drawn from a larger range."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from .._validate import check_positive_int
from .base import (
    ENCODINGS,
    PositionalEncoding,
    batch_positions,
    build,
    check_positions,
    extreme,
    keyword_params,
    register,
)

Array = jax.Array
BASES: tuple[str, ...] = ("sinusoidal", "learned", "rope")


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


@register("randomized", family="randomized")
class Randomized(PositionalEncoding):
    """Training: pos' = S[pos], S a sorted uniform random subset of range(``max_len``) of size
    max(pos) + 1 per batch row; evaluation (``.eval()``): pos' = pos unless ``sample_in_eval``.
    The base encoding (``base_encoding`` with ``base_config``) gets pos' in every hook. One S is
    drawn per ``embed`` (once per TinyTransformer forward) and reused by ``rotate`` for the
    same positions: the same array, or equal values of the same shape (the copies ``nnx.remat``
    passes a block). The model drops it after its forward (``clear_cache``), so the state keeps
    one structure and ``nnx.jit`` traces once per shape. Draws use the ``positions`` stream of
    ``nnx.Rngs(seed)``.
    """

    def __init__(
        self,
        *,
        max_len: int,
        base_encoding: str = "rope",
        dim: int | None = None,
        head_dim: int | None = None,
        base_config: dict[str, Any] | None = None,
        sample_in_eval: bool = False,
        seed: int | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        check_positive_int(max_len, "max_len")
        if base_encoding not in BASES:
            raise ValueError(f"base_encoding must be one of {BASES}, got {base_encoding!r}")
        self.max_len, self.sample_in_eval = max_len, bool(sample_in_eval)
        shared = {"dim": dim, "head_dim": head_dim, "max_len": max_len}
        accepted = keyword_params(ENCODINGS[base_encoding])
        given = {k: v for k, v in shared.items() if k in accepted and v is not None}
        self.base = build(base_encoding, rngs=rngs, **(given | (base_config or {})))
        self.deterministic = False  # as torch's training mode; nnx's .eval() sets it True
        key = (rngs or nnx.Rngs(0)).params() if seed is None else seed
        self.rngs = nnx.Rngs(positions=key)
        self.memo: nnx.Cache[tuple[Array, Array] | None] = nnx.Cache(None)

    @property
    def sampling(self) -> bool:
        """True when positions are drawn at random (training, or ``sample_in_eval``)."""
        return not self.deterministic or self.sample_in_eval

    def transform(self, pos: Array, batch: int, *, fresh: bool = False) -> Array:
        """Positions (T,) or (B, T) -> sampled positions (B, T) (``pos`` when not sampling).

        Raises: ValueError for negative positions or more than ``max_len`` of them (checked
        when positions are concrete).
        """
        pos = check_positions(pos)
        if not self.sampling:
            return pos
        memo = self.memo.get_value()
        if not fresh and memo is not None and memo[0] is pos:
            return memo[1]
        low, high = extreme(pos, "min"), extreme(pos, "max")
        if low is not None and low < 0:
            raise ValueError(f"positions must be >= 0 for randomized positions, got min {low}")
        if high is not None and high + 1 > self.max_len:
            raise ValueError(
                f"randomized positions need max_len >= sequence length, got max_len="
                f"{self.max_len} for {high + 1} positions; raise max_len (the random range)"
            )
        rows = batch_positions(pos, batch)  # (B, T)
        noise = jax.random.uniform(self.rngs.positions(), (batch, self.max_len))  # (B, L)
        out = sorted_subset_at(noise, rows)  # (B, T)
        if fresh:
            self.memo.set_value((pos, out))
        elif memo is not None and memo[1].shape == out.shape:  # embed's positions, copied?
            same = jnp.all(batch_positions(memo[0], batch) == rows)
            out = jnp.where(same, memo[1], out)
        return out

    def clear_cache(self) -> None:
        """Forget the forward's draw (``TinyTransformer`` calls it after each forward)."""
        self.memo.set_value(None)

    def embed(self, x: Array, pos: Array) -> Array:
        return self.base.embed(x, self.transform(pos, x.shape[0], fresh=True))

    def rotate(self, q: Array, k: Array, q_pos: Array, k_pos: Array) -> tuple[Array, Array]:
        new_q = self.transform(q_pos, q.shape[0])
        new_k = new_q if k_pos is q_pos else self.transform(k_pos, k.shape[0])
        return self.base.rotate(q, k, new_q, new_k)
