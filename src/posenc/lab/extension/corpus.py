"""The extension lab's text, vocabulary and training rows.

Text: ``pydoc_data.topics`` as the lab's ``lm`` task reads it (``posenc.lab.tasks.lm.corpus``:
topics sorted by name, characters as ids, the first 90% the training split, the rest the
held-out split; nothing downloaded, the same split on every machine).

Vocabulary: the lab's character ids (``FIRST`` .. ``FIRST + len(ALPHABET)``, the last one
"other"), then ``passkey_keys`` key symbols and one ``marker``: the passkey token form of
``posenc.eval.passkey`` (``TokenVocab``) with the characters as filler, so a passkey prompt
shares no id with its key or marker. Training mixes passkey rows into the text rows, laid out
exactly as ``posenc.eval.passkey`` lays out its prompts (a test compares them):
``filler[:b], marker, key, marker, filler[b:], marker`` then the key, ``b = round(d·n)`` for
a depth d drawn uniformly from [0, 1] and n filler tokens; only the key is a target.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ...eval.passkey import TokenVocab, token_prompt
from ..tasks.base import FIRST
from ..tasks.lm import ALPHABET
from ..tasks.lm import corpus as lab_corpus

#: Key symbols of the passkey (the digits of the text form).
PASSKEY_KEYS = 10
#: Target id of a position that is not scored (``F.cross_entropy``'s ``ignore_index``).
IGNORE = -100


@dataclass(frozen=True)
class Vocab:
    """Ids: text characters ``text`` (FIRST ..), keys, then the marker; ``size`` in all."""

    text: tuple[int, ...]
    keys: tuple[int, ...]
    marker: int

    @property
    def size(self) -> int:
        return self.marker + 1

    @property
    def passkey(self) -> TokenVocab:
        """The token form ``posenc.eval.passkey`` evaluates with: filler = the characters."""
        return TokenVocab(self.size, marker=self.marker, keys=self.keys, filler=self.text)


@cache
def vocab() -> Vocab:
    """The one vocabulary of every extension-lab model."""
    first_free = FIRST + len(ALPHABET) + 1  # the lab's characters and its "other" id
    keys = tuple(range(first_free, first_free + PASSKEY_KEYS))
    return Vocab(tuple(range(FIRST, first_free)), keys, first_free + PASSKEY_KEYS)


def corpus() -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) int64 token ids (N,), the lab's deterministic 90/10 split."""
    return lab_corpus()


def text_rows(rng: np.random.Generator, text: np.ndarray, rows: int, n: int) -> np.ndarray:
    """``rows`` windows of ``n`` consecutive tokens from ``text`` at uniform starts (rows, n)."""
    if n > len(text):
        raise ValueError(f"windows of {n} tokens do not fit a text of {len(text)}")
    start = rng.integers(0, len(text) - n + 1, size=rows)
    return text[start[:, None] + np.arange(n)]


def passkey_row(
    rng: np.random.Generator, v: Vocab, prompt: int, digits: int, depth: float
) -> tuple[np.ndarray, np.ndarray]:
    """One passkey prompt of ``prompt`` tokens followed by its key (prompt + digits,), and the
    key (digits,): ``posenc.eval.passkey``'s token layout with the needle at ``depth``.

    Raises: ValueError for a prompt too short to hold the needle and the final marker.
    """
    ids, key, _ = token_prompt(v.passkey, prompt, depth, digits, rng)
    return np.asarray([*ids, *key], dtype=np.int64), np.asarray(key, dtype=np.int64)


def training_rows(
    rng: np.random.Generator,
    text: np.ndarray,
    *,
    rows: int,
    context: int,
    passkey_rows: int,
    digits: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and next-token targets (rows, context): text windows, then ``passkey_rows``
    passkey rows. A passkey row holds a prompt of uniform length in [digits + 3,
    context - digits + 1] (so its answer ends inside the context) and its key, then filler
    that is never scored; its only targets are the key tokens."""
    n_text = rows - passkey_rows
    windows = text_rows(rng, text, n_text, context + 1)  # (n_text, context + 1)
    inputs, targets = [windows[:, :-1]], [windows[:, 1:]]
    v = vocab()
    for _ in range(passkey_rows):
        prompt = int(rng.integers(digits + 3, context - digits + 2))
        ids, key = passkey_row(rng, v, prompt, digits, float(rng.random()))
        pad = rng.choice(v.text, size=context + 1 - len(ids))
        row = np.concatenate([ids, pad])
        target = np.full(context, IGNORE, dtype=np.int64)
        target[prompt - 1 : prompt - 1 + digits] = key  # the final marker predicts key[0]
        inputs.append(row[None, :-1])
        targets.append(target[None])
    return np.concatenate(inputs), np.concatenate(targets)
