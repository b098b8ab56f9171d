"""Randomized positional encodings (Ruoss et al. 2023, arXiv:2305.16843)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .._validate import check_nonnegative, check_positions, values_checked
from ..registry import build, info, register
from .base import PositionalEncoding, batch_positions
from .capabilities import Capabilities
from .configs import RandomizedConfig
from .state import PositionState

#: A draw of positions (T,) | (B, T) for a batch size: (B, T).
Draw = Callable[[Tensor, int], Tensor]


class Draws:
    """One forward's drawn positions (B, T) of the queries and of the keys, and the base
    encoding's state over them (``base_state``), each made on first use for the batch size
    the first hook asks with (a hook asking for another batch gets a draw of its own). The
    fresh keys' draws (``fresh``) are the queries'."""

    def __init__(
        self, draw: Draw, q_pos: Tensor, k_pos: Tensor, *, parent: Draws | None = None
    ) -> None:
        self._draw, self.q_pos, self.k_pos, self._parent = draw, q_pos, k_pos, parent
        self._q: tuple[int, Tensor] | None = None
        self._k: tuple[int, Tensor] | None = None
        self._base: PositionState | None = None
        self._fresh: Draws | None = None

    def queries(self, batch: int) -> Tensor:
        """The queries' draw (B, T)."""
        if self._parent is not None:
            return self._parent.queries(batch)
        if self._q is None:
            self._q = (batch, self._draw(self.q_pos, batch))
        return self._q[1] if self._q[0] == batch else self._draw(self.q_pos, batch)

    def keys(self, batch: int) -> Tensor:
        """The keys' draw (B, L): the queries' for the fresh keys."""
        if self._parent is not None:
            return self._parent.queries(batch)
        if self._k is None:
            self._k = (batch, self._draw(self.k_pos, batch))
        return self._k[1] if self._k[0] == batch else self._draw(self.k_pos, batch)

    def base_state(self, make: Callable[[], PositionState]) -> PositionState:
        """The base encoding's state over this forward's positions: ``make()`` once."""
        if self._base is None:
            self._base = make()
        return self._base

    def fresh(self) -> Draws:
        """The fresh keys' draws: the queries' (one object per forward)."""
        if self._fresh is None:
            self._fresh = Draws(self._draw, self.q_pos, self.q_pos, parent=self)
        return self._fresh


@dataclass(frozen=True, eq=False, kw_only=True)
class RandomizedState(PositionState):
    """Randomized's state of one forward: its ``draws`` (one draw per forward, every hook and
    layer sharing it) and the activations' ``dtype`` (for the base encoding's state)."""

    dtype: torch.dtype
    draws: Draws

    def new_keys(self) -> RandomizedState:
        """The state of the fresh keys: k_pos = q_pos, their draw the queries'."""
        if self.keys_are_queries:
            return self
        return replace(
            self,
            k_pos=self.q_pos,
            offset_bounds=None,
            keys_are_queries=True,
            draws=self.draws.fresh(),
        )


