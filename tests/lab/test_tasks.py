"""Task generators: shapes, determinism by seed, hand-checked answers, refused settings."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.lab.tasks import EOS, FIRST, MARK, SEP, make_task, task_names


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _split(task_name: str, n: int, batch: int = 64, **config: object):
    task = make_task(task_name, **config)
    b = task.sample(_rng(), batch, n)
    prompt, answer = b.tokens[:, : b.n_prompt - 1], b.tokens[:, b.n_prompt : -1]
    return task, b, prompt, answer


@pytest.mark.parametrize("name", task_names())
def test_shapes_and_determinism(name: str) -> None:
    task = make_task(name)
    n = task.train_len[1]
    a, b = task.sample(_rng(3), 5, n), task.sample(_rng(3), 5, n)
    assert a.tokens.shape == (5, task.seq_len(n))
    assert a.tokens.dtype == np.int64
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert a.tokens.min() >= 0 and a.tokens.max() < task.vocab_size
    c = task.sample(_rng(4), 5, n)
    assert not np.array_equal(a.tokens, c.tokens)
    if task.kind == "decoder":
        assert (a.tokens[:, a.n_prompt - 1] == SEP).all() and (a.tokens[:, -1] == EOS).all()
    if task.kind == "classify":
        assert a.labels is not None and a.labels.shape == (5,)
        assert 0 <= a.labels.min() and a.labels.max() < task.n_classes


def test_default_eval_lengths_are_1_15_2_4_times_train() -> None:
    assert make_task("copy", train_len=(1, 8)).eval_lens == (8, 12, 16, 32)
    assert make_task("lm").eval_lens == (64, 128, 256, 512)


def test_copy_rep_copy_reverse_sort_answers() -> None:
    _, _, p, a = _split("copy_rep", 6)
    assert (p == p[:, :1]).all() and (a == p).all()
    _, _, p, a = _split("copy", 6)
    np.testing.assert_array_equal(a, p)
    _, _, p, a = _split("reverse", 6)
    np.testing.assert_array_equal(a, p[:, ::-1])
    _, _, p, a = _split("sort", 6)
    np.testing.assert_array_equal(a, np.sort(p, axis=1))
    assert all(len(set(row)) == 6 for row in p.tolist())  # distinct tokens


def test_addition_hand_checked() -> None:
    task, _b, p, a = _split("addition", 3, batch=200)
    digits = lambda row: int("".join(str(d - FIRST) for d in reversed(row)))  # noqa: E731
    for prow, arow in zip(p, a, strict=False):
        assert prow[3] == task.plus  # d d d + d d d
        assert digits(prow[:3]) + digits(prow[4:]) == digits(arow)
    # 572 + 465 = 1037, written least significant digit first
    x = np.array([[2, 7, 5], [5, 6, 4]]) + FIRST
    assert digits(x[0]) + digits(x[1]) == 1037


def test_parity_and_induction_answers() -> None:
    _, _, p, a = _split("parity", 7)
    np.testing.assert_array_equal(a[:, 0] - FIRST, (p - FIRST).sum(1) % 2)
    task, _, p, a = _split("induction", 5)
    keys, values, query = p[:, 0:-1:2], p[:, 1:-1:2], p[:, -1]
    for k, v, q, ans in zip(keys, values, query, a[:, 0], strict=False):
        assert len(set(k)) == 5 and ans == v[list(k).index(q)]
    assert values.min() >= FIRST + task.n_symbols  # values and keys use separate ids


def test_ascending_labels_match_order() -> None:
    task = make_task("ascending")
    b = task.sample(_rng(), 256, 6)
    is_sorted = (np.diff(b.tokens, axis=1) > 0).all(axis=1)
    np.testing.assert_array_equal(is_sorted, b.labels == 1)
    assert 0.3 < b.labels.mean() < 0.7
    # both classes hold the same multiset of symbols: only order differs
    assert all(len(set(r)) == 6 for r in b.tokens.tolist())


def test_offset_labels_are_mark_distance_within_training_range() -> None:
    task = make_task("offset", train_len=(2, 8))
    b = task.sample(_rng(), 128, 32)
    marks = [np.flatnonzero(row == MARK) for row in b.tokens]
    assert all(len(m) == 2 for m in marks)
    np.testing.assert_array_equal([m[1] - m[0] for m in marks], b.labels)
    assert b.labels.max() < task.n_classes == 8


def test_lm_windows_are_shifted_text() -> None:
    task = make_task("lm", train_len=(16, 16))
    b = task.sample(_rng(), 4, 16)
    assert b.tokens.shape == (4, 17)
    e = task.sample(_rng(), 4, 16, split="eval")
    assert not np.array_equal(b.tokens, e.tokens)


@pytest.mark.parametrize(
    ("name", "config", "match"),
    [
        ("sort", {"n_symbols": 10}, "length 12 needs 12 distinct tokens but n_symbols is 10"),
        ("ascending", {"n_symbols": 16, "train_len": (2, 8)}, "n_symbols is 16"),
        ("induction", {"n_symbols": 4}, "distinct keys"),
        ("copy", {"train_len": (5, 3)}, "min <= max"),
        ("copy", {"train_len": (0, 3)}, "1 <= min"),
        ("copy", {"train_len": 8}, r"train_len must be \(min, max\) ints"),
        ("ascending", {"train_len": (1, 8)}, "2 <= min"),
        ("addition", {"n_symbols": 12}, "base 10"),
        ("parity", {"n_symbols": 3}, "bits"),
        ("lm", {"n_symbols": 5}, "alphabet is fixed"),
        ("copy", {"n_symbols": 0}, "n_symbols must be an int >= 1"),
        ("nope", {}, "unknown task 'nope'"),
    ],
)
def test_impossible_settings_are_refused(name: str, config: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_task(name, **config)


def test_sample_rejects_bad_length() -> None:
    with pytest.raises(ValueError, match="lengths must be ints >= 1"):
        make_task("copy").sample(_rng(), 2, 0)


def test_lm_accepts_only_windows_it_can_draw() -> None:
    from posenc.lab.tasks.lm import corpus

    longest = len(corpus()[1]) - 2  # n inputs and the next character: n + 1 <= split
    task = make_task("lm", eval_lens=(longest,))
    assert task.sample(_rng(), 2, longest, split="eval").tokens.shape == (2, longest + 1)
    with pytest.raises(ValueError, match="windows must be shorter than the eval split"):
        make_task("lm", eval_lens=(longest + 1,))
