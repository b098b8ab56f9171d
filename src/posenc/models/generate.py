"""Token generation with a KV cache: greedy or sampled (temperature, top-k, top-p) next tokens,
rows that stop at an end token, left-padded batches, a ``torch.Generator`` for reproducible
draws, and a progress bar when generation is long.

``TinyTransformer.generate`` and ``EncoderDecoder.generate`` run ``decode_loop`` with their
own first logits and step; each new token of row b sits at the position after the row's last
(left padding does not shift positions, ``positions_from_padding``).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypedDict

import torch
from torch import Tensor

from .._validate import check_bool, check_positive_float, check_positive_int

#: ``progress=None`` shows a bar (on a terminal) from this many new tokens on.
PROGRESS_MIN_TOKENS = 256

#: step(tokens (B, 1), positions (B, 1)) -> next-token logits (B, V), through the KV cache.
Step = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """How the next token is chosen from logits z (B, V), in Hugging Face's order:

    z / ``temperature``, then -inf outside the ``top_k`` largest (Fan et al. 2018), then outside
    the smallest set of most probable tokens whose probability reaches ``top_p`` (nucleus
    sampling, Holtzman et al. 2020), then one draw from the softmax. ``temperature=0`` (the
    default) is greedy: argmax z, the limit of T -> 0, which lies inside every top-k and top-p
    set (so those two change nothing there).

    Raises: TypeError/ValueError for a temperature that is not a finite number >= 0, a top_k
    not an int >= 1, or a top_p outside (0, 1].
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float):
            raise TypeError(f"temperature must be a number, got {type(t).__name__}")
        if not (math.isfinite(t) and t >= 0):
            raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {t}")
        if self.top_k is not None:
            check_positive_int(self.top_k, "top_k")
        if self.top_p is not None:
            check_positive_float(self.top_p, "top_p", upper=1)

    @property
    def greedy(self) -> bool:
        """Whether sampling is greedy (temperature 0: the argmax token)."""
        return self.temperature == 0

    def filter(self, logits: Tensor) -> Tensor:
        """Logits (B, V) divided by the temperature, -inf outside the top-k and top-p sets, in
        float32 or wider. Greedy: the logits unchanged (argmax needs no filter)."""
        z = logits.to(torch.promote_types(logits.dtype, torch.float32))
        if self.greedy:
            return z
        z = z / self.temperature
        if self.top_k is not None and self.top_k < z.shape[-1]:
            kth = z.topk(self.top_k, dim=-1).values[..., -1:]  # (B, 1)
            z = z.masked_fill(z < kth, float("-inf"))
        if self.top_p is not None and self.top_p < 1.0:
            sorted_z, order = z.sort(dim=-1, descending=True)
            probs = sorted_z.softmax(dim=-1)
            before = probs.cumsum(dim=-1) - probs  # mass of the more probable tokens
            drop_sorted = before >= self.top_p  # (the most probable is always kept)
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            z = z.masked_fill(drop, float("-inf"))
        return z

    def choose(self, logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """The next token of each row (B,) int64 from logits (B, V): argmax, or one draw per
        row from softmax(``filter(logits)``) with ``generator``."""
        z = self.filter(logits)
        if self.greedy:
            return z.argmax(dim=-1)
        return torch.multinomial(z.softmax(dim=-1), 1, generator=generator)[:, 0]


def check_options(
    max_new_tokens: int, end_token: int | None, pad_token: int, progress: bool | None
) -> None:
    """Raise TypeError/ValueError for a ``max_new_tokens`` not an int >= 1, token ids that are
    not ints >= 0 or a ``progress`` that is not a bool or None."""
    check_positive_int(max_new_tokens, "max_new_tokens")
    if end_token is not None:
        check_positive_int(end_token, "end_token", minimum=0)
    check_positive_int(pad_token, "pad_token", minimum=0)
    if progress is not None:
        check_bool(progress, "progress")


class DecodeOptions(TypedDict, total=False):
    """``generate``'s options after ``max_new_tokens`` (``Decoding``'s fields)."""

    temperature: float
    top_k: int | None
    top_p: float | None
    end_token: int | None
    pad_token: int
    generator: torch.Generator | None
    progress: bool | None


@dataclass(frozen=True, kw_only=True)
class Decoding(Sampling):
    """``Sampling`` plus how long and how rows stop: the options of both models' ``generate``,
    checked on creation (``check_options``), run by ``run`` (``decode_loop``)."""

    max_new_tokens: int
    end_token: int | None = None
    pad_token: int = 0
    generator: torch.Generator | None = None
    progress: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_options(self.max_new_tokens, self.end_token, self.pad_token, self.progress)

    def run(self, first: Tensor, step: Step, start: Tensor) -> Tensor:
        """``decode_loop`` of ``first`` (B, V) through ``step`` from positions ``start`` (B,)."""
        return decode_loop(
            first,
            step,
            start,
            max_new_tokens=self.max_new_tokens,
            sampling=self,
            end_token=self.end_token,
            pad_token=self.pad_token,
            generator=self.generator,
            progress=self.progress,
        )


def check_token_ids(idx: Tensor, what: str) -> None:
    """Raise unless ``idx`` is an integer tensor (B, T) with T >= 1."""
    if not isinstance(idx, Tensor):
        raise TypeError(f"{what} must be a torch.Tensor (B, T) of token ids, got {type(idx)}")
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise TypeError(f"{what} must be an integer tensor of token ids, got {idx.dtype}")
    if idx.ndim != 2 or idx.shape[1] < 1:
        raise ValueError(f"{what} must have shape (B, T) with T >= 1, got {tuple(idx.shape)}")


def decode_loop(
    first: Tensor,
    step: Step,
    start: Tensor,
    *,
    max_new_tokens: int,
    sampling: Sampling,
    end_token: int | None = None,
    pad_token: int = 0,
    generator: torch.Generator | None = None,
    progress: bool | None = None,
) -> Tensor:
    """Up to ``max_new_tokens`` tokens (B, N) from next-token logits ``first`` (B, V), each fed
    back through ``step`` at its row's next position (``start`` (B,) int64: the first new
    token's). A row that emits ``end_token`` is finished: its later entries are ``pad_token``
    (and it is fed ``pad_token``, whose logits are ignored); generation stops when every row
    has finished, so N < ``max_new_tokens`` then. ``progress``: a rich bar on stderr (None: on a
    terminal, from ``PROGRESS_MIN_TOKENS`` tokens on).

    Raises: ValueError for an ``end_token`` or ``pad_token`` outside the vocabulary (B, V).
    """
    V = first.shape[-1]
    for what, given in (("end_token", end_token), ("pad_token", pad_token)):
        if given is not None and given >= V:
            raise ValueError(f"{what} must be a token id < vocab size {V}, got {given}")
    B = first.shape[0]
    finished = torch.zeros(B, dtype=torch.bool, device=first.device)
    logits, out = first, []
    with _bar(max_new_tokens, progress) as advance:
        for i in range(max_new_tokens):
            token = sampling.choose(logits, generator).masked_fill(finished, pad_token)  # (B,)
            out.append(token)
            advance()
            if end_token is not None:
                finished = finished | (token == end_token)
                if bool(finished.all()):
                    break
            if i + 1 < max_new_tokens:
                logits = step(token[:, None], (start + i)[:, None])  # (B, V)
    return torch.stack(out, dim=1)  # (B, N)


@contextmanager
def _bar(total: int, progress: bool | None) -> Iterator[Callable[[], None]]:
    """A function advancing a rich progress bar on stderr by one token, or doing nothing."""
    show = total >= PROGRESS_MIN_TOKENS and sys.stderr.isatty() if progress is None else progress
    if show and importlib.util.find_spec("rich") is None:  # rich comes with posenc[lab]
        if progress:
            raise ValueError("progress=True needs rich: pip install 'posenc[lab]' (or rich)")
        show = False
    if not show:
        yield lambda: None
        return
    from rich import progress as rp
    from rich.console import Console

    bar = rp.Progress(
        rp.TextColumn("generating"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task("tokens", total=total)
        yield lambda: bar.advance(task)
