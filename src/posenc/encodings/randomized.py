"""Randomized positional encodings (Ruoss et al. 2023, arXiv:2305.16843)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._validate import check_nonnegative, check_positions, values_checked
from ..registry import build, info, register
from .base import PositionalEncoding, batch_positions
from .capabilities import Capabilities
from .configs import RandomizedConfig
from .flows import RandomizedFlow


@register("randomized", family="randomized", paper="Ruoss et al., arXiv:2305.16843", year=2023)
class Randomized(RandomizedFlow, PositionalEncoding):
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
    without a context draws afresh. ``seed`` gives the sampler its own generator (reproducible
    draws).
    Shapes: those of the base encoding's hooks (``embed`` x (B, T, C); ``rotate`` q
    (B, H, Tq, D), k (B, Hkv, Tk, D); ``bias`` (1|B, H, Tq, Tk)), positions (Tq,) | (B, Tq)
    and (Tk,) | (B, Tk) int64.
    """

    capabilities = Capabilities(embeds=True, rotates=True)  # the base's hook
    config_class = RandomizedConfig
    config: RandomizedConfig
    config_attributes = ("max_len", "sample_in_eval")  # the others describe the base encoding
    check_positions = staticmethod(check_positions)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        c = self.config
        self.base = build(c.base_encoding, **c.base_keys(info(c.base_encoding).parameters))
        self.generator = None if c.seed is None else torch.Generator().manual_seed(c.seed)

    @property
    def sampling(self) -> bool:
        """True when positions are drawn at random (training, or ``sample_in_eval``)."""
        return self.training or self.sample_in_eval

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
        read under ``torch.compile`` (one graph, ``fullgraph=True``), except the noise of a
        ``seed``'s own generator, which is drawn eagerly (a graph break: torch.compile cannot
        trace a ``torch.Generator``).

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
        """(B, max_len) uniform noise: its sizes[b] smallest entries of row b are the draw."""
        if self.generator is None:
            return torch.rand(batch, self.max_len, device=device)
        return _seeded_noise(self.generator, batch, self.max_len).to(device)

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


@torch.compiler.disable
def _seeded_noise(generator: torch.Generator, batch: int, length: int) -> Tensor:
    """(batch, length) uniform noise from ``generator`` on its device, eagerly."""
    return torch.rand(batch, length, generator=generator, device=generator.device)
