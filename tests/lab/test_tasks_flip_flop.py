"""Flip-flop (Liu et al. 2023): every read returns the latest write, checked by a plain loop."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.lab.tasks import EOS, SEP, make_task
from posenc.lab.tasks.flip_flop import FlipFlop


def _check_row(row: np.ndarray, n: int) -> None:
    """Walk one sample left to right as the paper defines FFL: reads echo the last write."""
    t = FlipFlop
    ops, held = row[0 : 2 * n - 1 : 2], None
    assert ops[0] == t.write and ops[-1] == t.read
    for j, op in enumerate(ops):
        bit = row[2 * j + 1] if j < n - 1 else row[2 * n]  # the last read's bit is the answer
        assert op in (t.write, t.ignore, t.read) and bit in t.bits
        if op == t.write:
            held = bit
        elif op == t.read:
            assert bit == held
    assert row[2 * n - 1] == SEP and row[-1] == EOS


@pytest.mark.parametrize("n", [2, 3, 8, 40])
def test_every_read_returns_the_latest_write(n: int) -> None:
    task = make_task("flip_flop")
    batch = task.sample(np.random.default_rng(n), 64, n)
    assert batch.tokens.shape == (64, task.seq_len(n))
    assert batch.n_prompt == 2 * n  # n instructions, n - 1 bits, SEP
    for row in batch.tokens:
        _check_row(row, n)


def test_instruction_frequencies_follow_p_ignore() -> None:
    task = make_task("flip_flop", p_ignore=0.5)
    ops = task.sample(np.random.default_rng(0), 2000, 20).tokens[:, 2:37:2]  # ops 1 .. n - 2
    share = (ops == FlipFlop.ignore).mean()
    assert abs(share - 0.5) < 0.01  # 36000 draws: 5 standard deviations is 0.013
    assert abs((ops == FlipFlop.write).mean() - 0.25) < 0.01


def test_answers_are_balanced_bits() -> None:
    task = make_task("flip_flop")
    answers = task.sample(np.random.default_rng(1), 4000, 12).tokens[:, -2]
    assert set(np.unique(answers)) == set(FlipFlop.bits)
    assert abs((answers == FlipFlop.bits[1]).mean() - 0.5) < 0.03
    assert task.chance == 0.5


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"p_ignore": 1.0}, "p_ignore must be in"),
        ({"p_ignore": -0.1}, "p_ignore must be in"),
        ({"p_ignore": "0.8"}, "p_ignore must be a number"),
        ({"n_symbols": 6}, "the alphabet is"),
        ({"train_len": (1, 4)}, "2 <= min <= max"),
    ],
)
def test_bad_settings_are_refused(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_task("flip_flop", **config)
