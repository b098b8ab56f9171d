"""Randomized positional encodings (Ruoss et al. 2023, arXiv:2305.16843)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._validate import check_nonnegative, check_positions
from ..registry import build, info, register
from .base import PositionalEncoding, batch_positions
from .capabilities import Capabilities
from .configs import RandomizedConfig
from .flows import RandomizedFlow


@register("randomized", family="randomized", paper="Ruoss et al., arXiv:2305.16843", year=2023)
class Randomized(RandomizedFlow, PositionalEncoding):
    """Train on random positions from a larger range, so test lengths meet seen positions:

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
        gen_device = None if self.generator is None else self.generator.device
        noise = torch.rand(
            batch, self.max_len, generator=self.generator, device=gen_device or device
        )  # (B, L)
        subset = noise.argsort(dim=-1)[:, :n].to(device)  # (B, n), uniform random n-subset
        if sizes is not None:  # keep each row's first sizes[b] picks: a uniform sizes[b]-subset
            keep = torch.arange(n, device=subset.device) < sizes.to(subset.device)[:, None]
            subset = subset.masked_fill(~keep, self.max_len)  # (B, n), dropped picks sort last
        return subset.sort(dim=-1).values

    @torch.compiler.disable
    def draw(self, pos: Tensor, batch: int) -> Tensor:
        """A new draw for ``pos`` (B, T). Eager under ``torch.compile`` (the sampler's
        generator)."""
        check_nonnegative(pos)
        rows = batch_positions(pos, batch)  # (B, T)
        sizes = rows.amax(dim=-1) + 1 if rows.numel() else None  # (B,) each row's length
        n = int(sizes.max()) if sizes is not None else 0
        return self.sample(batch, n, pos.device, sizes).gather(1, rows)  # (B, T)
