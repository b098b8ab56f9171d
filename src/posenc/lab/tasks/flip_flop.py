"""Flip-flop language modelling: remember the last written bit across distractors."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .base import FIRST
from .sequence import Pair, SeqTask


class FlipFlop(SeqTask):
    """Flip-flop: Liu et al. 2023's FFL(p) (arXiv:2306.00946), one read asked after SEP.

    A sample is n instructions, each followed by a bit: ``w b`` writes b, ``i b`` is a
    distractor to ignore, ``r b`` reads, and b must equal the bit of the latest ``w``. The first
    instruction is ``w``; the others are ``i`` with probability ``p_ignore`` and ``w`` or ``r``
    with (1 - p_ignore)/2 each (FFL(0.8) is the paper's default). Reads inside the prompt carry
    the right bit. The last instruction is a read whose bit is the answer, so the model has to
    track one bit of state over the distractors since the last write: the state-tracking
    probe PaTH attention (Yang et al. 2025, arXiv:2505.16381) is shown to solve and RoPE
    attention to fail out of distribution. Here "out of distribution" is the lab's axis:
    longer samples (more instructions, positions past training) from the same FFL(p); the
    paper's sparse and dense test sets change ``p_ignore`` instead.

    n=4:  w b1 i b0 r b1 r SEP | b1 EOS
    """

    name = "flip_flop"
    source = "Liu et al. 2023 (arXiv:2306.00946), FFL(0.8): one final read; posenc's lengths"
    min_len = 2  # a write and the read
    default_symbols = 5  # w, i, r, 0, 1
    fixed_symbols = "the alphabet is w, i, r and the bits 0, 1"
    write: ClassVar[int] = FIRST
    ignore: ClassVar[int] = FIRST + 1
    read: ClassVar[int] = FIRST + 2
    bits: ClassVar[tuple[int, int]] = (FIRST + 3, FIRST + 4)

    def __init__(
        self,
        *,
        train_len: tuple[int, int] | None = None,
        eval_lens: tuple[int, ...] | None = None,
        n_symbols: int | None = None,
        p_ignore: float = 0.8,
    ) -> None:
        if isinstance(p_ignore, bool) or not isinstance(p_ignore, int | float):
            raise ValueError(f"{self.name}: p_ignore must be a number, got {p_ignore!r}")
        if not 0.0 <= p_ignore < 1.0:
            raise ValueError(f"{self.name}: p_ignore must be in [0, 1), got {p_ignore}")
        self.p_ignore = float(p_ignore)
        super().__init__(train_len=train_len, eval_lens=eval_lens, n_symbols=n_symbols)

    @property
    def chance(self) -> float:
        return 0.5

    def seq_len(self, n: int) -> int:
        return 2 * n + 2  # n instructions, n - 1 bits, SEP, the read bit, EOS

    def prompt_answer(self, rng: np.random.Generator, batch: int, n: int) -> Pair:
        p_other = (1.0 - self.p_ignore) / 2
        ops = rng.choice(
            np.array([self.write, self.ignore, self.read]),
            size=(batch, n),
            p=[p_other, self.p_ignore, p_other],
        )
        ops[:, 0], ops[:, -1] = self.write, self.read  # (B, n)
        drawn = rng.integers(0, 2, size=(batch, n))  # (B, n): the bit after each instruction
        # each read returns the latest write's bit: carry it forward over non-writes
        written = np.where(ops == self.write, np.arange(n), 0)  # index of a write, else 0
        latest = np.maximum.accumulate(written, axis=1)  # (B, n) index of the latest write
        state = np.take_along_axis(drawn, latest, axis=1)  # (B, n) bit held at each step
        value = np.where(ops == self.read, state, drawn) + self.bits[0]  # (B, n)
        pairs = np.stack([ops, value], axis=2).reshape(batch, 2 * n)  # op b op b ...
        return pairs[:, :-1], pairs[:, -1:]  # the last read's bit is the answer
