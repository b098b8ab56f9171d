"""The extension lab's text split, vocabulary and training rows (passkey rows laid out as
``posenc.eval.passkey`` lays out its prompts)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from posenc.eval import passkey
from posenc.eval.models import CausalLM
from posenc.lab.extension.corpus import IGNORE, corpus, passkey_row, training_rows, vocab
from posenc.lab.tasks.lm import ALPHABET
from posenc.models import TinyTransformer


def test_split_is_deterministic_90_10_and_in_the_vocabulary() -> None:
    from pydoc_data.topics import topics

    train, held = corpus()
    text = "\n".join(topics[k] for k in sorted(topics))
    assert len(train) + len(held) == len(text)
    assert len(train) == int(0.9 * len(text))
    # the same bytes on every call (and machine: built from sorted topics, no randomness)
    digest = lambda a: hashlib.sha256(a.tobytes()).hexdigest()  # noqa: E731
    again = corpus()
    assert digest(again[0]) == digest(train) and digest(again[1]) == digest(held)
    v = vocab()
    ids = set(np.unique(np.concatenate([train, held])).tolist())
    assert ids <= set(v.text)
    assert not ids & {*v.keys, v.marker}

    # ids of the characters, written from the definition: alphabet index + FIRST, else "other"
    def encode(chars: str) -> list[int]:
        return [v.text[ALPHABET.index(c)] if c in ALPHABET else v.text[-1] for c in chars]

    assert train[:300].tolist() == encode(text[:300])
    assert held[:300].tolist() == encode(text[len(train) : len(train) + 300])


def test_vocabulary_sets_are_disjoint_and_form_the_eval_token_vocab() -> None:
    v = vocab()
    assert len(v.keys) == 10 and v.size == v.marker + 1
    assert not set(v.text) & set(v.keys) and v.marker not in v.text
    tv = v.passkey
    assert (tv.size, tv.marker, tv.keys, tv.filler) == (v.size, v.marker, v.keys, v.text)


class _Recorder(CausalLM):
    """Records the prompts ``posenc.eval.passkey`` feeds a model; answers zeros."""

    def __init__(self) -> None:
        super().__init__(TinyTransformer(vocab_size=vocab().size, pe="nope", d_model=8, n_heads=1))
        self.prompts: list[list[int]] = []

    def greedy(self, ids: torch.Tensor, n: int) -> torch.Tensor:
        self.prompts.append(ids[0].tolist())
        return torch.zeros(1, n, dtype=torch.long)


def _layout(ids: list[int]) -> list[str]:
    """Each token's class: M marker, K key, F filler."""
    v = vocab()
    return ["M" if i == v.marker else "K" if i in v.keys else "F" for i in ids]


@pytest.mark.parametrize("depth", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("length", [12, 33])
def test_training_passkey_rows_match_the_evaluated_prompts(length: int, depth: float) -> None:
    """Same length and depth: markers, key and filler at the same places as in the prompts
    ``posenc.eval.passkey`` evaluates (its token form), then the key."""
    digits, rec = 3, _Recorder()
    passkey(rec, vocab().passkey, lengths=[length], depths=[depth], trials=1, digits=digits)
    (evaluated,) = rec.prompts
    row, key = passkey_row(np.random.default_rng(0), vocab(), length, digits, depth)
    assert len(evaluated) == length and len(row) == length + digits
    assert _layout(row[:length].tolist()) == _layout(evaluated)
    assert row[length:].tolist() == key.tolist()
    first = _layout(evaluated).index("M")
    assert row[first + 1 : first + 1 + digits].tolist() == key.tolist()


def test_training_rows_score_text_everywhere_and_passkeys_only_on_the_key() -> None:
    rng = np.random.default_rng(3)
    text = corpus()[0]
    x, y = training_rows(rng, text, rows=6, context=40, passkey_rows=2, digits=2)
    assert x.shape == y.shape == (6, 40)
    np.testing.assert_array_equal(x[:4, 1:], y[:4, :-1])  # text: next token everywhere
    v = vocab()
    for row, target in zip(x[4:], y[4:], strict=True):
        scored = np.flatnonzero(target != IGNORE)
        assert len(scored) == 2 and scored[-1] <= 39  # the answer ends inside the context
        assert row[scored[0]] == v.marker  # the final marker predicts the first key token
        first = _layout(row.tolist()).index("M")
        assert target[scored].tolist() == row[first + 1 : first + 3].tolist()


def test_short_prompts_and_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="needs >= 5 tokens"):
        passkey_row(np.random.default_rng(0), vocab(), 4, 2, 0.5)
    with pytest.raises(ValueError, match="do not fit"):
        training_rows(
            np.random.default_rng(0), np.arange(10), rows=2, context=20, passkey_rows=0, digits=2
        )
