"""Randomized positional encodings (Ruoss et al. 2023, arXiv:2305.16843)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._memo import version
from .._validate import check_bool, check_nonnegative, check_positions, check_positive_int
from ..registry import register
from .base import PositionalEncoding, batch_positions

#: Encodings whose positions can be drawn from a larger range (they read absolute positions).
BASES: tuple[str, ...] = ("sinusoidal", "learned", "rope")
#: Draws remembered, newest first: forwards whose checkpointed blocks the backward recomputes.
MEMO_DRAWS = 8


@register("randomized", family="randomized", paper="Ruoss et al., arXiv:2305.16843", year=2023)
class Randomized(PositionalEncoding):
    """Train on random positions from a larger range, so test lengths meet seen positions:

    training: pos' = S[pos], S a sorted uniform random subset of {0, ..., L - 1} of size
    max(pos) + 1, drawn per batch row, each of its own row's size (L = ``max_len``, e.g. the
    longest test length);
    evaluation: pos' = pos (or sampled too, with ``sample_in_eval=True``).
    The base encoding (``base_encoding``, built with ``dim``/``head_dim``, ``max_len`` = L and
    ``base_config``) receives pos' in every hook. A fresh S is drawn at each ``embed`` call
    (once per TinyTransformer forward) or when the position tensor changes, so all layers of one
    forward share it, also when activation checkpointing recomputes them in the backward (the
    last ``MEMO_DRAWS`` draws are kept by the positions' storage, which a detached copy shares;
    a position tensor reused by a later forward before the backward gets that forward's draw).
    ``seed`` gives the sampler its own generator (reproducible draws).
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
        self._memo: list[tuple[tuple[Any, ...], Tensor, Tensor]] = []  # newest first

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

    def transform(self, pos: Tensor, batch: int, *, fresh: bool = False) -> Tensor:
        """Positions (T,) or (B, T) -> sampled positions (B, T) (or ``pos`` when not sampling)."""
        pos = check_positions(pos)
        return self._draw(pos, batch, fresh) if self.sampling else pos

    @torch.compiler.disable
    def _draw(self, pos: Tensor, batch: int, fresh: bool) -> Tensor:
        """The memoised draw for ``pos`` (B, T), or a new one. Eager under ``torch.compile``:
        a traced memo check cannot see that a layer's positions are the ones ``embed`` drew
        for, so each layer drew its own."""
        key = _memo_key(pos, batch)
        hit = None if fresh else next((m for m in self._memo if m[0] == key), None)
        if hit is not None:
            return hit[2]
        check_nonnegative(pos)
        rows = batch_positions(pos, batch)  # (B, T)
        sizes = rows.amax(dim=-1) + 1 if rows.numel() else None  # (B,) each row's length
        n = int(sizes.max()) if sizes is not None else 0
        out = self.sample(batch, n, pos.device, sizes).gather(1, rows)  # (B, T)
        rest = [m for m in self._memo if m[0] != key]
        self._memo = [(key, pos, out), *rest[: MEMO_DRAWS - 1]]  # holding pos keeps its storage
        return out

    def clear_cache(self) -> None:
        self._memo = []

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return self.base.embed(x, self.transform(pos, x.shape[0], fresh=True))

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        new_q = self.transform(q_pos, q.shape[0])
        new_k = new_q if k_pos is q_pos else self.transform(k_pos, k.shape[0])
        return self.base.rotate(q, k, new_q, new_k)

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


def _memo_key(pos: Tensor, batch: int) -> tuple[Any, ...]:
    """The positions' data (storage, layout, version) and batch: equal for a detached copy
    (reentrant checkpointing), new after an in-place change. An inference tensor has no
    version counter (None): an in-place change to it goes unseen."""
    layout = (pos.storage_offset(), tuple(pos.shape), pos.stride(), pos.dtype, pos.device)
    return (pos.untyped_storage().data_ptr(), *layout, version(pos), batch)
