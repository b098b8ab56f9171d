"""Passkey retrieval: a number hidden in filler text, asked for at the end.

The test of Mohtashami & Jaggi 2023 (Landmark Attention, arXiv:2305.16300), as LongLoRA (Chen
et al. 2023, arXiv:2309.12307) runs it: an instruction, filler sentences, the needle "The pass
key is 71432. Remember it. 71432 is the pass key." at a given depth of the filler, more filler,
then "What is the pass key? The pass key is". The model continues greedily; the first number in
its answer must be the key. A prompt of length L is the longest with whole filler sentences
that stays within L tokens; depth d puts round(d·n) of its n filler sentences before the needle.

Models without a text tokenizer (posenc or lab models over a small vocabulary) take the token
form (``TokenVocab``): filler tokens drawn at random, the needle ``marker k_1 .. k_K marker``
at depth d, and the prompt's last token ``marker``; the model must continue with k_1 .. k_K
(an induction-head copy). Its prompt is exactly L tokens.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from .._validate import check_positive_int, check_seed
from .models import CausalLM, Tokenizer, as_causal_lm, as_tokenizer
from .progress import progress_bar

#: Digits of a text passkey at most: the key is drawn as one int64 (< 10**18).
MAX_TEXT_DIGITS = 18

INSTRUCTION = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "them. I will quiz you about the important information there."
)
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key? The pass key is"


@dataclass(frozen=True)
class TokenVocab:
    """The token form of the passkey over a vocabulary of ``size`` ids: ``marker`` (default
    the last id), key symbols ``keys`` (default the 10 ids below it) and ``filler`` ids
    (default all others). The three sets must be disjoint.

    Raises: ValueError for ids outside 0..size-1, overlapping sets, fewer than 2 keys or no
    filler id.
    """

    size: int
    marker: int | None = None
    keys: tuple[int, ...] | None = None
    filler: tuple[int, ...] | None = None
    _resolved: tuple[int, tuple[int, ...], tuple[int, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_positive_int(self.size, "size", minimum=4)
        marker = self.size - 1 if self.marker is None else self.marker
        keys = tuple(range(max(0, marker - 10), marker)) if self.keys is None else self.keys
        filler = self.filler
        if filler is None:
            filler = tuple(i for i in range(self.size) if i != marker and i not in keys)
        ids = [marker, *keys, *filler]
        if any(not 0 <= i < self.size for i in ids):
            raise ValueError(f"passkey token ids must lie in 0..{self.size - 1}, got {ids}")
        if len(set(ids)) != len(ids) or len(keys) < 2 or not filler:
            raise ValueError(
                "TokenVocab needs a marker, >= 2 key ids and >= 1 filler id, all distinct; got "
                f"marker {marker}, keys {list(keys)}, filler {list(filler)}"
            )
        object.__setattr__(self, "_resolved", (marker, tuple(keys), tuple(filler)))


@dataclass(frozen=True)
class Trial:
    """One prompt: its ``key``, what the model ``answered`` (text, or token ids joined by
    spaces), whether it was ``correct``, the prompt's ``tokens`` and the token index
    ``needle_at`` where the needle starts."""

    length: int
    depth: float
    key: str
    answer: str
    correct: bool
    tokens: int
    needle_at: int


@dataclass(frozen=True)
class PasskeyResult:
    """``accuracy[i][j]``: fraction of trials answered right at ``depths[i]``, ``lengths[j]``."""

    model: str
    form: str  # "text" or "tokens"
    lengths: list[int]
    depths: list[float]
    accuracy: list[list[float]]
    trials: list[Trial]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "passkey", **asdict(self)}


def passkey(
    model: Any,
    vocab: Any = None,
    *,
    lengths: Sequence[int],
    depths: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    trials: int = 3,
    digits: int = 5,
    seed: int = 0,
    progress: bool | None = None,
) -> PasskeyResult:
    """Passkey retrieval accuracy of ``model`` at each prompt length and needle depth.

    ``vocab``: a tokenizer (transformers, or ``encode``/``decode``) for the text form, a
    ``TokenVocab`` or a vocabulary size for the token form; default the model's own
    tokenizer (``load_model`` attaches it) or else ``TokenVocab(model vocabulary)``.
    ``digits``: digits of the key (text) or key tokens (token form); ``trials`` keys per cell,
    drawn from ``seed``.
    Raises: ValueError for depths outside [0, 1], a length too short for the prompt without
    filler, bad counts, a seed outside [0, 2**32) or a text key of more than 18 digits.
    """
    lm = as_causal_lm(model)
    form = _form(lm, vocab)
    check_positive_int(trials, "trials")
    check_positive_int(digits, "digits")
    check_seed(seed)
    if not isinstance(form, TokenVocab) and digits > MAX_TEXT_DIGITS:  # an int64 draw
        raise ValueError(f"digits must be in 1..{MAX_TEXT_DIGITS} for a text passkey, got {digits}")
    if any(not 0.0 <= d <= 1.0 for d in depths):
        raise ValueError(f"depths must lie in [0, 1], got {list(depths)}")
    for L in lengths:
        check_positive_int(L, "length")
    rng = np.random.default_rng(seed)
    done: list[Trial] = []
    with progress_bar(len(lengths) * len(depths) * trials, "passkey", progress) as step:
        for L in lengths:
            for d in depths:
                for _ in range(trials):
                    trial = (
                        _text_trial(lm, form, L, d, digits, rng)
                        if not isinstance(form, TokenVocab)
                        else _token_trial(lm, form, L, d, digits, rng)
                    )
                    done.append(trial)
                    step(f"passkey at length {L}, depth {d:g}")
    accuracy = [
        [
            float(np.mean([t.correct for t in done if (t.length, t.depth) == (L, d)]))
            for L in lengths
        ]
        for d in depths
    ]
    kind = "tokens" if isinstance(form, TokenVocab) else "text"
    return PasskeyResult(lm.name, kind, list(lengths), [float(d) for d in depths], accuracy, done)


def _form(lm: CausalLM, vocab: Any) -> Tokenizer | TokenVocab:
    if vocab is None:
        return lm.tokenizer if lm.tokenizer is not None else TokenVocab(lm.vocab_size)
    if isinstance(vocab, TokenVocab):
        return vocab
    if isinstance(vocab, int) and not isinstance(vocab, bool):
        return TokenVocab(vocab)
    return as_tokenizer(vocab)


def text_prompt(key: str, n_filler: int, depth: float) -> tuple[str, str]:
    """(text before the needle, whole prompt) with ``n_filler`` filler sentences, round(depth ·
    n_filler) of them before the needle."""
    before = round(depth * n_filler)
    head = "\n".join([INSTRUCTION, " ".join([FILLER] * before)]) + "\n"
    rest = "\n".join([NEEDLE.format(key=key), " ".join([FILLER] * (n_filler - before)), QUESTION])
    return head, head + rest


def _text_trial(
    lm: CausalLM, tok: Tokenizer, L: int, depth: float, digits: int, rng: np.random.Generator
) -> Trial:
    key = str(int(rng.integers(10 ** (digits - 1), 10**digits)))
    n = _most_filler(tok, key, L, depth)
    head, prompt = text_prompt(key, n, depth)
    ids = tok.encode(prompt)
    answer_len = len(tok.encode(" " + key)) + 2  # the key, with room for a space or a BOS
    answer = tok.decode(lm.greedy(torch.tensor([ids]), answer_len)[0].tolist())
    found = re.search(r"\d+", answer)
    correct = found is not None and found.group() == key
    return Trial(L, depth, key, answer, correct, len(ids), len(tok.encode(head)))


def _most_filler(tok: Tokenizer, key: str, L: int, depth: float) -> int:
    """The largest filler count whose prompt fits in L tokens (binary search)."""
    fits = lambda n: len(tok.encode(text_prompt(key, n, depth)[1])) <= L  # noqa: E731
    if not fits(0):
        need = len(tok.encode(text_prompt(key, 0, depth)[1]))
        raise ValueError(f"length {L} is shorter than the passkey prompt without filler ({need})")
    lo, hi = 0, 1
    while fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _token_trial(
    lm: CausalLM, vocab: TokenVocab, L: int, depth: float, digits: int, rng: np.random.Generator
) -> Trial:
    ids, key, before = token_prompt(vocab, L, depth, digits, rng)
    answer = lm.greedy(torch.tensor([ids]), digits)[0].tolist()
    text = " ".join(map(str, key))
    return Trial(L, depth, text, " ".join(map(str, answer)), answer == key, len(ids), before)


def token_prompt(
    vocab: TokenVocab, L: int, depth: float, digits: int, rng: np.random.Generator
) -> tuple[list[int], list[int], int]:
    """(ids, key, b): ``filler[:b], marker, key, marker, filler[b:], marker``, L tokens, b =
    round(depth·n) of its n filler tokens. Raises: ValueError for L < digits + 3."""
    marker, keys, filler = vocab._resolved
    n_filler = L - (digits + 2) - 1  # needle (marker, key, marker) and the final marker
    if n_filler < 0:
        raise ValueError(
            f"length {L} is shorter than the token passkey prompt (needs >= {digits + 3} tokens)"
        )
    key = [int(k) for k in rng.choice(keys, size=digits)]
    before = round(depth * n_filler)
    noise = [int(f) for f in rng.choice(filler, size=n_filler)]
    return [*noise[:before], marker, *key, marker, *noise[before:], marker], key, before
