"""Randomized positional encodings (Ruoss et al. 2023, arXiv:2305.16843)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._validate import check_bool, check_nonnegative, check_positions, check_positive_int
from ..registry import register
from .base import PositionalEncoding, batch_positions
from .capabilities import Capabilities
from .context import PositionContext

#: Encodings whose positions can be drawn from a larger range (they read absolute positions).
BASES: tuple[str, ...] = ("sinusoidal", "learned", "rope")


@register("randomized", family="randomized", paper="Ruoss et al., arXiv:2305.16843", year=2023)
class Randomized(PositionalEncoding):
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
    ) -> None:
        super().__init__()
        check_positive_int(max_len, "max_len")
        check_bool(sample_in_eval, "sample_in_eval")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        if base_encoding not in BASES:
            raise ValueError(f"base_encoding must be one of {BASES}, got {base_encoding!r}")
        self.max_len, self.sample_in_eval = max_len, sample_in_eval
        self.base = _build_base(
            base_encoding, max_len=max_len, dim=dim, head_dim=head_dim, config=base_config or {}
        )
        self.generator = None if seed is None else torch.Generator().manual_seed(seed)

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
        if n > self.max_len:
            raise ValueError(
                f"randomized positions need max_len >= sequence length, got max_len="
                f"{self.max_len} for {n} positions; raise max_len (the random range)"
            )
        gen_device = None if self.generator is None else self.generator.device
        noise = torch.rand(
            batch, self.max_len, generator=self.generator, device=gen_device or device
        )  # (B, L)
        subset = noise.argsort(dim=-1)[:, :n].to(device)  # (B, n), uniform random n-subset
        if sizes is not None:  # keep each row's first sizes[b] picks: a uniform sizes[b]-subset
            keep = torch.arange(n, device=subset.device) < sizes.to(subset.device)[:, None]
            subset = subset.masked_fill(~keep, self.max_len)  # (B, n), dropped picks sort last
        return subset.sort(dim=-1).values

    def transform(
        self, pos: Tensor, batch: int, ctx: PositionContext | None = None
    ) -> Tensor:
        """Positions (T,) or (B, T) -> sampled positions (B, T) (or ``pos`` when not sampling):
        one draw per forward for the context's positions (the keys' draw is the queries' when
        they are one tensor), a fresh one otherwise."""
        if ctx is None:
            pos = check_positions(pos)
        if not self.sampling:
            return pos
        role = None if ctx is None else ctx.role(pos)
        if ctx is None or role is None:
            return self._draw(pos, batch)
        return ctx.shared(("randomized", self, role, batch), lambda: self._draw(pos, batch))

    @torch.compiler.disable
    def _draw(self, pos: Tensor, batch: int) -> Tensor:
        """A new draw for ``pos`` (B, T). Eager under ``torch.compile`` (the sampler's
        generator)."""
        check_nonnegative(pos)
        rows = batch_positions(pos, batch)  # (B, T)
        sizes = rows.amax(dim=-1) + 1 if rows.numel() else None  # (B,) each row's length
        n = int(sizes.max()) if sizes is not None else 0
        return self.sample(batch, n, pos.device, sizes).gather(1, rows)  # (B, T)

    def embed(self, x: Tensor, pos: Tensor, *, ctx: PositionContext | None = None) -> Tensor:
        return self.base.embed(x, self.transform(pos, x.shape[0], ctx))

    def rotate(
        self,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: PositionContext | None = None,
    ) -> tuple[Tensor, Tensor]:
        new_q = self.transform(q_pos, q.shape[0], ctx)
        new_k = new_q if k_pos is q_pos else self.transform(k_pos, k.shape[0], ctx)
        base_ctx = None
        if ctx is not None and None not in (roles := (ctx.role(q_pos), ctx.role(k_pos))):
            # the base's context over the drawn positions, once per forward: its tables too
            # are shared by the layers
            key = ("randomized_base", self, *roles)
            base_ctx = ctx.shared(key, lambda: PositionContext(new_q, new_k))
        return self.base.rotate(q, k, new_q, new_k, ctx=base_ctx)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, sample_in_eval={self.sample_in_eval}"


def _build_base(
    name: str, *, max_len: int, dim: int | None, head_dim: int | None, config: dict[str, Any]
) -> PositionalEncoding:
    from ..registry import build, info

    accepted = info(name).parameters
    shared = {"dim": dim, "head_dim": head_dim, "max_len": max_len}
    given = {k: v for k, v in shared.items() if k in accepted and v is not None}
    return build(name, **(given | config))

