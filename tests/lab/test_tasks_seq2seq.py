"""The sequence-to-sequence tasks: hand-checked answers, the lexicon and word order of the
translation, and their place in the registry (out of the presets' decoder set)."""

from __future__ import annotations

import numpy as np

from posenc.lab.presets import FULL_TASKS
from posenc.lab.tasks import DECODER_TASKS, EOS, FIRST, SEP, SEQ2SEQ_TASKS, make_task
from posenc.lab.tasks.seq2seq import Translate


def _split(name: str, n: int, batch: int = 32) -> tuple[np.ndarray, np.ndarray]:
    batch_ = make_task(name).sample(np.random.default_rng(0), batch, n)
    tokens, k = batch_.tokens, batch_.n_prompt
    assert (tokens[:, k - 1] == SEP).all() and (tokens[:, -1] == EOS).all()
    return tokens[:, : k - 1], tokens[:, k:-1]


def test_copy_offset_reads_two_places_on_wrapping_around() -> None:
    prompt, answer = _split("copy_offset", 7)
    for p, a in zip(prompt, answer, strict=True):
        assert a.tolist() == [p[(i + 2) % 7] for i in range(7)]
    prompt, answer = _split("copy_offset", 1)  # one symbol: itself
    np.testing.assert_array_equal(prompt, answer)


def test_translate_maps_each_word_and_puts_the_verb_last() -> None:
    """Source N V N (and N V N)* with nouns FIRST.., verbs FIRST + 8.., "and" FIRST + 16; the
    target's nouns from FIRST + 17, verbs from FIRST + 25, "and" FIRST + 33; clause order kept,
    each clause subject, object, verb, every word through the one lexicon."""
    task = make_task("translate")
    assert isinstance(task, Translate) and task.vocab_size == FIRST + 34
    lex = task.lexicon()
    assert sorted(lex.tolist()) == list(range(8))
    np.testing.assert_array_equal(lex, Translate().lexicon())  # fixed: the same every build
    prompt, answer = _split("translate", 3)
    assert prompt.shape == answer.shape == (32, 11) and task.seq_len(3) == 24
    for src, tgt in zip(prompt, answer, strict=True):
        clauses = [src[4 * c : 4 * c + 3] - FIRST for c in range(3)]
        assert all(src[4 * c + 3] == FIRST + 16 for c in range(2))
        assert all(tgt[4 * c + 3] == FIRST + 33 for c in range(2))
        for c, (s, v, o) in enumerate(clauses):
            assert s < 8 and 8 <= v < 16 and o < 8
            want = [FIRST + 17 + lex[s], FIRST + 17 + lex[o], FIRST + 25 + lex[v - 8]]
            assert tgt[4 * c : 4 * c + 3].tolist() == want


def test_seq2seq_tasks_are_named_by_sweeps_not_by_the_presets() -> None:
    assert set(SEQ2SEQ_TASKS) == {"copy_offset", "translate"}
    assert not set(SEQ2SEQ_TASKS) & set(DECODER_TASKS)
    assert not set(SEQ2SEQ_TASKS) & set(FULL_TASKS)
    assert make_task("translate").eval_lens == (4, 6, 8, 16)  # 1x, 1.5x, 2x, 4x clauses
