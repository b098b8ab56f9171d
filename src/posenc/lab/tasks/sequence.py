"""Decoder tasks: read a prompt, write the answer after SEP, stop with EOS.

A sample is ``prompt SEP answer EOS``; the loss and the metrics cover ``answer EOS`` only (the
prompt is masked out, as in Kazemnejad et al. 2023, arXiv:2305.19466). Exact match needs every
answer token *and* the EOS in the right place, so a model that cannot count stops wrong.
Each task's ``source`` names the paper and split it follows; the lengths are the lab's own
(trained on 1..8, evaluated up to 4x), not the split's.
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


KAZEMNEJAD = "Kazemnejad et al. 2023 (arXiv:2305.19466)"


class CopyRep(SeqTask):
    """Copy a run of one repeated symbol: Kazemnejad et al. 2023's "Copy (Repeat)", split
    ``s2s_copy/rsc_tr20_ts40`` (without its "Copy:" instruction). The answer is the prompt, so
    the only skill is stopping after exactly n symbols.

    n=4:  s7 s7 s7 s7 SEP | s7 s7 s7 s7 EOS
    """

    name = "copy_rep"
    source = f"{KAZEMNEJAD}, Copy (Repeat): s2s_copy split rsc_tr20_ts40"

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        sym = rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, 1))
        run = np.repeat(sym, n, axis=1)  # (B, n)
        return run, run


class Copy(SeqTask):
    """Copy n random symbols (drawn with replacement): Kazemnejad et al. 2023's "Copy", split
    ``s2s_copy/cmc_tr20_ts40``.

    n=4:  s2 s9 s2 s5 SEP | s2 s9 s2 s5 EOS
    """

    name = "copy"
    source = f"{KAZEMNEJAD}, Copy: s2s_copy split cmc_tr20_ts40"

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        x = rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, n))
        return x, x


class Reverse(SeqTask):
    """Write n random symbols in reverse order: Kazemnejad et al. 2023's "Reverse", split
    ``s2s_reverse/mc_tr20_ts40``.

    n=4:  s2 s9 s2 s5 SEP | s5 s2 s9 s2 EOS
    """

    name = "reverse"
    source = f"{KAZEMNEJAD}, Reverse: s2s_reverse split mc_tr20_ts40"

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        x = rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, n))
        return x, x[:, ::-1].copy()


class Sort(SeqTask):
    """Sort n distinct symbols in ascending order (needs n <= n_symbols): Kazemnejad et al.
    2023's "Sort (Single Token)", split ``s2s_sort/len_sngd_tr8_ts16`` (symbols distinct here).

    n=4:  s8 s1 s5 s3 SEP | s1 s3 s5 s8 EOS
    """

    name = "sort"
    source = f"{KAZEMNEJAD}, Sort (Single Token): s2s_sort split len_sngd_tr8_ts16"
    default_symbols = 64
    distinct = "length {n} needs {n} distinct tokens"

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        x = distinct_symbols(rng, batch, n, self.n_symbols)
        return x, np.sort(x, axis=1)


class Ascending(SeqTask):
    """Are n symbols in ascending (non-decreasing) order? A causal decoder reads them and
    answers one token, YES or NO, after SEP. Negatives are hard: a sorted row with one adjacent
    pair of different symbols swapped (chosen uniformly), so a single local comparison decides
    and the whole row must be checked; each batch holds the two classes in equal numbers (one
    more YES when odd). Symbols repeat (10 by default, as digits): an order over 10 symbols is
    learned in hundreds of steps, one over 64 distinct symbols takes thousands.
    posenc's own task (no published split); the one-token decoder formulation is that of
    sortedness probes such as ARENA's "Sorted List" problem (2023). The encoder form with easy
    negatives is ``ascending_encoder``.

    n=4:  s1 s3 s3 s8 SEP | YES EOS;   s1 s3 s8 s3 SEP | NO EOS
    """

    name = "ascending"
    source = "posenc's own (no published split): decoder, one answer token, one adjacent swap"
    min_len = 2

    @property
    def vocab_size(self) -> int:
        return FIRST + self.n_symbols + 2  # symbols, NO, YES

    @property
    def answers(self) -> tuple[int, int]:
        """Token ids of the answers (NO, YES), after the symbols."""
        return FIRST + self.n_symbols, FIRST + self.n_symbols + 1

    @property
    def chance(self) -> float:
        return 0.5

    def check_length(self, n: int) -> None:
        super().check_length(n)
        if self.n_symbols < 2:
            raise ValueError(f"{self.name}: an unsorted row needs 2 symbols, got n_symbols = 1")

    def seq_len(self, n: int) -> int:
        return n + 3  # n symbols, SEP, the answer, EOS

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        labels = rng.permutation(np.arange(1, batch + 1) % 2)  # balanced: 1 = sorted
        x = self._sorted_rows(rng, batch, n)  # (B, n)
        neg = np.flatnonzero(labels == 0)
        while len(flat := neg[(np.diff(x[neg], axis=1) == 0).all(axis=1)]):
            x[flat] = self._sorted_rows(rng, len(flat), n)  # one symbol only: nothing to swap
        ascents = np.diff(x[neg], axis=1) > 0  # (B_neg, n - 1): pairs that a swap unsorts
        at = np.where(ascents, rng.random(ascents.shape), -1.0).argmax(axis=1)  # uniform
        x[neg, at], x[neg, at + 1] = x[neg, at + 1], x[neg, at].copy()
        return x, (self.answers[0] + labels)[:, None]  # (B, n), (B, 1)

    def _sorted_rows(self, rng: np.random.Generator, batch: int, n: int) -> np.ndarray:
        """(batch, n) sorted rows of symbols drawn with replacement."""
        return np.sort(rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, n)), axis=1)


class Addition(SeqTask):
    """Add two n-digit numbers written least-significant digit first; the answer has n + 1
    digits, also reversed (the carry runs left to right, as generation does). The task of
    Kazemnejad et al. 2023's "Addition", split ``s2s_addition/len_tr8_ts16``, without a
    scratchpad; the reversed digits are posenc's.

    n=3, 572 + 465 = 1037:  d2 d7 d5 + d5 d6 d4 SEP | d7 d3 d0 d1 EOS
    """

    name = "addition"
    source = f"{KAZEMNEJAD}, Addition: s2s_addition split len_tr8_ts16 (digits reversed here)"
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
    """Is the number of ones in n bits odd? The answer is one bit: Kazemnejad et al. 2023's
    "Parity", split ``s2s_parity/len_tr8_ts16``, without a scratchpad.

    n=5:  b1 b0 b1 b1 b0 SEP | b1 EOS
    """

    name = "parity"
    source = f"{KAZEMNEJAD}, Parity: s2s_parity split len_tr8_ts16"
    default_symbols = 2
    fixed_symbols = "inputs are bits"

    @property
    def chance(self) -> float:
        return 0.5

    def seq_len(self, n: int) -> int:
        return n + 3  # n bits, SEP, one bit, EOS

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        bits = rng.integers(0, 2, size=(batch, n))
        return bits + FIRST, bits.sum(axis=1, keepdims=True) % 2 + FIRST


class Induction(SeqTask):
    """Associative recall: n key-value pairs with distinct keys, then a query key; answer its
    value. Keys are symbols 0..n_symbols-1, values the next n_symbols ids (needs n <= n_symbols).
    The associative recall task of Ba et al. 2016 (arXiv:1610.06258) and Fu et al. 2023 (H3,
    arXiv:2212.14052), one query; no length-generalisation split of theirs.

    n=3:  k4 v1 k0 v7 k2 v1 k0 SEP | v7 EOS
    """

    name = "induction"
    source = "associative recall (Ba et al. 2016; Fu et al. 2023), one query; posenc's lengths"
    default_symbols = 64
    distinct = "{n} pairs need {n} distinct keys"

    @property
    def vocab_size(self) -> int:
        return FIRST + 2 * self.n_symbols

    @property
    def chance(self) -> float:
        return 1.0 / self.n_symbols  # values drawn uniformly

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
