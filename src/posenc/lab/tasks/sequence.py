"""Decoder tasks: read a prompt, write the answer after SEP, stop with EOS.

A sample is ``prompt SEP answer EOS``; the loss and the metrics cover ``answer EOS`` only (the
prompt is masked out, as in Kazemnejad et al. 2023, arXiv:2305.19466). Exact match needs every
answer token *and* the EOS in the right place, so a model that cannot count stops wrong.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .base import EOS, FIRST, SEP, Batch, Split, Task, distinct_symbols

Pair = tuple[np.ndarray, np.ndarray]


class SeqTask(Task):
    """Prompt-answer task; subclasses define ``prompt_answer`` (and ``seq_len`` unless prompt
    and answer are n symbols each)."""

    def seq_len(self, n: int) -> int:
        return 2 * n + 2  # prompt, SEP, answer, EOS

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        """Prompt (B, P) and answer (B, A) symbol ids."""
        raise NotImplementedError

    def _sample(self, rng: np.random.Generator, batch: int, n: int, split: Split) -> Batch:
        prompt, answer = self.prompt_answer(rng, batch, n)  # (B, P), (B, A)
        sep = np.full((batch, 1), SEP)
        eos = np.full((batch, 1), EOS)
        tokens = np.concatenate([prompt, sep, answer, eos], axis=1).astype(np.int64)
        return Batch(tokens, n_prompt=prompt.shape[1] + 1)


class CopyRep(SeqTask):
    """Copy a run of one repeated symbol (Kazemnejad et al.'s "rsc" split): the answer is the
    prompt, so the only skill is stopping after exactly n symbols.

    n=4:  s7 s7 s7 s7 SEP | s7 s7 s7 s7 EOS
    """

    name = "copy_rep"

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        sym = rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, 1))
        run = np.repeat(sym, n, axis=1)  # (B, n)
        return run, run


class Copy(SeqTask):
    """Copy n random symbols (drawn with replacement).

    n=4:  s2 s9 s2 s5 SEP | s2 s9 s2 s5 EOS
    """

    name = "copy"

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        x = rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, n))
        return x, x


class Reverse(SeqTask):
    """Write n random symbols in reverse order.

    n=4:  s2 s9 s2 s5 SEP | s5 s2 s9 s2 EOS
    """

    name = "reverse"

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        x = rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, n))
        return x, x[:, ::-1].copy()


class Sort(SeqTask):
    """Sort n distinct symbols in ascending order (needs n <= n_symbols).

    n=4:  s8 s1 s5 s3 SEP | s1 s3 s5 s8 EOS
    """

    name = "sort"
    default_symbols = 64
    distinct = "length {n} needs {n} distinct tokens"

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        x = distinct_symbols(rng, batch, n, self.n_symbols)
        return x, np.sort(x, axis=1)


class Addition(SeqTask):
    """Add two n-digit numbers written least-significant digit first; the answer has n + 1
    digits, also reversed (the carry runs left to right, as generation does).

    n=3, 572 + 465 = 1037:  d2 d7 d5 + d5 d6 d4 SEP | d7 d3 d0 d1 EOS
    """

    name = "addition"
    default_symbols = 10
    fixed_symbols = "digits are base 10"
    plus: ClassVar[int] = FIRST + 10

    @property
    def vocab_size(self) -> int:
        return FIRST + 11  # ten digits and "+"

    def seq_len(self, n: int) -> int:
        return 3 * n + 4  # 2n + 1 prompt, SEP, n + 1 answer, EOS

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        a, b = rng.integers(0, 10, size=(2, batch, n))  # digits, least significant first
        total = [x + y for x, y in zip(_digits_value(a), _digits_value(b), strict=True)]
        answer = np.array([[(t // 10**i) % 10 for i in range(n + 1)] for t in total])
        prompt = np.concatenate([a, np.full((batch, 1), self.plus - FIRST), b], axis=1)
        return prompt + FIRST, answer.reshape(batch, n + 1) + FIRST


def _digits_value(d: np.ndarray) -> list[int]:
    """Reversed digit rows (B, n) -> integer values, exact for any n."""
    return [sum(int(x) * 10**i for i, x in enumerate(row)) for row in d]


class Parity(SeqTask):
    """Is the number of ones in n bits odd? The answer is one bit.

    n=5:  b1 b0 b1 b1 b0 SEP | b1 EOS
    """

    name = "parity"
    default_symbols = 2
    fixed_symbols = "inputs are bits"

    def seq_len(self, n: int) -> int:
        return n + 3  # n bits, SEP, one bit, EOS

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        bits = rng.integers(0, 2, size=(batch, n))
        return bits + FIRST, bits.sum(axis=1, keepdims=True) % 2 + FIRST


class Induction(SeqTask):
    """Associative recall: n key-value pairs with distinct keys, then a query key; answer its
    value. Keys are symbols 0..n_symbols-1, values the next n_symbols ids (needs n <= n_symbols).

    n=3:  k4 v1 k0 v7 k2 v1 k0 SEP | v7 EOS
    """

    name = "induction"
    default_symbols = 64
    distinct = "{n} pairs need {n} distinct keys"

    @property
    def vocab_size(self) -> int:
        return FIRST + 2 * self.n_symbols

    def seq_len(self, n: int) -> int:
        return 2 * n + 4  # 2n + 1 prompt, SEP, one value, EOS

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        keys = distinct_symbols(rng, batch, n, self.n_symbols)  # (B, n)
        values = rng.integers(0, self.n_symbols, size=(batch, n)) + FIRST + self.n_symbols
        pairs = np.stack([keys, values], axis=2).reshape(batch, 2 * n)  # k1 v1 k2 v2 ...
        q = rng.integers(0, n, size=batch)
        rows = np.arange(batch)
        prompt = np.concatenate([pairs, keys[rows, q][:, None]], axis=1)
        return prompt, values[rows, q][:, None]