@register("randomized", family="randomized", paper="Ruoss et al., arXiv:2305.16843", year=2023)
class Randomized(PositionalEncoding[RandomizedState]):
    """Randomized positions: train on positions drawn from a larger range.

    Ruoss et al. 2023 (arXiv:2305.16843): so that test lengths meet positions seen in training:

    training: pos' = S[pos], S a sorted uniform random subset of {0, ..., L - 1} of size
    max(pos) + 1, drawn per batch row, each of its own row's size (L = ``max_len``, e.g. the
    longest test length);
    evaluation: pos' = pos (or sampled too, with ``sample_in_eval=True``).
    The base encoding (``base_encoding``, built with ``dim``/``head_dim``, ``max_len`` = L and
    ``base_config``) receives pos' in every hook. S is drawn once per forward through the
    position context (``prepare``; the model's ``embed`` and every layer's ``rotate`` share it,
    also when activation checkpointing recomputes a block with the same context); a hook called
    without a context draws afresh. ``seed`` gives the sampler its own counter-based noise
    (``seeded_noise``: reproducible draws, traced by ``torch.compile`` like the unseeded ones).
    Shapes: those of the base encoding's hooks (``embed`` x (B, T, C); ``rotate`` q
    (B, H, Tq, D), k (B, Hkv, Tk, D); ``bias`` (1|B, H, Tq, Tk)), positions (Tq,) | (B, Tq)
    and (Tk,) | (B, Tk) int64.
    """

    capabilities = Capabilities(embeds=True, rotates=True)  # the base's hook
    config_class = RandomizedConfig
    config: RandomizedConfig
    config_attributes = ("max_len", "sample_in_eval")  # the others describe the base encoding

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        c = self.config
        self.base: PositionalEncoding[PositionState] = build(
            c.base_encoding, **c.base_keys(info(c.base_encoding).parameters)
        )
        # a seed's draws: counter-based noise (``seeded_noise``), the counter a buffer
        self.register_buffer("draws_made", torch.zeros((), dtype=torch.long), persistent=False)

    @property
    def sampling(self) -> bool:
        """True when positions are drawn at random (training, or ``sample_in_eval``)."""
        return self.training or self.sample_in_eval

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> RandomizedState:
        """The forward's ``RandomizedState``: one draw for its positions, made on first use
        (the batch size comes with the first hook).

        Shapes: q_pos (T,) | (B, T), k_pos (L,) | (B, L) int64 (validated) -> the state.
        """
        keys = q_pos if k_pos is None else k_pos
        return RandomizedState(
            q_pos=q_pos,
            k_pos=keys,
            offset_bounds=offset_bounds,
            keys_are_queries=k_pos is None or k_pos is q_pos,
            dtype=dtype,
            draws=Draws(self.draw, q_pos, keys),
        )

    def transform(
        self, pos: Tensor, batch: int, ctx: RandomizedState | None = None, *, keys: bool = False
    ) -> Tensor:
        """Positions (T,) or (B, T) -> sampled positions (B, T) (``pos`` when not ``sampling``):
        the state's draw of its queries' (or, with ``keys``, its keys') positions, one per
        forward; without a state a fresh one (``draw(pos, batch)``).

        Raises: ValueError for negative positions or more than ``max_len`` of them (where
        their values are checked).
        """
        if ctx is None:
            pos = check_positions(pos)
        if not self.sampling:
            return pos
        if ctx is None:
            return self.draw(pos, batch)
        return ctx.draws.keys(batch) if keys else ctx.draws.queries(batch)

    def embed(self, x: Tensor, pos: Tensor, *, ctx: RandomizedState | None = None) -> Tensor:
        """The base's ``embed`` at the drawn positions.

        Shapes: x (B, T, C), pos (T,) | (B, T) -> (B, T, C).
        Raises: as ``transform`` and the base's ``embed``.
        """
        return self.base.embed(x, self.transform(pos, x.shape[0], ctx))

    def rotate(
        self,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: RandomizedState | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The base's ``rotate`` at the drawn positions (with the base's state over them, made
        once per forward, when ``ctx`` is given).

        Shapes: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq,) | (B, Tq), k_pos (Tk,) |
        (B, Tk) -> the base's rotated q and k.
        Raises: as ``transform`` and the base's ``rotate``.
        """
        if ctx is None:
            new_q = self.transform(q_pos, q.shape[0])
            new_k = new_q if k_pos is q_pos else self.transform(k_pos, k.shape[0])
            return self.base.rotate(q, k, new_q, new_k)
        fresh = ctx.keys_are_queries  # the keys' draw is the queries' (one tensor)
        new_q = self.transform(ctx.q_pos, q.shape[0], ctx)
        new_k = new_q if fresh else self.transform(ctx.k_pos, k.shape[0], ctx, keys=True)
        base_ctx = ctx.draws.base_state(
            lambda: self.base.prepare(new_q, None if fresh else new_k, dtype=ctx.dtype)
        )
        return self.base.rotate(q, k, new_q, new_k, ctx=base_ctx)

    def sample(
        self,
        batch: int,
        n: int,
        device: torch.device | None = None,
        sizes: Tensor | None = None,
    ) -> Tensor:
        """(batch, n) int64: per row a sorted uniform random n-subset of range(max_len).

        ``sizes`` (batch,) <= n: row b's first sizes[b] entries are a sorted uniform
        sizes[b]-subset instead (the rest are max_len), so each row draws its own length.
        Raises: ValueError when n > max_len (the range cannot hold n distinct positions).
        """
        self.config.check_draw(n)
        sizes = torch.full((batch,), n, device=device) if sizes is None else sizes.to(device)
        picks = torch.arange(n, device=device).expand(batch, n)  # (B, n)
        subset = self._picks(self._noise(batch, device), sizes, picks)  # (B, n)
        return subset.masked_fill(picks >= sizes[:, None], self.max_len)

    def draw(self, pos: Tensor, batch: int) -> Tensor:
        """A new draw for ``pos`` (B, T): row b's positions map to a sorted uniform random
        subset of range(max_len) of size max(pos[b]) + 1, S_b[pos]. Fixed shapes and no host
        read under ``torch.compile`` (one graph, ``fullgraph=True``), seeded or not.

        Raises: ValueError for a negative position."""
        check_nonnegative(pos)
        rows = batch_positions(pos, batch)  # (B, T)
        if not rows.numel():
            return rows.clone()
        sizes = rows.amax(dim=-1) + 1  # (B,) each row's length
        if values_checked(sizes):
            self.config.check_draw(int(sizes.max()))
        return self._picks(self._noise(batch, pos.device), sizes, rows)  # (B, T)

    def _noise(self, batch: int, device: torch.device | None) -> Tensor:
        """(B, max_len) uniform noise: its sizes[b] smallest entries of row b are the draw.
        Torch's generator without a ``seed``; with one, ``seeded_noise`` at this module's draw
        counter (torch ops only, so ``torch.compile`` traces the draw)."""
        seed = self.config.seed
        if seed is None:
            return torch.rand(batch, self.max_len, device=device)
        step = self.draws_made.clone()
        self.draws_made.add_(1)
        return seeded_noise(seed, step, batch, self.max_len).to(device)

    def _picks(self, noise: Tensor, sizes: Tensor, rows: Tensor) -> Tensor:
        """S_b[rows] (B, T): S_b the sorted set of the sizes[b] smallest-noise indices of row b,
        rows (B, T) < sizes[b]. The set is ``noise.argsort()[:, :sizes[b]]`` (x chosen where its
        rank < sizes[b]); its (r + 1)-th smallest element is the first x where the count of
        chosen <= x reaches r + 1."""
        order = noise.argsort(dim=-1)  # (B, L)
        ranks = torch.empty_like(order).scatter_(
            1, order, torch.arange(self.max_len, device=noise.device).expand_as(order)
        )  # (B, L), rank of each x
        chosen = ranks < sizes.to(noise.device)[:, None]  # (B, L)
        count = chosen.cumsum(dim=-1)  # (B, L) chosen <= x
        return torch.searchsorted(count, rows.to(noise.device) + 1).to(rows.device)  # (B, T)


#: splitmix64's constants as int64 (two's complement of the unsigned ones).
_GAMMA = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)


def _as_int64(value: int) -> int:
    """``value`` mod 2^64 as a signed int64 (two's complement)."""
    value %= 1 << 64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: Tensor, bits: int) -> Tensor:
    """z >> bits as unsigned 64-bit (torch's >> on int64 is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def seeded_noise(seed: int, step: Tensor, batch: int, length: int) -> Tensor:
    """(batch, length) float64 uniform noise in [0, 1) of (``seed``, draw ``step``, entry).

    splitmix64 (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number generators";
    Vigna's reference constants) of seed·2^32 + step·(batch·length) + entry, 53 bits per
    entry; int64 arithmetic wraps as the unsigned original does. Torch ops only: one graph under
    ``torch.compile``, the same numbers eager or compiled, on every device.
    Shapes: step () int64 -> (batch, length) float64.
    """
    entries = torch.arange(batch * length, dtype=torch.long, device=step.device)
    z = entries + step * (batch * length) + _as_int64(seed << 32)
    z = z * _GAMMA + _GAMMA
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    z = z ^ _shift_right(z, 31)
    return (_shift_right(z, 11).to(torch.float64) * 2.0**-53).view(batch, length)
