"""Flax randomized positional encodings (Ruoss et al. 2023, arXiv:2305.16843), as torch's
``posenc.encodings.randomized``: the base encoding sees positions drawn from a larger range."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ..encodings import configs
from ..encodings.flows import RandomizedFlow
from .base import (
    PositionalEncoding,
    accepted_keys,
    batch_positions,
    bounds,
    build,
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


@register(configs.RandomizedConfig)
class Randomized(RandomizedFlow, PositionalEncoding):
    """As torch's ``Randomized``: S is drawn once per forward through the position context
    (the model's ``embed`` and every layer's ``rotate`` share it, also under ``nnx.remat``
    given the context as an argument); a hook without a context draws afresh. ``.eval()``
    stops sampling unless ``sample_in_eval``. Draws use the ``positions`` stream of
    ``nnx.Rngs(seed)`` (default: a key from ``rngs``) and run under ``jax.jit``."""

    config: configs.RandomizedConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        base_keys = self.config.base_keys(accepted_keys(self.base_encoding))
        self.base = build(self.base_encoding, rngs=rngs, **base_keys)
        self.deterministic = False  # as torch's training mode; nnx's .eval() sets it True
        self.rngs = nnx.Rngs(positions=rngs.params() if self.seed is None else self.seed)

    @property
    def sampling(self) -> bool:
        """True when positions are drawn at random (training, or ``sample_in_eval``)."""
        return not self.deterministic or self.sample_in_eval

    def draw(self, pos: Array, batch: int) -> Array:
        """A new draw for ``pos`` (B, T)."""
        low, high = bounds(pos) or (0, 0)  # traced or empty: nothing to check
        if low < 0:
            raise ValueError(f"positions must be >= 0 for randomized positions, got min {low}")
        self.config.check_draw(high + 1)
        noise = jax.random.uniform(self.rngs.positions(), (batch, self.max_len))  # (B, L)
        return sorted_subset_at(noise, batch_positions(pos, batch))  # (B, T)
