"""What every lab task shares: the token layout, length checks and the ``Batch`` it returns.

Token ids: 0 = SEP (prompt/answer separator), 1 = EOS (end of answer), 2 = MARK (a marked
position), then task symbols from ``FIRST`` on. A *length* n is the size of the task's input
(items to copy, digits per operand, key-value pairs); ``seq_len(n)`` is the tokens it takes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

SEP, EOS, MARK, FIRST = 0, 1, 2, 3
Kind = Literal["decoder", "classify", "lm"]
Split = Literal["train", "eval"]
#: Evaluation lengths as multiples of the longest training length (1x, 1.5x, 2x, 4x).
EVAL_FACTORS: tuple[float, ...] = (1.0, 1.5, 2.0, 4.0)


@dataclass(frozen=True)
class Batch:
    """tokens (B, T) int64. Decoder tasks: prompt, SEP, answer, EOS with the answer span starting
    at ``n_prompt``. Classification: the input and ``labels`` (B,). LM: a text window."""

    tokens: np.ndarray
    n_prompt: int = 0
    labels: np.ndarray | None = None


class Task(ABC):
    """A seeded generator of samples of a given length, with its vocabulary and checks.

    Args:
        train_len: (min, max) input lengths drawn uniformly during training (default
            ``default_train_len``: (min_len, 8); (64, 64) for ``lm``).
        eval_lens: evaluation lengths (a repeat is measured once); default ``EVAL_FACTORS``
            times the longest training one.
        n_symbols: task symbols in the vocabulary (default per task).
    Raises: ValueError for lengths or vocabularies the task cannot produce.
    """

    name: ClassVar[str]
    kind: ClassVar[Kind] = "decoder"
    #: The paper and split the task follows, or what it is when it follows none.
    source: ClassVar[str]
    min_len: ClassVar[int] = 1
    default_symbols: ClassVar[int] = 10
    eval_factors: ClassVar[tuple[float, ...]] = EVAL_FACTORS
    fixed_symbols: ClassVar[str] = ""  # why n_symbols must equal default_symbols, if it must
    distinct: ClassVar[str] = ""  # why n <= n_symbols, if so: "{n} pairs need {n} distinct keys"
    #: Position axes of a sample: 1 for a sequence, 2 for a grid (``grid``: its rows, columns).
    axes: ClassVar[int] = 1
    #: What a classifier's head reads: the mean of the features, or those of the MARK token.
    readout: ClassVar[Literal["mean", "mark"]] = "mean"

    @property
    def default_train_len(self) -> tuple[int, int]:
        return (self.min_len, 8)

    def __init__(
        self,
        *,
        train_len: tuple[int, int] | None = None,
        eval_lens: tuple[int, ...] | None = None,
        n_symbols: int | None = None,
    ) -> None:
        self.n_symbols = self.default_symbols if n_symbols is None else n_symbols
        if not _is_int(self.n_symbols) or self.n_symbols < 1:
            raise ValueError(f"{self.name}: n_symbols must be an int >= 1, got {n_symbols!r}")
        if train_len is None:
            train_len = self.default_train_len
        lo, hi = _check_train_len(self.name, train_len, self.min_len)
        self.train_len = (lo, hi)
        if eval_lens is not None and len(eval_lens) == 0:  # () would mean the defaults, silently
            raise ValueError(f"{self.name}: eval_lens must name at least one length, got ()")
        if eval_lens is None:
            eval_lens = tuple(sorted({max(1, round(f * hi)) for f in self.eval_factors}))
        # one metric row per (length, name): a repeated length would break the store's key
        self.eval_lens = tuple(dict.fromkeys(eval_lens))
        for n in (*range(lo, hi + 1), *self.eval_lens):
            self.check_length(n)
        if self.fixed_symbols and self.n_symbols != self.default_symbols:
            raise ValueError(
                f"{self.name}: {self.fixed_symbols}, n_symbols must be {self.default_symbols}, "
                f"got {self.n_symbols}"
            )

    @property
    def vocab_size(self) -> int:
        return FIRST + self.n_symbols

    @property
    def n_classes(self) -> int:
        """Output classes of a classification task (0 for generative tasks)."""
        return 0

    @property
    def chance(self) -> float | None:
        """Exact match of a model that knows the answer format and guesses uniformly among few
        answers (None where guessing is hopeless: answers of many tokens, LM loss)."""
        return None

    @property
    def max_seq_len(self) -> int:
        """Tokens in the longest sample, training or evaluation (what a model must cover)."""
        return max(self.seq_len(n) for n in (*self.eval_lens, self.train_len[1]))

    def check_length(self, n: int) -> None:
        """Raise ValueError if the task cannot make a sample of length ``n``."""
        if not _is_int(n) or n < self.min_len:
            raise ValueError(f"{self.name}: lengths must be ints >= {self.min_len}, got {n!r}")
        if self.distinct and n > self.n_symbols:
            need = self.distinct.format(n=n)
            raise ValueError(f"{self.name}: {need} but n_symbols is {self.n_symbols}")

    def seq_len(self, n: int) -> int:
        """Tokens in a sample of length ``n`` (default: one per item)."""
        return n

    def grid(self, seq_len: int) -> tuple[int, ...]:
        """The grid (rows, columns) of a sample of ``seq_len`` tokens (tasks with ``axes`` > 1).
        Raises ValueError: a sequence task's samples are no grid."""
        raise ValueError(f"{self.name}: a sequence task, its samples are no grid")

    def sample(self, rng: np.random.Generator, batch: int, n: int, split: Split = "train") -> Batch:
        """``batch`` samples of length ``n`` drawn from ``rng``."""
        self.check_length(n)
        return self._sample(rng, batch, n, split)

    @abstractmethod
    def _sample(self, rng: np.random.Generator, batch: int, n: int, split: Split) -> Batch: ...


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # True would count as 1


def _check_train_len(name: str, train_len: tuple[int, int], min_len: int) -> tuple[int, int]:
    pair = isinstance(train_len, tuple | list) and len(train_len) == 2
    if not (pair and all(map(_is_int, train_len))):
        raise ValueError(f"{name}: train_len must be (min, max) ints, got {train_len!r}")
    lo, hi = train_len
    if not min_len <= lo <= hi:
        raise ValueError(f"{name}: train_len must satisfy {min_len} <= min <= max, got {train_len}")
    return lo, hi


def distinct_symbols(rng: np.random.Generator, batch: int, n: int, n_symbols: int) -> np.ndarray:
    """(B, n) rows of n distinct symbol ids, each row a uniform draw without replacement."""
    return np.argsort(rng.random((batch, n_symbols)), axis=1)[:, :n] + FIRST
