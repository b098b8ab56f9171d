"""Passkey retrieval: find the one marked value in a haystack of random symbols."""

from __future__ import annotations

import numpy as np

from .base import FIRST, MARK
from .sequence import Pair, SeqTask


class Passkey(SeqTask):
    """Passkey retrieval, one needle: n haystack tokens holding ``MARK v`` at a uniform place
    among random symbols; the answer is v. The passkey test of Mohtashami & Jaggi 2023
    (arXiv:2305.16300), as the length-extension papers use it (Chen et al. 2023, Peng et al.
    2023), with random symbols for its repeated filler sentences and one token for its
    five-digit key. Finding the mark is content matching at any distance; reading the token
    after it is a distance of one: the split that per-layer schedules such as iRoPE and
    RNoPE-SWA make between global NoPE layers and local RoPE layers.

    n=6:  s3 s9 MARK s4 s1 s3 SEP | s4 EOS
    """

    name = "passkey"
    source = "Mohtashami & Jaggi 2023 (arXiv:2305.16300), one key of one token; posenc's lengths"
    min_len = 2  # the mark and its value
    default_symbols = 16

    @property
    def chance(self) -> float:
        return 1.0 / self.n_symbols  # values drawn uniformly

    def seq_len(self, n: int) -> int:
        return n + 3  # n haystack tokens, SEP, the value, EOS

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        hay = rng.integers(FIRST, FIRST + self.n_symbols, size=(batch, n))  # (B, n)
        at = rng.integers(0, n - 1, size=batch)  # (B,) the mark's place, its value after it
        rows = np.arange(batch)
        hay[rows, at] = MARK
        return hay, hay[rows, at + 1][:, None]  # (B, n), (B, 1)
