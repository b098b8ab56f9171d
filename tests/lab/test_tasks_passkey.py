"""Passkey retrieval (Mohtashami & Jaggi 2023): one MARK in the haystack, its next token the
answer, checked by a plain loop."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.lab.tasks import EOS, FIRST, MARK, SEP, make_task


@pytest.mark.parametrize("n", [2, 3, 16, 64])
def test_the_answer_is_the_token_after_the_one_mark(n: int) -> None:
    task = make_task("passkey")
    batch = task.sample(np.random.default_rng(n), 64, n)
    assert batch.tokens.shape == (64, task.seq_len(n)) and batch.n_prompt == n + 1
    for row in batch.tokens:
        hay = row[:n].tolist()
        assert hay.count(MARK) == 1 and hay.index(MARK) < n - 1
        others = [t for t in hay if t != MARK]
        assert all(FIRST <= t < FIRST + task.n_symbols for t in others)
        assert row[n] == SEP and row[n + 1] == hay[hay.index(MARK) + 1] and row[n + 2] == EOS


def test_the_mark_lands_everywhere_and_values_are_uniform() -> None:
    task = make_task("passkey")
    tokens = task.sample(np.random.default_rng(0), 4000, 10).tokens
    places = np.argmax(tokens[:, :10] == MARK, axis=1)
    assert set(np.unique(places)) == set(range(9))  # 0 .. n - 2: a value always follows
    values = tokens[:, 11] - FIRST
    assert set(np.unique(values)) == set(range(16))
    assert abs(np.bincount(values).max() / 4000 - 1 / 16) < 0.02
    assert task.chance == 1 / 16


def test_bad_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="2 <= min <= max"):
        make_task("passkey", train_len=(1, 4))
    with pytest.raises(ValueError, match="lengths must be ints >= 2"):
        make_task("passkey").sample(np.random.default_rng(0), 2, 1)
