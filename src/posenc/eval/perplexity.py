"""Perplexity of a causal LM by window length and by position inside the window.

For each length L the text's tokens are read in sliding windows of L tokens, a window starting
every ``stride`` tokens (the transformers "perplexity of fixed-length models" recipe). Two
readouts per length:

- ``loss`` / ``ppl``: the recipe's, each token scored once, in the latest window that reaches
  it (its first ``L - stride`` tokens are context only): exp of the mean next-token NLL;
- ``buckets``: the mean NLL of every prediction of every window by the position of the
  predicting token in its window, in buckets of positions 0..L-2: the curve that shows where
  a model (or a context-extension method) breaks down, as in Press et al. 2022
  (arXiv:2108.12409, ALiBi) and the lab's ``lm`` task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._validate import check_positive_int
from .models import as_causal_lm
from .progress import progress_bar


@dataclass(frozen=True)
class Bucket:
    """Mean next-token NLL of the predictions made at window positions start..end-1."""

    start: int
    end: int
    loss: float
    count: int


@dataclass(frozen=True)
class LengthResult:
    """One window length: the recipe's ``loss`` (mean NLL, nats) and ``ppl`` over ``tokens``
    scored tokens in ``windows`` windows, and the loss by position ``buckets``."""

    length: int
    stride: int
    windows: int
    tokens: int
    loss: float
    ppl: float
    buckets: list[Bucket]


@dataclass(frozen=True)
class PerplexityResult:
    """Per length, in the order asked; ``model`` names what was evaluated."""

    model: str
    text_tokens: int
    lengths: list[LengthResult]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "perplexity", **asdict(self)}


def perplexity(
    model: Any,
    tokens: Any,
    *,
    lengths: Sequence[int],
    stride: int | None = None,
    buckets: int | Sequence[int] = 8,
    max_windows: int | None = None,
    progress: bool | None = None,
) -> PerplexityResult:
    """Loss and perplexity of ``model`` on ``tokens`` at each window length, and its loss by
    position inside the window.

    ``model``: a transformers causal LM, ``TinyTransformer``, lab model or ``CausalLM``.
    ``tokens``: token ids (N,) (list, array or tensor). ``stride``: tokens between window
    starts (default: the length, disjoint windows); the same for every length.
    ``buckets``: a count of equal-width position buckets over 0..L-1, or bucket edges
    (increasing, starting at 0; the last bucket ends at L - 1). ``max_windows``: at most this
    many windows per length (the first ones). ``progress``: on stderr, a bar on a terminal and
    a line per window elsewhere (default), or nothing (False).
    Raises: ValueError for a length < 2 or longer than the text, a stride not in 1..L, bad
    buckets; TypeError for float tokens.
    """
    lm = as_causal_lm(model)
    ids = _tokens(tokens)
    for L in lengths:
        check_positive_int(L, "length", minimum=2)
        if L > ids.numel():
            raise ValueError(f"length {L} is longer than the text ({ids.numel()} tokens)")
    plans = {
        L: _windows(ids.numel(), L, L if stride is None else stride, max_windows) for L in lengths
    }
    total = sum(len(p) for p in plans.values())
    results = []
    with progress_bar(total, "perplexity", progress) as step:
        for L in lengths:
            edges = _edges(buckets, L)
            nll_sum, scored, sums, counts = (
                0.0,
                0,
                np.zeros(len(edges) - 1),
                np.zeros(len(edges) - 1),
            )
            for begin, end, first_scored in plans[L]:
                nll = _nll(lm, ids[begin:end])  # (end - begin - 1,): position p predicts p + 1
                nll_sum += float(nll[first_scored - 1 :].sum())
                scored += nll.numel() - (first_scored - 1)
                which = np.searchsorted(edges, np.arange(nll.numel()), side="right") - 1
                np.add.at(sums, which, nll.numpy())
                np.add.at(counts, which, 1)
                step(f"perplexity at length {L}")
            rows = [
                Bucket(int(a), int(b), float(s / c) if c else float("nan"), int(c))
                for a, b, s, c in zip(edges[:-1], edges[1:], sums, counts, strict=True)
            ]
            loss = nll_sum / scored
            s = L if stride is None else stride
            results.append(
                LengthResult(L, s, len(plans[L]), scored, loss, float(np.exp(loss)), rows)
            )
    return PerplexityResult(lm.name, int(ids.numel()), results)


def _tokens(tokens: Any) -> torch.Tensor:
    ids = torch.as_tensor(tokens)
    if ids.numel() == 0:  # [] is a float32 tensor: say what is wrong, not its dtype
        raise ValueError("tokens must hold at least 2 token ids, got none (an empty text?)")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"tokens must be integer token ids, got {ids.dtype}")
    if ids.ndim != 1:
        raise ValueError(f"tokens must be one sequence (N,), got shape {tuple(ids.shape)}")
    return ids.long()


def _windows(n: int, L: int, stride: int, max_windows: int | None) -> list[tuple[int, int, int]]:
    """(begin, end, first scored target index in the window) of each window, as the
    transformers recipe walks them: a window every ``stride`` tokens, until one reaches the end."""
    check_positive_int(stride, "stride")
    if stride > L:
        raise ValueError(f"stride must be <= the length {L} (no token skipped), got {stride}")
    if max_windows is not None:
        check_positive_int(max_windows, "max_windows")
    plan, prev_end = [], 0
    for begin in range(0, n, stride):
        end = min(begin + L, n)
        plan.append((begin, end, max(1, end - begin - (end - prev_end))))
        prev_end = end
        if end == n or (max_windows is not None and len(plan) == max_windows):
            break
    return plan


def _edges(buckets: int | Sequence[int], L: int) -> np.ndarray:
    """Bucket edges over prediction positions 0..L-2 (the last edge is L - 1)."""
    if isinstance(buckets, int):
        check_positive_int(buckets, "buckets")  # (True is refused there)
        return np.unique(np.linspace(0, L - 1, min(buckets, L - 1) + 1).round().astype(int))
    given = [int(b) for b in buckets]
    edges = np.array([*given, L - 1], dtype=np.int64)
    if edges[0] != 0 or np.any(np.diff(edges) <= 0):
        raise ValueError(
            f"bucket edges must increase from 0 and stay below the length {L} - 1, got {given}"
        )
    return edges


def _nll(lm: Any, window: torch.Tensor) -> torch.Tensor:
    """Next-token NLL (T-1,) in float32 on CPU of one window (T,) of token ids."""
    logits = lm.logits(window[None])[0, :-1].float()  # (T-1, V)
    return F.cross_entropy(logits, window[1:].to(logits.device), reduction="none").cpu()
