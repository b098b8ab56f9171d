"""Character-level language modelling on English text that ships with Python.

The corpus is ``pydoc_data.topics`` (the interactive help's topic pages: ~465k characters of
technical English, PSF licence); nothing is downloaded. Topics sorted by name are joined;
the first 90% of characters is the training split, the rest the evaluation split. Evaluation
reports the loss per position bucket of windows up to 8x the training length, the curve of
the ALiBi paper (Press et al. 2022, arXiv:2108.12409).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .base import FIRST, Batch, Split, Task

#: newline, printable ASCII; anything else maps to one "other" symbol.
ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))


@cache
def corpus() -> tuple[np.ndarray, np.ndarray]:
    """(train, eval) int64 token arrays of the text corpus."""
    from pydoc_data.topics import topics

    text = "\n".join(topics[k] for k in sorted(topics))
    index = {c: i for i, c in enumerate(ALPHABET)}
    other = len(ALPHABET)
    ids = np.array([index.get(c, other) for c in text], dtype=np.int64) + FIRST
    cut = int(0.9 * len(ids))
    return ids[:cut], ids[cut:]


class CharLM(Task):
    """Next-character prediction on windows of n characters.

    n=12:  "a function d" -> targets "function de"
    """

    name = "lm"
    kind = "lm"
    source = (
        "Press et al. 2022 (arXiv:2108.12409): loss by position past the training length; "
        "character LM on Python's pydoc topics, not their WikiText-103 split"
    )
    default_symbols = len(ALPHABET) + 1
    fixed_symbols = "the alphabet is fixed"
    eval_factors = (1.0, 2.0, 4.0, 8.0)

    @property
    def default_train_len(self) -> tuple[int, int]:
        return (64, 64)

    def seq_len(self, n: int) -> int:
        return n + 1  # n inputs and the character after them

    def check_length(self, n: int) -> None:
        super().check_length(n)
        limit = len(corpus()[1]) - 2  # a window is n + 1 characters from a split position
        if n > limit:
            raise ValueError(f"lm: windows must be shorter than the eval split ({limit}), got {n}")

    def _sample(self, rng: np.random.Generator, batch: int, n: int, split: Split) -> Batch:
        text = corpus()[0 if split == "train" else 1]
        start = rng.integers(0, len(text) - n - 1, size=batch)
        return Batch(text[start[:, None] + np.arange(n + 1)])  # (B, n + 1)
